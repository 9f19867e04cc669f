"""Ghost clipping for gradients that are one outer product per record (generalised linear models).

A linear model with K outputs ``s = W x~`` (W: K x D', x~ the record with a trailing 1 for the bias) and
a loss of the outputs has the per-record gradient ``dl/dW = a x~^T`` with ``a = dl/ds`` (K,). Its
Frobenius norm is ``|a| |x~|`` and the weighted sum over a batch is ``(w * A)^T X~``: the engine's
:class:`~dpfed.algorithms.dpsgd.gradient.GhostBatch` from two norms and one matrix product, never one
(K x D') row per record (Goodfellow 2015; Lee & Kifer, PETS 2021, for the linear layer). The flat gradient
is W's entries in row-major order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["OuterGhost", "outer_rows"]


@dataclass
class OuterGhost:
    """A batch's gradients ``a_i x_i^T`` from ``A`` (B, K) and ``X`` (B, D'); a record whose terms are not
    all finite is zeroed here (its norm reported as inf, its weight then 0 by the engine's clip factors)."""

    A: np.ndarray
    X: np.ndarray

    def __post_init__(self) -> None:
        bad = ~(np.isfinite(self.A).all(axis=1) & np.isfinite(self.X).all(axis=1))
        self._bad = bad
        if bad.any():
            self.A = np.where(bad[:, None], 0.0, self.A)
            self.X = np.where(bad[:, None], 0.0, self.X)

    def norms(self) -> np.ndarray:
        """(B,) ``|a_i| |x_i|``; inf for a record zeroed as not finite."""
        n = np.sqrt(np.einsum("ij,ij->i", self.A, self.A) * np.einsum("ij,ij->i", self.X, self.X))
        n[self._bad] = np.inf
        return n

    def weighted_sum(self, weights: np.ndarray) -> np.ndarray:
        """(K D',) ``sum_i w_i a_i x_i^T`` flattened row-major: ``(w * A)^T X``."""
        return ((self.A * np.asarray(weights, dtype=np.float64)[:, None]).T @ self.X).ravel()


def outer_rows(A: np.ndarray, X: np.ndarray) -> np.ndarray:
    """(B, K D') the per-record gradients ``a_i x_i^T`` flattened (what distributed noise encodes row by row)."""
    return np.einsum("bk,bd->bkd", A, X).reshape(len(A), -1)
