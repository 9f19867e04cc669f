"""Per-record clipping of a learner's gradients, with ghost clipping when the learner offers it.

DP-SGD clips every record's gradient g_i to L2 norm C before summing (Abadi et al. 2016, Alg. 1:
g_i / max(1, |g_i| / C)), by :func:`dpfed.core.clipping.l2_clip_factors`. A learner describes its
gradient by a :class:`PerRecordGradient`; when it can compute the norms |g_i| and the weighted sum
``sum_i w_i g_i`` from dot products (ghost clipping: Goodfellow 2015; Lee & Kifer 2021), it also returns
a :class:`GhostBatch`, and the clipped sum never forms one row per record.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol

import numpy as np

from dpfed.core.clipping import l2_clip_factors

__all__ = ["PerRecordGradient", "GhostBatch", "ClippedSum", "clip_rows", "clipped_rows", "clipped_row_chunks",
           "clipped_sum", "ghost_clipped_sum", "rows_per_chunk"]


class GhostBatch(Protocol):
    """One batch's gradients, known through their norms and weighted sums only."""

    def norms(self) -> np.ndarray:
        """(B,) per-record gradient L2 norms; inf (or NaN) for a record whose gradient is not finite."""

    def weighted_sum(self, weights: np.ndarray) -> np.ndarray:
        """(dimension,) ``sum_i weights[i] g_i``; finite whenever every record with a non-finite norm has
        weight 0 (a learner zeroes such records' terms: 0 * inf would be NaN)."""


class PerRecordGradient(Protocol):
    """What a learner supplies to the engine: its loss's gradient, one flat row per record."""

    @property
    def dimension(self) -> int:
        """Length of one record's flat gradient (every learned parameter, in a fixed order)."""

    def rows(self, X: np.ndarray, y: np.ndarray | None) -> np.ndarray:
        """(B, dimension) per-record gradients, not clipped (a row with a non-finite norm is zeroed by
        :func:`clip_rows`)."""

    def ghost(self, X: np.ndarray, y: np.ndarray | None) -> GhostBatch | None:
        """The batch for ghost clipping, or None (the engine then clips :meth:`rows`)."""


@dataclass
class ClippedSum:
    """The sum over a batch of per-record gradients, each clipped to L2 norm C."""

    vector: np.ndarray   # (dimension,)
    clipped: int         # records whose norm exceeded C
    norms: np.ndarray    # (B,) norms before clipping


def clip_rows(rows: np.ndarray, clip: float) -> np.ndarray:
    """Clip every row of ``rows`` (B, D) to L2 norm ``clip`` in place; return the norms before clipping.
    A row with a non-finite norm becomes zero (norm 0 <= C: the sum keeps its sensitivity)."""
    with np.errstate(over="ignore", invalid="ignore"):  # a non-finite norm is handled below
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    factors = l2_clip_factors(norms, clip)
    bad = ~np.isfinite(norms)
    if bad.any():
        rows[bad] = 0.0  # (0 * inf would be NaN)
    rows *= factors[:, None]
    return norms


def clipped_rows(grad: PerRecordGradient, X: np.ndarray, y: np.ndarray | None, clip: float) -> np.ndarray:
    """(B, dimension) per-record gradients, each clipped to L2 norm ``clip``."""
    if len(X) == 0:
        return np.zeros((0, grad.dimension))
    rows = grad.rows(X, y)
    clip_rows(rows, clip)
    return rows


def rows_per_chunk(dimension: int, floats: int = 1 << 22) -> int:
    """Records per chunk so that one chunk of rows holds about ``floats`` numbers (32 MiB by default)."""
    return max(1, floats // max(1, int(dimension)))


def clipped_row_chunks(grad: PerRecordGradient, X: np.ndarray, y: np.ndarray | None, clip: float,
                       chunk: int) -> Iterator[np.ndarray]:
    """:func:`clipped_rows` of ``chunk`` records at a time (what distributed noise encodes row by row)."""
    for a in range(0, len(X), chunk):
        yield clipped_rows(grad, X[a:a + chunk], None if y is None else y[a:a + chunk], clip)


def ghost_clipped_sum(batch: GhostBatch, clip: float) -> ClippedSum:
    """The clipped sum from a :class:`GhostBatch`: factors min(1, C / |g_i|) from the norms, then one
    weighted sum."""
    norms = batch.norms()
    vector = batch.weighted_sum(l2_clip_factors(norms, clip))
    return ClippedSum(vector, int((norms > clip).sum()), norms)


def clipped_sum(grad: PerRecordGradient, X: np.ndarray, y: np.ndarray | None, clip: float) -> ClippedSum:
    """Sum over the records of their gradients, each clipped to L2 norm ``clip`` (ghost clipping when
    ``grad`` offers it, else by rows)."""
    if len(X) == 0:
        return ClippedSum(np.zeros(grad.dimension), 0, np.zeros(0))
    batch = grad.ghost(X, y)
    if batch is not None:
        return ghost_clipped_sum(batch, clip)
    rows = grad.rows(X, y)
    norms = clip_rows(rows, clip)
    return ClippedSum(rows.sum(0), int((norms > clip).sum()), norms)
