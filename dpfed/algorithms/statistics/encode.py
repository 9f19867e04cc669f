"""The party's statistics before any noise: the weighted integer vector of its records in the job's
:class:`~.queries.Layout` (pure NumPy, one vectorised pass per block).

Numeric values are clamped to the schema's public bounds first (clip, then noise), so a record far outside
them counts as one at the bound. A moment block's Bernstein basis vector (1 - u, u) or ((1 - u)^2, 2u(1 - u),
u^2) is rounded as its cumulative sums round(W B_{<=k}(u)) and differenced: every entry is a non-negative
integer and the entries sum to exactly W, so the block's per-record L1 and L2 sensitivities are W exactly.
"""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.statistics.queries import Block, Layout
from dpfed.algorithms.statistics.tree import tree_counts
from dpfed.core.clipping import clamp
from dpfed.data.schema import DataValidationError, Schema

__all__ = ["party_statistics", "unit_values", "bernstein_cumulative", "group_codes", "cell_codes"]


def unit_values(X: np.ndarray, col: int, schema: Schema) -> np.ndarray:
    """u = (clamp(x) - lower) / (upper - lower) in [0, 1] (NaN refused; +-inf clamped)."""
    f = schema.features[col]
    x = np.asarray(X[:, col], dtype=np.float64)
    if np.isnan(x).any():
        raise DataValidationError(f"column {f.name!r}: NaN value(s)")
    x = clamp(x, f.lower, f.upper, allow_infinite=True)
    return (x - f.lower) / (f.upper - f.lower)


def bernstein_cumulative(u: np.ndarray, degree: int) -> np.ndarray:
    """Cumulative sums of the Bernstein basis of ``degree`` (1 or 2) at u: shape (n, degree + 1), last column 1."""
    if degree == 1:
        return np.column_stack([1.0 - u, np.ones_like(u)])
    return np.column_stack([(1.0 - u) ** 2, 1.0 - u * u, np.ones_like(u)])


def group_codes(X: np.ndarray, y: np.ndarray | None, block: Block, schema: Schema) -> np.ndarray:
    """Each record's group in ``block`` (0 when ungrouped), checked against the public domain."""
    n = len(X)
    if block.by == -1:
        return np.zeros(n, np.int64)
    if block.by == -2:
        if y is None or np.shape(y) != (n,):
            raise DataValidationError("grouping by class needs one label per record")
        return _codes(np.asarray(y), block.groups, "the labels")
    return _codes(X[:, block.by], block.groups, f"column {schema.features[block.by].name!r}")


def _codes(v: np.ndarray, m: int, what: str) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    bad = ~np.isfinite(v) | (v < 0) | (v >= m) | (v != np.floor(v))
    if bad.any():
        raise DataValidationError(f"{what}: {int(bad.sum())} value(s) outside the domain of {m} codes")
    return v.astype(np.int64)


def cell_codes(X: np.ndarray, block: Block, schema: Schema) -> np.ndarray:
    """Each record's cell in a histogram or table block."""
    if block.kind == "table":
        a = _codes(X[:, block.column], schema.features[block.column].categories,
                   f"column {schema.features[block.column].name!r}")
        b = _codes(X[:, block.column2], schema.features[block.column2].categories,
                   f"column {schema.features[block.column2].name!r}")
        return a * int(schema.features[block.column2].categories) + b
    if block.bins:  # numeric: equal-width bins over the public bounds, the last one closed
        u = unit_values(X, block.column, schema)
        return np.minimum((u * block.bins).astype(np.int64), block.bins - 1)
    f = schema.features[block.column]
    return _codes(X[:, block.column], f.categories, f"column {f.name!r}")


def _block_sums(X: np.ndarray, y: np.ndarray | None, block: Block, weight: int, schema: Schema) -> np.ndarray:
    g = group_codes(X, y, block, schema)
    if block.kind == "count":
        return np.bincount(g, minlength=block.groups).astype(np.int64) * weight
    if block.kind == "moments":
        cum = np.rint(bernstein_cumulative(unit_values(X, block.column, schema), block.degree) * weight)
        parts = np.diff(cum, axis=1, prepend=0.0)          # non-negative integers summing to the weight
        idx = (g[:, None] * block.cells + np.arange(block.cells)[None, :]).ravel()
        # float64 sums of integers are exact below 2^53 (records * weight, checked by the caller)
        return np.rint(np.bincount(idx, weights=parts.ravel(), minlength=block.size)).astype(np.int64)
    cells = cell_codes(X, block, schema)
    if block.kind == "tree":  # leaf histogram per group, then every level's node sums (Hay et al. 2010)
        leaves = np.bincount(g * block.bins + cells, minlength=block.groups * block.bins).reshape(block.groups, -1)
        return tree_counts(leaves).ravel().astype(np.int64) * weight
    return np.bincount(g * block.cells + cells, minlength=block.size).astype(np.int64) * weight


def party_statistics(X: np.ndarray, y: np.ndarray | None, layout: Layout, weights: np.ndarray,
                     schema: Schema) -> np.ndarray:
    """The weighted integer vector of records ``(X, y)`` before noise (module docstring)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != schema.n_features:
        raise DataValidationError(f"expected a 2-d array with {schema.n_features} columns")
    if len(X) * float(np.max(weights)) >= float(1 << 52):
        half = len(X) // 2
        return (party_statistics(X[:half], None if y is None else y[:half], layout, weights, schema)
                + party_statistics(X[half:], None if y is None else y[half:], layout, weights, schema))
    out = np.zeros(layout.length, np.int64)
    for b, block in enumerate(layout.blocks):
        out[block.offset:block.offset + block.size] = _block_sums(X, y, block, int(weights[b]), schema)
    return out
