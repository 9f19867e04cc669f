"""Private feature selection (issue 27 item 3): per-feature scores from a noisy feature x class contingency table.

The party's table has, for every feature j, the counts n_{j,v,c} of records with value (or public bin) v and
class c: categorical features by their public categories, numeric ones by ``bins`` equal-width bins of the public
bounds (values clamped first). A record adds 1 to one cell of every feature's block, so the whole vector has L1
sensitivity d and L2 sensitivity sqrt(d) (d features): released once with the exact discrete Laplace of scale
d / epsilon (pure epsilon-DP, charged ``DiscreteLaplaceDpEvent(epsilon, 1)``) or round(sigma Z) with
sigma = z(epsilon, delta) sqrt(d) (``GaussianDpEvent(z)``), as a forest's leaf counts are.

Scores (post-processing of the noisy tables, summed over parties if several release them): the empirical mutual
information I(X_j; Y) of each block with negative cells set to 0 (Cover & Thomas eq. 2.28), or Pearson's
chi-square statistic; :func:`select_features` keeps the m best, by name, for the forest's ``features`` parameter.
This is the noisy-contingency-table route of the survey (Ji, Lipton & Elkan 2014, Sec. 5.1) and of diffprivlib's
tools, one release for all features.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event

from dpfed.core import accounting
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Schema

__all__ = ["TableLayout", "contingency_counts", "release_tables", "mutual_information", "chi_square",
           "feature_scores", "select_features"]


@dataclass(frozen=True)
class TableLayout:
    """The public layout: per feature its number of values (categories or bins) and its block offset."""

    sizes: np.ndarray       # (d,) values per feature
    offsets: np.ndarray     # (d,) start of feature j's block of sizes[j] x k cells (index v k + c)
    k: int
    bins: int

    @classmethod
    def from_schema(cls, schema: Schema, bins: int = 16) -> "TableLayout":
        if schema.n_classes < 1 or bins < 2:
            raise ValueError("feature selection needs a labelled schema and bins >= 2")
        sizes = np.full(schema.n_features, int(bins), np.int64)
        sizes[schema.categorical] = schema.domain_sizes
        k = int(schema.n_classes)
        offsets = np.concatenate([[0], np.cumsum(sizes * k)[:-1]]).astype(np.int64)
        return cls(sizes, offsets, k, int(bins))

    @property
    def length(self) -> int:
        return int(np.sum(self.sizes) * self.k)


def contingency_counts(X: np.ndarray, y: np.ndarray, schema: Schema, bins: int = 16) -> np.ndarray:
    """The exact flat table (int64) of records ``(X, y)``: one cell per feature per record (module docstring)."""
    lay = TableLayout.from_schema(schema, bins)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    num = np.asarray(schema.numeric, dtype=bool)
    v = np.zeros(X.shape, np.int64)
    if num.any():
        lo, hi = schema.lower, schema.upper
        width = np.where(hi > lo, hi - lo, 1.0)
        cols = X[:, num]
        z = (np.clip(np.where(np.isnan(cols), lo, cols), lo, hi) - lo) / width
        v[:, num] = np.minimum((z * bins).astype(np.int64), bins - 1)
    cat = ~num
    v[:, cat] = np.clip(np.nan_to_num(X[:, cat]), 0, lay.sizes[cat] - 1).astype(np.int64)
    idx = lay.offsets[None, :] + v * lay.k + y[:, None]
    return np.bincount(idx.ravel(), minlength=lay.length).astype(np.int64)


def release_tables(X: np.ndarray, y: np.ndarray, schema: Schema, *, epsilon: float, delta: float,
                   rng: SecureRNG, bins: int = 16) -> tuple[np.ndarray, dp_event.DpEvent, float]:
    """The noisy table, its event and its per-cell noise variance (module docstring): discrete Laplace for
    delta = 0, else the rounded Gaussian when its variance is smaller."""
    from dpfed.core.mechanisms import discrete_laplace, rounded_gaussian

    d = schema.n_features
    counts = contingency_counts(X, y, schema, bins)
    z = accounting.gaussian_noise_multiplier(epsilon, delta, rtol=1e-5) if delta > 0 else math.inf
    if z * z * d < 2.0 * (d / epsilon) ** 2:
        sigma = z * math.sqrt(d) * (1 + 1e-12)
        rel = rounded_gaussian(counts, sensitivity=math.sqrt(d), sigma=sigma, rng=rng)
        var = sigma ** 2 + 1.0 / 12.0
    else:
        rel = discrete_laplace(counts, sensitivity=d, epsilon=epsilon, rng=rng)
        q = math.exp(-epsilon / d)
        var = 2.0 * q / (1.0 - q) ** 2
    return np.asarray(rel.value, dtype=np.int64), rel.event, var


def _blocks(table: np.ndarray, lay: TableLayout) -> list[np.ndarray]:
    t = np.maximum(np.asarray(table, dtype=np.float64), 0.0)
    return [t[o:o + int(m) * lay.k].reshape(int(m), lay.k) for o, m in zip(lay.offsets, lay.sizes)]


def mutual_information(block: np.ndarray) -> float:
    """I(X; Y) in nats of a (values x classes) table of non-negative counts (Cover & Thomas eq. 2.28)."""
    n = block.sum()
    if n <= 0:
        return 0.0
    p = block / n
    px, py = p.sum(axis=1, keepdims=True), p.sum(axis=0, keepdims=True)
    ok = p > 0
    return float(np.sum(p[ok] * np.log(p[ok] / (px @ py)[ok])))


def chi_square(block: np.ndarray) -> float:
    """Pearson's chi-square statistic of independence of a (values x classes) table of non-negative counts."""
    n = block.sum()
    if n <= 0:
        return 0.0
    expected = block.sum(axis=1, keepdims=True) @ block.sum(axis=0, keepdims=True) / n
    ok = expected > 0
    return float(np.sum((block[ok] - expected[ok]) ** 2 / expected[ok]))


def feature_scores(table: np.ndarray, schema: Schema, bins: int = 16, score: str = "mi",
                   noise_var: float = 0.0) -> np.ndarray:
    """One score per feature from a (noisy, possibly summed over parties) flat table: ``mi`` or ``chi2``,
    debiased: minus what independence plus the table's noise (per-cell variance ``noise_var``, public from the
    plan) alone would give, E[chi2] ~ (m - 1)(k - 1) + sum over cells of noise_var / expected count, and
    I ~ chi2 / (2 n) (the G-test's relation), so that a wide domain is not favoured by its noise."""
    if score not in ("mi", "chi2"):
        raise ValueError(f"score must be 'mi' or 'chi2', got {score!r}")
    lay = TableLayout.from_schema(schema, bins)
    if np.shape(table) != (lay.length,):
        raise ValueError(f"expected a table of {lay.length} cells, got shape {np.shape(table)}")
    out = []
    for b in _blocks(table, lay):
        n = max(float(b.sum()), 1.0)
        expected = np.maximum(b.sum(axis=1, keepdims=True) @ b.sum(axis=0, keepdims=True) / n, 1.0)
        bias = (b.shape[0] - 1) * (b.shape[1] - 1) + float(np.sum(noise_var / expected))
        out.append(mutual_information(b) - bias / (2 * n) if score == "mi" else chi_square(b) - bias)
    return np.array(out)


def select_features(schema: Schema, scores: np.ndarray, m: int) -> list[str]:
    """The names of the ``m`` best-scoring features, in schema order (ties: the earlier feature)."""
    if not 1 <= m <= schema.n_features:
        raise ValueError(f"m must lie in [1, {schema.n_features}], got {m}")
    best = np.argsort(-np.asarray(scores), kind="stable")[:m]
    return [schema.names[j] for j in sorted(best)]
