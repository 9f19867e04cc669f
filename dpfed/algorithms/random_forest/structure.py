"""The public structure of a random decision forest, drawn without the data (Jagannathan, Pillaipakkamnatt &
Wright 2012, "A practical differentially private random decision tree classifier", Alg. 1 and 2).

Every tree is a complete binary tree of depth D (2^D leaves, nodes numbered heap-wise: root 0, children
2i + 1 and 2i + 2). Each internal node draws a split feature uniformly from the usable features (a numeric
feature with upper > lower, a categorical one with >= 2 categories), and then
* numeric: a threshold uniform in the node's remaining interval of that feature, starting from the public
  schema bounds (a record goes right when its clamped value is >= the threshold); a feature split again
  further down is split inside its narrowed interval (JPW12 Sec. 3; Fan et al. 2003's random trees);
* categorical: a uniformly random subset of the public categories goes right (a binary split, so the leaf
  count stays 2^D whatever the domains; Fletcher & Islam 2019's survey, Sec. 4.1, lists both multiway and
  binary splits; binary keeps the released vector T 2^D k long).

The draws use a NumPy generator keyed by SHA-256 of the public seed material (the job id, or the job's
``tree_seed``), never the data and never the secure noise generator: this is public randomness, identical at
every party and at the coordinator.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dpfed.core.memo import shared_cache
from dpfed.data.schema import Schema

__all__ = ["Forest", "draw_forest", "forest_for", "seed_material", "usable_features"]


@dataclass(frozen=True)
class Forest:
    """T trees of depth D: per internal node its feature, threshold (NaN for a categorical split) and, per
    category code, whether the code goes right (one bit per code, W = ceil(m_max / 64) words)."""

    feature: np.ndarray       # (T, 2^D - 1) int64
    threshold: np.ndarray     # (T, 2^D - 1) float64
    goes_right: np.ndarray    # (T, 2^D - 1, W) uint64: bit c % 64 of word c // 64 set when code c goes right
    numeric: np.ndarray       # (d,) bool
    lower: np.ndarray         # (d,) float64 public bounds (0 for categorical)
    upper: np.ndarray         # (d,) float64
    n_classes: int

    @property
    def trees(self) -> int:
        return int(self.feature.shape[0])

    @property
    def depth(self) -> int:
        return int(self.feature.shape[1] + 1).bit_length() - 1

    @property
    def leaves(self) -> int:
        return 1 << self.depth

    @property
    def length(self) -> int:
        """Entries of the released count vector: trees x leaves x classes."""
        return self.trees * self.leaves * self.n_classes


def seed_material(job_id: str, tree_seed: int | None) -> str:
    """The public seed of the structure: the job's ``tree_seed`` when given, else its job id."""
    return f"job:{job_id}" if tree_seed is None else f"seed:{int(tree_seed)}"


def usable_features(schema: Schema, features: Sequence[str] | None = None) -> np.ndarray:
    """Indices of the features a split may use: those named (all when None) with a non-trivial public domain."""
    names = list(schema.names)
    if features is not None:
        unknown = [f for f in features if f not in names]
        if unknown:
            raise ValueError(f"random forest: unknown feature(s) {', '.join(map(repr, unknown))}")
    chosen = np.array([features is None or n in features for n in names], dtype=bool)
    lo, hi = _bounds(schema)
    ok = np.where(schema.numeric, hi > lo, _sizes(schema) >= 2)
    idx = np.flatnonzero(chosen & ok)
    if not len(idx):
        raise ValueError("random forest: no usable feature (a numeric one with upper > lower, or a categorical "
                         "one with >= 2 categories)")
    return idx


def _sizes(schema: Schema) -> np.ndarray:
    sizes = np.ones(schema.n_features, np.int64)
    sizes[schema.categorical] = schema.domain_sizes
    return sizes


def _bounds(schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = np.zeros(schema.n_features), np.zeros(schema.n_features)
    lo[schema.numeric], hi[schema.numeric] = schema.lower, schema.upper
    return lo, hi


def draw_forest(schema: Schema, trees: int, depth: int, seed: str,
                features: Sequence[str] | None = None) -> Forest:
    """The forest's structure from public inputs alone (module docstring), vectorised level by level."""
    key = hashlib.sha256(f"dpfed.random_forest\0{seed}".encode()).digest()
    gen = np.random.Generator(np.random.PCG64(int.from_bytes(key, "little")))
    usable = usable_features(schema, features)
    lo, hi = _bounds(schema)
    num = np.asarray(schema.numeric, dtype=bool)
    nodes = (1 << depth) - 1
    feature = usable[gen.integers(0, len(usable), size=(trees, nodes))]
    words = max(1, -(-int(_sizes(schema).max()) // 64))
    goes_right = gen.integers(0, np.iinfo(np.uint64).max, size=(trees, nodes, words), dtype=np.uint64,
                              endpoint=True)
    u = gen.random((trees, nodes))
    threshold = np.full((trees, nodes), np.nan)
    cols = np.flatnonzero(num)                       # intervals are tracked for the numeric features only
    slot = np.zeros(len(num), np.int64)
    slot[cols] = np.arange(len(cols))
    low = np.broadcast_to(lo[cols], (trees, 1, len(cols))).copy()   # each node's remaining interval
    high = np.broadcast_to(hi[cols], (trees, 1, len(cols))).copy()
    for level in range(depth):
        a, b = (1 << level) - 1, (1 << (level + 1)) - 1
        f = feature[:, a:b]
        is_num, s = num[f], slot[f]
        t_idx, n_idx = np.meshgrid(np.arange(trees), np.arange(b - a), indexing="ij")
        if not len(cols):
            continue
        lo_f, hi_f = low[t_idx, n_idx, s], high[t_idx, n_idx, s]
        thr = lo_f + u[:, a:b] * (hi_f - lo_f)
        threshold[:, a:b] = np.where(is_num, thr, np.nan)
        if level == depth - 1:
            break
        low, high = np.repeat(low, 2, axis=1), np.repeat(high, 2, axis=1)
        left, right = 2 * n_idx, 2 * n_idx + 1
        high[t_idx, left, s] = np.where(is_num, thr, high[t_idx, left, s])
        low[t_idx, right, s] = np.where(is_num, thr, low[t_idx, right, s])
    arrays = [feature.astype(np.int64), threshold, goes_right, num.copy(), lo, hi]
    for a in arrays:  # shared by both halves through the cache: read-only
        a.flags.writeable = False
    return Forest(*arrays, n_classes=int(schema.n_classes))


@shared_cache(maxsize=16)
def _cached(schema_json: str, trees: int, depth: int, seed: str, features: tuple[str, ...] | None) -> Forest:
    return draw_forest(Schema.from_json(schema_json), trees, depth, seed, features)


def forest_for(schema: Schema, trees: int, depth: int, seed: str, features: Sequence[str] | None = None) -> Forest:
    """:func:`draw_forest`, cached by its public inputs (both halves of a job ask for the same one)."""
    return _cached(schema.to_json(), int(trees), int(depth), str(seed),
                   None if features is None else tuple(features))
