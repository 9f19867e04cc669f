"""The party's linear-regression sufficient statistics: the encoded records and the weighted integer vector
(before any noise), vectorised over blocks of rows (:mod:`.plan` for the encoding and the sensitivity)."""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.linear_regression.plan import Layout
from dpfed.core.clipping import clamp
from dpfed.data.schema import DataValidationError

__all__ = ["encode", "encode_target", "sufficient_statistics", "triangle_matrix", "party_records"]

_BLOCK = 1 << 21            # entries of a block's per-record products (16 MB of float64)


def encode(X: np.ndarray, layout: Layout) -> np.ndarray:
    """Records -> rows u with ||u||_2 <= 1 (:mod:`.plan`): clamped, rescaled numeric columns, m - 1 dummies per
    categorical column, the intercept, all divided by B. NaN is refused (it would break the sensitivity)."""
    X = np.asarray(X, dtype=np.float64)
    if np.isnan(X).any():
        bad = int(np.isnan(X).any(axis=1).sum())
        raise DataValidationError(f"{bad} record(s) with NaN values (missing values need a schema imputation rule)")
    n = len(X)
    parts = []
    if len(layout.num_cols):
        num = clamp(X[:, layout.num_cols], layout.lower, layout.upper, allow_infinite=True)
        parts.append(2.0 * (num - layout.lower) / (layout.upper - layout.lower) - 1.0)
    for col, m in zip(layout.cat_cols, layout.sizes):
        parts.append((X[:, col][:, None] == np.arange(1, int(m))[None, :]).astype(np.float64))
    parts.append(np.ones((n, 1)))
    U = np.concatenate(parts, axis=1) / layout.scale
    norms = np.sqrt(np.einsum("ij,ij->i", U, U))
    U /= np.maximum(norms, 1.0)[:, None]  # exact arithmetic gives <= 1; this absorbs the float rounding
    return U


def encode_target(y: np.ndarray, layout: Layout) -> np.ndarray:
    """Target values clamped to the public bounds and rescaled to [-1, 1]."""
    y = np.asarray(y, dtype=np.float64)
    if np.isnan(y).any():
        raise DataValidationError(f"target: {int(np.isnan(y).sum())} missing (NaN) value(s)")
    yc = clamp(y, layout.y_lower, layout.y_upper, allow_infinite=True)
    return 2.0 * (yc - layout.y_lower) / (layout.y_upper - layout.y_lower) - 1.0


def triangle_matrix(tri: np.ndarray, d: int) -> np.ndarray:
    """The symmetric D x D matrix of an upper triangle in ``np.triu_indices(d)`` order."""
    M = np.zeros((d, d))
    iu = np.triu_indices(d)
    M[iu] = tri
    M.T[iu] = tri
    return M


def sufficient_statistics(X: np.ndarray, y: np.ndarray, layout: Layout, weights: dict) -> np.ndarray:
    """The party's integer vector: sum over its records of round(W_g s) for every statistic s (triangle of
    u u^T, u y~, y~^2), W_n per record, and with AdaSSP round(W_l lambda_min) of its triangle / W_xx."""
    U, yt = encode(X, layout), encode_target(y, layout)
    d, off = layout.dimension, layout.offsets
    iu, ju = np.triu_indices(d)
    out = np.zeros(layout.length, np.int64)
    rows = max(1, _BLOCK // layout.n_tri)
    wxx, wxy, wyy = float(weights["xx"]), float(weights["xy"]), float(weights["yy"])
    for s in range(0, len(U), rows):  # every partial sum is an integer below 2^53: exact in float64
        Ub, yb = U[s:s + rows], yt[s:s + rows]
        out[:layout.n_tri] += np.rint(wxx * (Ub[:, iu] * Ub[:, ju])).sum(axis=0).astype(np.int64)
        out[off["xy"]:off["yy"]] += np.rint(wxy * (Ub * yb[:, None])).sum(axis=0).astype(np.int64)
        out[off["yy"]] += int(np.rint(wyy * yb * yb).sum())
    out[off["n"]] = int(weights["n"]) * len(U)
    if layout.lmin:
        M = triangle_matrix(out[:layout.n_tri].astype(np.float64), d) / wxx
        lam = float(np.linalg.eigvalsh(M)[0]) if len(U) else 0.0
        out[off["lmin"]] = int(np.rint(weights["lmin"] * lam))
    return out


def party_records(spec: JobSpec, X: np.ndarray, y: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The party's records as float64 ``X`` and target ``y``, shapes checked."""
    if y is None:
        raise DataValidationError("linear regression needs the target at every party")
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
    if X.ndim != 2 or X.shape[1] != spec.schema.n_features:
        raise DataValidationError(f"expected a 2-d array with {spec.schema.n_features} columns")
    if y.shape != (len(X),) or y.dtype.kind not in "biuf":
        raise DataValidationError(f"target: expected {len(X)} numbers, got shape {tuple(y.shape)}")
    return X, y.astype(np.float64)
