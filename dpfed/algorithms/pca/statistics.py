"""A party's PCA statistics: its records clipped and put on the public grid (:func:`grid_records`), the exact
integer sum of their grid vectors with the weighted count (round 0, :func:`mean_sum`), and the exact integer
upper triangle of the sum of their augmented outer products (round 1, :func:`covariance_sum`)."""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.pca.plan import MEAN_KIND, Geometry
from dpfed.data.schema import DataValidationError

__all__ = ["clipped_records", "grid_records", "mean_sum", "covariance_sum", "upper_triangle", "round_vector"]

#: Rows per float64 product: every partial sum stays an integer below 2^53 (GRID^2 2^20 < 2^53), so exact.
CHUNK = 1 << 20


def clipped_records(X: np.ndarray, g: Geometry) -> np.ndarray:
    """u = (x - origin) / scale scaled down to ||u||_2 <= clip, rows of float64 (NaN/inf become the clip
    bound's direction-free zero: they were refused at load; here they cannot move the release)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != g.d:
        raise DataValidationError(f"expected a 2-d array with {g.d} columns")
    U = (X - g.origin) / g.scale
    U = np.where(np.isfinite(U), U, 0.0)
    norms = np.sqrt(np.einsum("ij,ij->i", U, U))
    factor = np.minimum(1.0, g.clip / np.maximum(norms, 1e-300))
    return U * factor[:, None]


def grid_records(X: np.ndarray, g: Geometry) -> np.ndarray:
    """q = round(K' u / clip) as float64 integers, ||q||_2 <= GRID (plan module docstring)."""
    return np.rint(clipped_records(X, g) * (g.k_in / g.clip))


def upper_triangle(M: np.ndarray) -> np.ndarray:
    """The upper triangle of square ``M``, diagonal included, row by row (``np.triu_indices`` order)."""
    return M[np.triu_indices(M.shape[0])]


def covariance_sum(X: np.ndarray, g: Geometry) -> np.ndarray:
    """The party's exact integer vector: upper triangle of sum_records z z^T, z = (q, a) (int64)."""
    Q = grid_records(X, g)
    d = g.d
    M = np.zeros((d + 1, d + 1), dtype=np.int64)
    for at in range(0, len(Q), CHUNK):
        Z = np.empty((min(CHUNK, len(Q) - at), d + 1))
        Z[:, :d], Z[:, d] = Q[at:at + CHUNK], float(g.a)
        M += np.rint(Z.T @ Z).astype(np.int64)  # integers below 2^53: exact in float64
    return upper_triangle(M)


def mean_sum(X: np.ndarray, g: Geometry) -> np.ndarray:
    """Round 0's exact integer vector: (sum q, a n) (int64; entries below 2^53 per 2^33 records)."""
    Q = grid_records(X, g)
    return np.concatenate([Q.sum(axis=0), [float(g.a) * len(Q)]]).astype(np.int64)


def round_vector(kind: str, X: np.ndarray, g: Geometry) -> np.ndarray:
    """The party's exact integer vector of round ``kind`` in geometry ``g``."""
    return mean_sum(X, g) if kind == MEAN_KIND else covariance_sum(X, g)
