"""The optimiser step on DP-SGD's noisy gradients (post-processing: it costs no privacy).

SGD with the decaying rate ``lr / (1 + decay (t - 1) / T)`` at step t = 1..T, or Adam (Kingma & Ba,
ICLR 2015) with bias-corrected moments. The coordinator keeps the moments (m, v) between steps (they
are part of its checkpoint).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["OPTIMIZERS", "decayed_rate", "direction"]

#: The optimisers a job may name.
OPTIMIZERS = ("sgd", "adam")


def decayed_rate(lr: float, decay: float, t: int, steps: int) -> float:
    """The learning rate of step t = 1..T: ``lr / (1 + decay (t - 1) / T)``."""
    return lr / (1.0 + decay * (t - 1) / steps)


def direction(optimizer: str, g: np.ndarray, m: np.ndarray | None, v: np.ndarray | None, t: int,
              betas: Sequence[float] = (0.9, 0.999), eps: float = 1e-8
              ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The update direction of step t for the (noisy, averaged) gradient ``g``, and the new moments:
    ``g`` itself for SGD; Adam's ``m_hat / (sqrt(v_hat) + eps)`` (moments start at zero when None)."""
    if optimizer == "sgd":
        return g, m, v
    if optimizer != "adam":
        raise ValueError("optimizer must be 'sgd' or 'adam'")
    b1, b2 = (float(b) for b in betas)
    if m is None or v is None:
        m, v = np.zeros_like(g), np.zeros_like(g)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    return (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps), m, v
