"""Clipping, clamping and sensitivities from public bounds (the "clip, then noise" half of DP).

Neighbouring relation: add/remove one record (dpfed's default). A replace-one neighbour is one
removal plus one addition, so a replace-one sensitivity is at most twice the add/remove one
(Dwork & Roth 2014, Def. 2.4 and §3.3); :func:`mean_sensitivity` documents the one case where
the two coincide.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["clip_rows_l2", "l2_clip_factors", "clamp", "count_sensitivity", "sum_sensitivity", "mean_sensitivity"]

#: Clipped rows land this much (relative) inside the ball, so rounding in a later norm stays <= C.
_SHRINK = 1.0 - 2.0**-50


def _finite(x: ArrayLike, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinity")
    return arr


def clip_rows_l2(X: ArrayLike, max_norm: float) -> tuple[np.ndarray, np.ndarray]:
    """Scale every row of the 2-D array ``X`` to L2 norm <= ``max_norm`` (Abadi et al. 2016, eq. in
    Alg. 1: x / max(1, ||x||/C)). Returns ``(clipped, original_norms)``; rows already inside the
    ball are returned unchanged, bit for bit; clipped rows land a relative 2^-50 inside it."""
    X = _finite(X, "X")
    if X.ndim != 2:
        raise ValueError(f"clip_rows_l2 expects a 2-D array (rows = records), got {X.ndim}-D")
    c = float(max_norm)
    if not math.isfinite(c) or c <= 0:
        raise ValueError("max_norm must be a positive finite number")
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    out = X * l2_clip_factors(norms, c)[:, None]
    return out, norms


def l2_clip_factors(norms: ArrayLike, max_norm: float) -> np.ndarray:
    """Per-record factors min(1, C / ||g||) that put every record's vector inside the L2 ball of
    radius C (Abadi et al. 2016, Alg. 1), from the norms alone: DP-SGD with ghost norms computes
    ``||g||`` without materialising g. Vectors already inside get exactly 1; clipped ones land a
    relative 2^-50 inside; an infinite norm gets 0. Never raises on the norms (they come from
    records, so an error here would depend on the data): a NaN or negative norm gets 0 too."""
    c = float(max_norm)
    if not math.isfinite(c) or c <= 0:
        raise ValueError("max_norm must be a positive finite number")
    n = np.asarray(norms, dtype=np.float64)
    over = n > c
    factors: np.ndarray = np.ones_like(n)
    factors[over] = c / n[over] * _SHRINK
    factors[~(n >= 0)] = 0.0  # NaN or negative: nothing of that vector is kept
    return factors


def clamp(X: ArrayLike, lower: ArrayLike, upper: ArrayLike, *, out: np.ndarray | None = None,
          allow_infinite: bool = False) -> np.ndarray:
    """Clamp ``X`` to public bounds ``[lower, upper]`` (scalars or one bound per column).

    ``out`` clamps in place (a float64 array, e.g. ``out=X``: no copy on a hot path). With
    ``allow_infinite`` an infinite value is clamped like any other out-of-bound value and a NaN is
    left as it is, for callers that deal with NaN themselves; otherwise non-finite input raises.
    """
    lo = _finite(lower, "lower")
    hi = _finite(upper, "upper")
    if np.any(lo > hi):
        raise ValueError("every lower bound must be <= its upper bound")
    if lo.ndim > 1 or hi.ndim > 1:
        raise ValueError("bounds must be scalars or 1-D (one per column)")
    arr = np.asarray(X, dtype=np.float64) if allow_infinite else _finite(X, "X")
    for b in (lo, hi):
        if b.ndim == 1 and (arr.ndim == 0 or b.size != arr.shape[-1]):
            raise ValueError("per-column bounds need one entry per column of X")
    if out is not None:
        if out.dtype != np.float64 or out.shape != arr.shape:
            raise ValueError("out must be a float64 array of X's shape")
        return np.clip(arr, lo, hi, out=out)
    clamped: np.ndarray = np.clip(arr, lo, hi)
    return clamped


def count_sensitivity() -> int:
    """A count changes by at most 1 when one record is added or removed."""
    return 1


def _bounds(lower: ArrayLike, upper: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    lo = _finite(lower, "lower")
    hi = _finite(upper, "upper")
    lo, hi = np.broadcast_arrays(lo, hi)
    if np.any(lo > hi):
        raise ValueError("every lower bound must be <= its upper bound")
    return lo, hi


def sum_sensitivity(lower: ArrayLike, upper: ArrayLike, *, norm: int = 1) -> float:
    """Add/remove sensitivity of a sum of records clamped to ``[lower, upper]`` (per coordinate).

    Adding a record x changes the sum by x, so the sensitivity is the largest ``||x||`` over the
    box: ``sum_j max(|l_j|, |u_j|)`` for ``norm=1``, the square root of the sum of squares for
    ``norm=2``. Scalars give ``max(|lower|, |upper|)``.
    """
    lo, hi = _bounds(lower, upper)
    m = np.maximum(np.abs(lo), np.abs(hi))
    if norm == 1:
        return float(np.sum(m))
    if norm == 2:
        return float(np.sqrt(np.sum(m * m)))
    raise ValueError("norm must be 1 or 2")


def mean_sensitivity(lower: ArrayLike, upper: ArrayLike, n: int, *, norm: int = 1) -> float:
    """Sensitivity of the mean of ``n`` records clamped to ``[lower, upper]``: ``||u - l|| / n``.

    * replace-one with a public size n: the mean moves by ``(x' - x)/n``, at most ``||u - l||/n``;
    * add/remove where ``n`` is a public lower bound on the size: going from m >= n to m + 1
      records moves the mean by ``(x - mean)/(m + 1)``, at most ``||u - l||/(n + 1)``.
    The returned value bounds both. If n is not public, release a noisy sum and a noisy count
    instead (each with its own add/remove sensitivity) and divide.
    """
    if int(n) != n or n < 1:
        raise ValueError("n must be a positive integer")
    lo, hi = _bounds(lower, upper)
    w = hi - lo
    if norm == 1:
        return float(np.sum(w)) / int(n)
    if norm == 2:
        return float(np.sqrt(np.sum(w * w))) / int(n)
    raise ValueError("norm must be 1 or 2")
