"""The party's naive Bayes sufficient statistics: the weighted integer vector of its records (before
any noise), vectorised over blocks of rows.

Statistics (per class c; Vaidya et al. 2013 "Differentially private naive Bayes classification"):
class counts n_c; for each categorical feature j the class x value histogram n_{c,j,v}; for each
numeric feature the sums S_c = sum x~ and sums of squares Q_c = sum x~^2 of the value clamped to its
public bounds [lo, hi] and rescaled to x~ = 2 (x - lo) / (hi - lo) - 1 in [-1, 1] (centred, so
Q/n - (S/n)^2 cancels little and every group has per-record sensitivity 1).
"""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.naive_bayes.plan import Layout
from dpfed.core.clipping import clamp
from dpfed.data.schema import DataValidationError

__all__ = ["sufficient_statistics", "block_statistics", "check_labels", "party_records"]

_EXACT = float(1 << 52)     # float64 sums of integers are exact below this
_CHUNK = 1 << 14            # rows per block (14 float64 columns: 1.8 MB, about an L2 cache)


def sufficient_statistics(X: np.ndarray, y: np.ndarray, layout: Layout, weights: np.ndarray) -> np.ndarray:
    """The weighted integer statistics vector of records ``(X, y)`` (before noise).

    ``X`` is float64 already validated against the schema; numeric values are clamped to the
    public bounds here anyway (clip, then noise). Vectorised over blocks of rows that stay in
    cache: per categorical feature one ``bincount`` over (value, class) cells; the numeric rows of
    a block go into a (2P, rows) array whose per-class sums are mask products (exact: every partial
    sum is an integer below 2^52). Raises :class:`DataValidationError` for NaN or a code outside
    its domain (it would land in another cell and break the sensitivity); Inf is clamped.
    """
    y = np.asarray(y, dtype=np.int64)
    if len(y) * float(weights.max()) >= _EXACT:  # keep every float64 partial sum an exact integer
        half = len(y) // 2
        return (sufficient_statistics(X[:half], y[:half], layout, weights)
                + sufficient_statistics(X[half:], y[half:], layout, weights))
    out = np.zeros(layout.length, np.int64)
    out[:layout.k] = np.bincount(y, minlength=layout.k) * weights[0]
    rows = min(len(y), _CHUNK)
    buf, zbuf = np.empty(rows), np.empty((2 * len(layout.num_cols), rows))
    for start in range(0, len(y), _CHUNK):  # row blocks that stay in cache while every column is read
        block_statistics(X[start:start + _CHUNK], y[start:start + _CHUNK], layout, weights, out, buf, zbuf)
    return out


def block_statistics(X: np.ndarray, y: np.ndarray, layout: Layout, weights: np.ndarray, out: np.ndarray,
                      buf: np.ndarray, zbuf: np.ndarray) -> None:
    """Add the histogram and numeric-sum statistics of one block of rows to ``out``."""
    n, k = len(y), layout.k
    c, p = len(layout.cat_cols), len(layout.num_cols)
    buf = buf[:n]
    yf = y.astype(np.float64)
    for j, (col, m) in enumerate(zip(layout.cat_cols, layout.sizes)):  # a few passes per feature
        np.multiply(X[:, col], k, out=buf)                     # cell index v * k + c
        buf += yf
        try:  # a negative cell (or NaN, cast to INT_MIN) raises; one too large lengthens the count
            cnt = np.bincount(buf.astype(np.intp), minlength=k * int(m))
        except ValueError:
            cnt = np.zeros(0)
        if len(cnt) != k * int(m):
            raise DataValidationError(f"column {layout.names[col]!r}: NaN or value(s) outside the categorical "
                                      f"domain of {int(m)} codes")
        o = int(layout.hist_off[j])
        out[o:o + k * int(m)] += cnt.reshape(int(m), k).T.ravel() * weights[1 + j]
    if not p:
        return
    Z = zbuf[:, :n]                          # rows 0..P-1: rounded x~ sums S, rows P..2P-1: squares Q
    for f, col in enumerate(layout.num_cols):
        # round(ws * clamp(x~, -1, 1)) with x~ = (x - lo) / half - 1, computed as clamp(ws x~, -ws, ws)
        ws, wq = float(weights[1 + c + f]), float(weights[1 + c + p + f])
        half = (layout.upper[f] - layout.lower[f]) / 2.0
        zs, zq = Z[f], Z[p + f]
        np.multiply(X[:, col], ws / half, out=zs)
        zs -= ws * (layout.lower[f] / half + 1.0)
        clamp(zs, -ws, ws, out=zs, allow_infinite=True)  # Inf is clamped like any out-of-bound value
        np.square(zs, out=zq)
        zq *= wq / (ws * ws)
        np.rint(zq, out=zq)
        np.rint(zs, out=zs)
    sums = np.empty((2 * p, k))
    for cls in range(k - 1):                 # per-class sums by masks: exact (integers below 2^52)
        np.equal(y, cls, out=buf, casting="unsafe")
        sums[:, cls] = Z @ buf
    sums[:, k - 1] = Z.sum(axis=1) - sums[:, :k - 1].sum(axis=1)
    if not np.isfinite(sums).all():          # NaN survives the clamp
        bad = sorted({layout.names[int(layout.num_cols[i % p])] for i in np.flatnonzero(~np.isfinite(sums).all(1))})
        raise DataValidationError(f"column(s) {', '.join(map(repr, bad))}: NaN value(s)")
    out[layout.s_off:layout.q_off] += np.rint(sums[:p].T).astype(np.int64).ravel()
    out[layout.q_off:] += np.rint(sums[p:].T).astype(np.int64).ravel()


def check_labels(y: np.ndarray | None, n: int, k: int) -> np.ndarray:
    if y is None:
        raise DataValidationError("naive Bayes needs labels at every party")
    y = np.asarray(y)
    if y.shape != (n,):
        raise DataValidationError(f"labels: expected {n} labels, got shape {tuple(y.shape)}")
    if n and (not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= k):
        bad = int(np.sum((y < 0) | (y >= k))) if np.issubdtype(y.dtype, np.number) else n
        raise DataValidationError(f"labels: {bad} value(s) outside the schema's classes 0..{k - 1}")
    return y.astype(np.int64, copy=False)


def party_records(spec: JobSpec, X: np.ndarray, y: np.ndarray | None) -> tuple[Layout, np.ndarray, np.ndarray]:
    """The job's layout and the party's records as float64 ``X`` and int64 labels, shapes checked."""
    layout = Layout.from_schema(spec.schema)
    X = np.asarray(X, dtype=np.float64)
    y = check_labels(y, len(X), layout.k)
    if X.ndim != 2 or X.shape[1] != spec.schema.n_features:
        raise DataValidationError(f"expected a 2-d array with {spec.schema.n_features} columns")
    return layout, X, y
