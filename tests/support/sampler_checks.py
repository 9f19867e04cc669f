"""Goodness-of-fit helpers shared by the sampler tests: the discrete Gaussian pmf and a chi-square
test on integer samples with pooled tails."""
from __future__ import annotations

import numpy as np
from scipy import stats


def dgauss_pmf(xs: np.ndarray, sigma: float) -> np.ndarray:
    span = np.arange(-int(40 * sigma) - 40, int(40 * sigma) + 41)
    z = np.exp(-span.astype(float) ** 2 / (2 * sigma * sigma)).sum()
    return np.exp(-xs.astype(float) ** 2 / (2 * sigma * sigma)) / z


def chi2_pvalue(samples: np.ndarray, pmf, min_expected: float = 20.0) -> float:
    """Chi-square goodness of fit on integer samples; tails pooled so every cell expects >= 20."""
    n = samples.size
    lo, hi = int(samples.min()), int(samples.max())
    width = max(abs(lo), abs(hi)) + 1
    xs = np.arange(-width, width + 1)
    p = pmf(xs)
    # pool from the outside in until each cell has enough expected mass
    centre = np.flatnonzero(p * n >= min_expected)
    a, b = centre.min(), centre.max()
    obs = np.bincount(samples - xs[0], minlength=xs.size).astype(float)
    exp_ = p * n
    cells_o = np.concatenate([[obs[:a].sum() if a else 0], obs[a:b + 1], [obs[b + 1:].sum()]])
    left_tail = pmf_tail(pmf, xs[a], below=True)
    right_tail = pmf_tail(pmf, xs[b], below=False)
    cells_e = np.concatenate([[left_tail * n], exp_[a:b + 1], [right_tail * n]])
    keep = cells_e > 0
    return float(stats.chisquare(cells_o[keep], cells_e[keep] * cells_o[keep].sum() / cells_e[keep].sum()).pvalue)


def pmf_tail(pmf, edge: int, below: bool) -> float:
    span = 10_000
    xs = np.arange(edge - span, edge) if below else np.arange(edge + 1, edge + 1 + span)
    return float(pmf(xs).sum())
