"""Named datasets with public schemas, the blobs generator, and splits across parties.

Names resolve, in order: ``blobs:...`` (generated), a path to a ``.npz``/``.csv`` file, a file
``NAME.npz`` in ``data_dir`` (default ``../shared/data`` beside the project when it exists), then the
copies bundled in ``dpfed/data``. Every dataset comes with a :class:`~dpfed.data.schema.Schema` whose
domains and bounds are public (see ``_PUBLIC_BOUNDS``), never computed from the records.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpfed.data.schema import DataValidationError, Feature, Schema

__all__ = ["Dataset", "load_dataset", "make_blobs", "split_parties", "kfold_indices", "default_data_dir"]

_BUNDLED = Path(__file__).resolve().parent

# Public bounds of numeric columns, from the data's documentation rather than from the records.
_PUBLIC_BOUNDS: dict[str, dict[str, tuple[float, float]]] = {
    "adult": {  # census codebook: ages of adults, top-codes 99999 (gains) and 99 (hours)
        "age": (16.0, 100.0), "fnlwgt": (0.0, 1.5e6), "education-num": (1.0, 16.0),
        "capital-gain": (0.0, 99999.0), "capital-loss": (0.0, 5000.0), "hours-per-week": (1.0, 99.0),
    },
    "segmentation": {  # 3x3 regions of 256x256 RGB images (UCI .names); derived colour features
        "region-centroid-col": (0.0, 256.0), "region-centroid-row": (0.0, 256.0),
        "region-pixel-count": (0.0, 9.0), "short-line-density-5": (0.0, 1.0), "short-line-density-2": (0.0, 1.0),
        "vedge-mean": (0.0, 255.0), "vedge-sd": (-1.0, 1500.0), "hedge-mean": (0.0, 255.0), "hedge-sd": (-1.0, 1500.0),
        "intensity-mean": (0.0, 255.0), "rawred-mean": (0.0, 255.0), "rawblue-mean": (0.0, 255.0),
        "rawgreen-mean": (0.0, 255.0), "exred-mean": (-255.0, 255.0), "exblue-mean": (-255.0, 255.0),
        "exgreen-mean": (-255.0, 255.0), "value-mean": (0.0, 255.0), "saturation-mean": (0.0, 1.0),
        "hue-mean": (-math.pi, math.pi),
    },
}
_PIXEL_SETS = {"mnist", "satimage"}  # uint8 pixels: public bounds [0, 255]
_NO_SPLIT_TEST_FRACTION = 1.0 / 3.0   # public, fixed split for sets published without one
_NO_SPLIT_SEED = 20180425


@dataclass(frozen=True)
class Dataset:
    """Train/test arrays (float64 features, int64 labels) with their public schema."""

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    schema: Schema
    official_split: bool = True

    @property
    def X(self) -> np.ndarray:
        """All records (train then test, or the one set when both name it), for cross-validation."""
        return self.X_train if self.X_test is self.X_train else np.concatenate([self.X_train, self.X_test])

    @property
    def y(self) -> np.ndarray:
        return self.y_train if self.y_test is self.y_train else np.concatenate([self.y_train, self.y_test])


def default_data_dir() -> Path | None:
    """``$DPFED_DATA_DIR``, else ``../shared/data`` beside the project root (or the cwd), if it exists."""
    env = os.environ.get("DPFED_DATA_DIR")
    candidates = [Path(env)] if env else []
    root = Path(__file__).resolve().parent.parent.parent
    candidates += [root.parent / "shared" / "data", Path.cwd().parent / "shared" / "data",
                   Path.cwd() / "shared" / "data"]
    for c in candidates:
        if c.is_dir():
            return c
    return None


def load_dataset(name: str, data_dir: str | os.PathLike | None = None) -> Dataset:
    """Load a dataset by name or path (see module docstring)."""
    if name.startswith("blobs"):
        return make_blobs_dataset(name)
    path = Path(name)
    if path.suffix in {".npz", ".csv"} and path.exists():
        return _load_path(path)
    dirs = [Path(data_dir)] if data_dir is not None else []
    dd = default_data_dir()
    if dd is not None and data_dir is None:
        dirs.append(dd)
    dirs.append(_BUNDLED)
    for d in dirs:
        p = d / f"{name}.npz"
        if p.exists():
            return _load_npz(p, name)
    raise FileNotFoundError(f"dataset {name!r} not found in {', '.join(str(d) for d in dirs)} "
                            "(give a .npz/.csv path, a blobs:... spec, or --data-dir)")


def _load_path(path: Path) -> Dataset:
    if path.suffix == ".npz":
        return _load_npz(path, path.stem)
    raise DataValidationError(f"{path}: a CSV file needs a schema; load it through a party config "
                              "(dpfed.data.files.load_table) rather than by name")


def _schema_for(name: str, z: np.lib.npyio.NpzFile, d: int, n_classes: int) -> Schema:
    if "schema_json" in z.files:
        return Schema.from_json(str(z["schema_json"]))
    names = [str(s) for s in z["feature_names"]] if "feature_names" in z.files else [f"x{j}" for j in range(d)]
    is_cat = z["is_categorical"] if "is_categorical" in z.files else (
        np.ones(d, bool) if "n_categories" in z.files else np.zeros(d, bool))
    n_cat = z["n_categories"] if "n_categories" in z.files else np.zeros(d, np.int64)
    bounds = _PUBLIC_BOUNDS.get(name, {})
    feats = []
    for j in range(d):
        if is_cat[j]:
            feats.append(Feature(names[j], "categorical", categories=int(n_cat[j])))
        elif name in _PIXEL_SETS:
            feats.append(Feature(names[j], "numeric", lower=0.0, upper=255.0))
        elif names[j] in bounds:
            lo, hi = bounds[names[j]]
            feats.append(Feature(names[j], "numeric", lower=lo, upper=hi))
        else:
            raise DataValidationError(f"dataset {name!r}: no public bounds for numeric column {names[j]!r}; "
                                      "store a 'schema_json' entry in the .npz")
    class_names = tuple(str(c) for c in z["class_names"]) if "class_names" in z.files else ()
    return Schema(tuple(feats), n_classes=n_classes, class_names=class_names if len(class_names) == n_classes else ())


def _load_npz(path: Path, name: str) -> Dataset:
    with np.load(path, allow_pickle=False) as z:
        if "X_train" in z.files:
            Xtr, ytr, Xte, yte = (z[k] for k in ("X_train", "y_train", "X_test", "y_test"))
            official = True
        elif "X" in z.files:
            X, y = z["X"], z["y"]
            rng = np.random.default_rng(_NO_SPLIT_SEED)  # public split, not a privacy mechanism
            perm = rng.permutation(len(X))
            n_test = int(round(len(X) * _NO_SPLIT_TEST_FRACTION))
            Xte, yte, Xtr, ytr = X[perm[:n_test]], y[perm[:n_test]], X[perm[n_test:]], y[perm[n_test:]]
            official = False
        else:
            raise DataValidationError(f"{path}: expected arrays X_train/y_train/X_test/y_test or X/y")
        y_all = np.concatenate([ytr, yte])
        n_classes = int(len(z["class_names"])) if "class_names" in z.files else int(y_all.max()) + 1
        schema = _schema_for(name, z, Xtr.shape[1], n_classes)
    return Dataset(name, Xtr.astype(np.float64), ytr.astype(np.int64), Xte.astype(np.float64),
                   yte.astype(np.int64), schema, official)


def make_blobs(n: int, d: int, k: int, seed: int = 0, box: float = 10.0, domain: float = 15.0
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """k centers uniform in [-box, box]^d, equal-size unit-variance Gaussian clusters, clipped to
    the public domain [-domain, domain]^d. Returns (X, labels, centers)."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-box, box, size=(k, d))
    labels = np.repeat(np.arange(k), -(-n // k))[:n]
    rng.shuffle(labels)
    X = centers[labels] + rng.standard_normal((n, d))
    np.clip(X, -domain, domain, out=X)
    return X, labels.astype(np.int64), centers


def make_blobs_dataset(spec: str) -> Dataset:
    """``blobs:n=100000,d=10,k=5,seed=0`` -> a Dataset (train = test = the generated points)."""
    params = {"n": 100000, "d": 10, "k": 5, "seed": 0}
    body = spec.split(":", 1)[1] if ":" in spec else ""
    for part in filter(None, body.split(",")):
        key, _, val = part.partition("=")
        if key not in params:
            raise ValueError(f"blobs spec: unknown key {key!r} (n, d, k, seed)")
        params[key] = int(float(val))
    X, y, _ = make_blobs(params["n"], params["d"], params["k"], params["seed"])
    schema = Schema.numeric_box(params["d"], -15.0, 15.0, n_classes=params["k"])
    return Dataset(spec, X, y, X, y, schema, official_split=False)


def split_parties(X: np.ndarray, y: np.ndarray, parties: int, how: str = "iid",
                  rng: np.random.Generator | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Split records disjointly across parties: ``iid`` (random, equal sizes) or ``dirichlet:ALPHA``
    (label skew: each class is spread over parties with Dirichlet(ALPHA) proportions)."""
    if parties < 1:
        raise ValueError("parties must be >= 1")
    if len(X) < parties:
        raise ValueError(f"cannot split {len(X)} records over {parties} parties")
    rng = rng if rng is not None else np.random.default_rng(0)
    if how == "iid":
        idx = np.array_split(rng.permutation(len(X)), parties)
    elif how.startswith("dirichlet:"):
        alpha = float(how.split(":", 1)[1])
        if not alpha > 0:
            raise ValueError("dirichlet:ALPHA needs ALPHA > 0")
        buckets: list[list[np.ndarray]] = [[] for _ in range(parties)]
        for c in np.unique(y):
            members = rng.permutation(np.flatnonzero(y == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(parties, alpha)))[:-1] * len(members)).astype(int)
            for p, part in enumerate(np.split(members, cuts)):
                buckets[p].append(part)
        idx = [np.sort(np.concatenate(b)) for b in buckets]
        if any(len(i) == 0 for i in idx):
            raise ValueError(f"dirichlet:{alpha} left a party without records; use more data or a larger ALPHA")
    else:
        raise ValueError(f"unknown split {how!r}: use 'iid' or 'dirichlet:ALPHA'")
    return [(X[i], y[i]) for i in idx]


def kfold_indices(n: int, k: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """K disjoint folds of a public random permutation: list of (train_idx, test_idx)."""
    if not 2 <= k <= n:
        raise ValueError(f"k-fold needs 2 <= k <= n, got k={k}, n={n}")
    folds = np.array_split(np.random.default_rng(seed).permutation(n), k)
    return [(np.sort(np.concatenate(folds[:i] + folds[i + 1:])), np.sort(folds[i])) for i in range(k)]
