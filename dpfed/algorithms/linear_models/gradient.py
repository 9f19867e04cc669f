"""Per-record gradients of the linear models for the DP-SGD engine (:mod:`dpfed.algorithms.dpsgd`).

A record's gradient of its loss (:func:`dpfed.algorithms.linear_models.model.loss_terms`) with respect to
``W`` is the outer product ``a x~^T`` (a = dl/ds, x~ = [encoded record, 1]), so its norm is ``|a| |x~|``
and a batch's clipped sum is one matrix product: the engine's ghost clipping through
:class:`dpfed.algorithms.dpsgd.OuterGhost`; :func:`dpfed.algorithms.dpsgd.outer_rows` gives the rows that
distributed noise encodes one by one. The flat gradient is W's entries in row-major order.
"""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.dpsgd import OuterGhost, outer_rows
from dpfed.algorithms.linear_models.model import augment, loss_terms, scores

__all__ = ["LinearGradient"]


class LinearGradient:
    """The gradient of ``loss`` at the broadcast weights ``W`` (K, D + 1), on encoded records."""

    def __init__(self, W: np.ndarray, loss: str, huber: float = 0.5) -> None:
        self.W = np.asarray(W, dtype=np.float64)
        self.loss, self.huber = loss, float(huber)

    @property
    def dimension(self) -> int:
        return int(self.W.size)

    def terms(self, Z: np.ndarray, y: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(per-record loss, A = dl/ds (B, K), [Z, 1] (B, D + 1))."""
        if y is None:
            raise ValueError("a linear model's gradient needs labels")
        with np.errstate(over="ignore", invalid="ignore"):
            loss, A = loss_terms(self.loss, scores(self.W, Z), y, self.huber)
        return loss, A, augment(Z)

    def rows(self, Z: np.ndarray, y: np.ndarray | None) -> np.ndarray:
        _, A, Xa = self.terms(Z, y)
        return outer_rows(A, Xa)

    def ghost(self, Z: np.ndarray, y: np.ndarray | None) -> OuterGhost:
        _, A, Xa = self.terms(Z, y)
        return OuterGhost(A, Xa)

    def full_sum(self, Z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The unclipped sum of the records' gradients, (K, D + 1) (the non-private baseline)."""
        _, A, Xa = self.terms(Z, y)
        return A.T @ Xa
