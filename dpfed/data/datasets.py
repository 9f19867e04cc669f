"""Named datasets with public schemas, the blobs generator, and splits across parties.

Names resolve, in order: ``blobs:...`` (generated), a path to a ``.npz``/``.csv`` file, a file
``NAME.npz`` or ``NAME.csv`` in :func:`search_dirs` (``--data-dir``, ``$DPFED_DATA_DIR``, the current
directory, ``../shared/data``, the bundled folder). Every dataset comes with a
:class:`~dpfed.data.schema.Schema` whose domains and bounds are public (a schema file, see
:func:`load_dataset`), never computed from the records.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dpfed.data.files import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS, check_real, load_table, read_npz
from dpfed.data.schema import DataValidationError, Feature, Schema

__all__ = ["Dataset", "load_dataset", "make_blobs", "split_parties", "kfold_indices", "default_data_dir"]

_BUNDLED = Path(__file__).resolve().parent

_SCHEMAS = _BUNDLED / "schemas"   # published schemas of the benchmark sets (NAME.schema.json)
DEFAULT_TEST_FRACTION = 1.0 / 3.0   # public, fixed split for sets published without one
DEFAULT_SPLIT_SEED = 20180425
#: Public test fractions of sets published without a split where a benchmark fixes one (issue 26: 80/20).
DATASET_TEST_FRACTIONS = {"california_housing": 0.2}


@dataclass(frozen=True)
class Dataset:
    """Train/test arrays (float64 features; int64 class labels or float64 regression targets) with their
    public schema."""

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    schema: Schema
    official_split: bool = True
    #: which train/test split: {"split_source": "official" | "given" | "random" | "none", and for random
    #: "split_seed", "test_fraction"; for given "test_data"}
    split: dict = field(default_factory=lambda: {"split_source": "official"})

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


def search_dirs(data_dir: str | os.PathLike | None = None) -> list[Path]:
    """Where a dataset NAME is looked for, in order: ``data_dir`` (``--data-dir``), ``$DPFED_DATA_DIR``,
    the current directory, ``../shared/data`` beside the project or the current directory, then the
    bundled folder."""
    dirs: list[Path] = []
    if data_dir is not None:
        dirs.append(Path(data_dir))
    if os.environ.get("DPFED_DATA_DIR"):
        dirs.append(Path(os.environ["DPFED_DATA_DIR"]))
    dirs.append(Path.cwd())
    root = Path(__file__).resolve().parent.parent.parent
    dirs += [d for d in (root.parent / "shared" / "data", Path.cwd().parent / "shared" / "data") if d.is_dir()]
    dirs.append(_BUNDLED)
    out: list[Path] = []
    for d in dirs:
        if d not in out:
            out.append(d)
    return out


def find_data_file(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    """The file of a dataset given by path or by NAME (``NAME.npz`` or ``NAME.csv`` in :func:`search_dirs`)."""
    path = Path(name)
    if path.suffix.lower() in {".npz", ".csv"} or os.sep in name:
        if path.is_file():
            return path
        raise FileNotFoundError(f"data file not found: {path}")
    dirs = search_dirs(data_dir)
    for d in dirs:
        for ext in (".npz", ".csv"):
            if (d / f"{name}{ext}").is_file():
                return d / f"{name}{ext}"
    raise FileNotFoundError(f"dataset {name!r} ({name}.npz or {name}.csv) not found in: "
                            f"{'; '.join(str(d) for d in dirs)} (give a path, --data-dir, $DPFED_DATA_DIR, or "
                            "a blobs:... spec)")


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, *, schema: Schema | None = None,
                 bounds: tuple[float, float] | None = None, test_fraction: float | None = None,
                 test_data: str | os.PathLike | None = None, split_seed: int | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES, max_rows: int = DEFAULT_MAX_ROWS) -> Dataset:
    """Load a dataset by name or path (see module docstring) with its public schema.

    The schema is, in order: ``schema`` (``--schema FILE``); the ``schema_json`` entry of the .npz;
    ``STEM.schema.json`` beside the data file or in ``dpfed/data/schemas``; else the .npz's own
    metadata (``feature_names``, ``is_categorical``, ``n_categories``, ``class_names``) with ``bounds``
    (``--bounds LOW:HIGH``) for every numeric column. The split: ``test_data`` (a given test file),
    else the file's own ``X_test``/``y_test`` (official; ``test_fraction`` then refused), else a
    public random split of ``test_fraction`` (default 1/3, or the set's entry in
    :data:`DATASET_TEST_FRACTIONS`) with ``split_seed`` (default 20180425).
    """
    if name.startswith("blobs"):
        return make_blobs_dataset(name)
    if test_fraction is not None and not 0.0 < test_fraction < 1.0:
        raise DataValidationError(f"--test-fraction must lie in (0, 1), got {test_fraction:g}")
    path = find_data_file(name, data_dir)
    if schema is None:
        schema = _schema_file_for(path)
    Xtr, ytr, Xte, yte, meta, official = _read_records(path, schema, max_bytes, max_rows)
    if schema is None:
        schema = _schema_from_meta(path, meta, Xtr.shape[1], bounds)
    elif bounds is not None:
        raise DataValidationError("give either a schema (--schema or a schema file) or --bounds, not both")
    split: dict = {"split_source": "official"}
    if test_data is not None:
        if test_fraction is not None:
            raise DataValidationError("give either --test-data or --test-fraction, not both")
        if official:  # the file's own test split is replaced by the given one
            Xtr, ytr = np.concatenate([Xtr, Xte]), np.concatenate([ytr, yte])
        Xte, yte, *_ = _read_records(find_data_file(str(test_data)), schema, max_bytes, max_rows)
        split = {"split_source": "given", "test_data": str(test_data)}
    elif official:
        if test_fraction is not None:
            raise DataValidationError(f"{path} has an official test split (X_test, y_test); --test-fraction "
                                      "applies only to files without one")
    else:
        frac = DATASET_TEST_FRACTIONS.get(path.stem, DEFAULT_TEST_FRACTION) if test_fraction is None \
            else float(test_fraction)
        seed = DEFAULT_SPLIT_SEED if split_seed is None else int(split_seed)
        perm = np.random.default_rng(seed).permutation(len(Xtr))  # public split, not a privacy mechanism
        n_test = int(round(len(Xtr) * frac))
        if not 0 < n_test < len(Xtr):
            raise DataValidationError(f"{path}: a test fraction of {frac:g} of {len(Xtr)} records leaves no "
                                      "training or no test record")
        Xtr, ytr, Xte, yte = Xtr[perm[n_test:]], ytr[perm[n_test:]], Xtr[perm[:n_test]], ytr[perm[:n_test]]
        split = {"split_source": "random", "split_seed": seed, "test_fraction": frac}
    try:
        Xtr, Xte = schema.validate(Xtr, ytr), schema.validate(Xte, yte)
    except DataValidationError as exc:
        raise DataValidationError(f"{path}: {exc}") from None
    return Dataset(path.stem, Xtr, schema.labels(ytr), Xte, schema.labels(yte), schema,
                   split["split_source"] == "official", split)


def _schema_file_for(path: Path) -> Schema | None:
    for cand in (path.with_name(f"{path.stem}.schema.json"), _SCHEMAS / f"{path.stem}.schema.json"):
        if cand.is_file():
            return Schema.from_file(cand)
    return None


def _read_records(path: Path, schema: Schema | None, max_bytes: int, max_rows: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray], bool]:
    """(X_train, y_train, X_test, y_test, metadata arrays, official split?) of an .npz or a CSV; the
    test arrays are empty without an official split. Labels are required."""
    if path.suffix.lower() == ".csv":
        if schema is None:
            raise DataValidationError(f"{path}: a CSV file needs a schema (--schema FILE or "
                                      f"{path.stem}.schema.json beside it; `dpfed schema template` writes one)")
        if not schema.labelled:
            raise DataValidationError(f"{path}: the schema declares no label classes (n_classes) and no regression "
                                      "target")
        X, y = load_table(path, schema, max_bytes=max_bytes, max_rows=max_rows)
        if y is None:
            raise DataValidationError(f"{path}: no label column {schema.label!r}")
        return X, y, X[:0], y[:0], {}, False
    z = read_npz(path, max_bytes=max_bytes)
    if "schema_json" in z and schema is None:
        try:
            schema = Schema.from_json(str(z["schema_json"]))
        except ValueError as exc:
            raise DataValidationError(f"{path}: its schema_json entry: {exc}") from None
        z["__schema__"] = np.array(schema.to_json())
    keys = ("X_train", "y_train", "X_test", "y_test") if "X_train" in z else ("X", "y")
    missing = [k for k in keys if k not in z]
    if missing or ("X_train" not in z and "X" not in z):
        raise DataValidationError(f"{path}: expected arrays X_train, y_train, X_test, y_test or X, y; missing "
                                  f"{', '.join(missing) or 'X'}")
    arrays = [z[k] for k in keys]
    for k, a in zip(keys, arrays, strict=True):
        check_real(path, f"array {k!r}", a, integer=k.startswith("y") and a.dtype.kind != "f")
        want = 2 if k.startswith("X") else 1
        if a.ndim != want:
            raise DataValidationError(f"{path}: array {k!r} must be {want}-d, got {a.ndim}-d")
        if a.shape[0] > max_rows:
            raise DataValidationError(f"{path}: array {k!r} holds {a.shape[0]} records, more than the cap of "
                                      f"{max_rows}")
    for xk, yk in zip(keys[0::2], keys[1::2], strict=True):
        if z[xk].shape[0] != z[yk].shape[0]:
            raise DataValidationError(f"{path}: {xk} has {z[xk].shape[0]} records but {yk} {z[yk].shape[0]} labels")
        if z[xk].shape[0] == 0:
            raise DataValidationError(f"{path}: array {xk!r} holds no records")
    if len(keys) == 4 and arrays[0].shape[1] != arrays[2].shape[1]:
        raise DataValidationError(f"{path}: X_train and X_test have different numbers of columns")
    if len(keys) == 4:
        return arrays[0], arrays[1], arrays[2], arrays[3], z, True
    return arrays[0], arrays[1], arrays[0][:0], arrays[1][:0], z, False


def _schema_from_meta(path: Path, z: dict[str, np.ndarray], d: int, bounds: tuple[float, float] | None) -> Schema:
    """The schema an .npz carries (``schema_json``) or its metadata completed with ``bounds``."""
    if "__schema__" in z:
        return Schema.from_json(str(z["__schema__"]))
    names = [str(s) for s in z["feature_names"]] if "feature_names" in z else [f"x{j}" for j in range(d)]
    is_cat = z["is_categorical"] if "is_categorical" in z else (
        np.ones(d, bool) if "n_categories" in z else np.zeros(d, bool))
    n_cat = z["n_categories"] if "n_categories" in z else np.zeros(d, np.int64)
    if len(names) != d or len(is_cat) != d or len(n_cat) != d:
        raise DataValidationError(f"{path}: feature_names/is_categorical/n_categories need {d} entries")
    numeric = [names[j] for j in range(d) if not is_cat[j]]
    if numeric and bounds is None:
        raise DataValidationError(
            f"{path}: no public bounds for {len(numeric)} numeric column(s) ({', '.join(numeric[:3])}"
            f"{', ...' if len(numeric) > 3 else ''}); give --schema FILE (`dpfed schema template` writes one), "
            f"{path.stem}.schema.json beside the data, or --bounds LOW:HIGH for all numeric columns")
    feats = []
    for j in range(d):
        if is_cat[j]:
            feats.append(Feature(names[j], "categorical", categories=int(n_cat[j])))
        else:
            assert bounds is not None
            feats.append(Feature(names[j], "numeric", lower=float(bounds[0]), upper=float(bounds[1])))
    if "class_names" in z:
        class_names = tuple(str(c) for c in z["class_names"])
        n_classes = len(class_names)
    else:  # class codes 0..k-1: k from the labels would be data-derived, so it is refused
        raise DataValidationError(f"{path}: no class_names array; the number of classes is public: give "
                                  "--schema FILE with n_classes")
    return Schema(tuple(feats), n_classes=n_classes, class_names=class_names)


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
