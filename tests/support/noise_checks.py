"""Variance tests for noise measured from a party's answers, with stated false-alarm rates.

``residuals`` are (released value - the noiseless statistic the test computed itself); ``var`` is the
variance implied by the charged plan, computed by the test from public parameters. Every check also
runs its own power check: the same test, applied to the residuals shrunk to half their variance (a
party adding half the noise), must reject.
"""
from __future__ import annotations

import math
from typing import Any

import dp_accounting
import numpy as np
from scipy import stats

ALPHA = 1e-4  # two-sided false-alarm rate of every check below


def atoms(event: Any, mult: int = 1) -> list[tuple[Any, int]]:
    """The atomic events of a composition with their multiplicities (an independent tree walk)."""
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return [a for sub in event.events for a in atoms(sub, mult)]
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return atoms(event.event, mult * int(event.count))
    return [(event, mult)]


def _gaussian_accepts(r: np.ndarray, var: float, alpha: float) -> bool:
    n = r.size
    lo, hi = stats.chi2.ppf([alpha / 2, 1 - alpha / 2], n)
    return bool(lo < float(np.sum(r * r)) / var < hi)


def assert_gaussian_variance(residuals: np.ndarray, var: float, alpha: float = ALPHA) -> float:
    """sum r^2 / var ~ chi-square(n) for n independent N(0, var) residuals (mean known to be 0):
    two-sided interval with false-alarm rate ``alpha``. Also true, up to a relative error of
    1/(12 var), for round(sigma Z) with var = sigma^2 + 1/12. Returns the measured variance."""
    r = np.asarray(residuals, dtype=np.float64).ravel()
    measured = float(np.mean(r * r))
    assert _gaussian_accepts(r, var, alpha), f"measured noise variance {measured:.6g} vs planned {var:.6g} (n={r.size})"
    assert not _gaussian_accepts(r * math.sqrt(0.5), var, alpha), "power check: half the noise would pass"
    return measured


def discrete_laplace_moments(t: float) -> tuple[float, float]:
    """(variance, kurtosis) of P(x) ∝ exp(-|x|/t) on the integers: the difference of two geometric
    variables with q = e^(-1/t), p = 1 - q: variance 2q/p^2, kurtosis 6 + p^2/(2q)."""
    q = math.exp(-1.0 / t)
    p = -math.expm1(-1.0 / t)
    return 2.0 * q / (p * p), 6.0 + p * p / (2.0 * q)


def discrete_gaussian_variance(sigma: float) -> float:
    """Exact variance of the discrete Gaussian N_Z(0, sigma^2) (a sum over its support)."""
    k = np.arange(-int(40 * sigma) - 40, int(40 * sigma) + 41, dtype=np.float64)
    w = np.exp(-k * k / (2.0 * sigma * sigma))
    return float(np.sum(k * k * w) / np.sum(w))


def _moment_accepts(r: np.ndarray, var: float, kurtosis: float, alpha: float) -> bool:
    n = r.size
    z = (float(np.mean(r * r)) - var) / (var * math.sqrt((kurtosis - 1.0) / n))
    return abs(z) < stats.norm.ppf(1 - alpha / 2)


def assert_heavy_variance(residuals: np.ndarray, var: float, kurtosis: float, alpha: float = ALPHA) -> float:
    """Mean of n squared residuals against ``var`` for non-Gaussian noise (Laplace): normal
    approximation with the exact Var(r^2) = (kurtosis - 1) var^2. With n >= 5000 the skewness of the
    mean (6.6 / sqrt(n) for Laplace) keeps the false-alarm rate within a factor 2 of ``alpha``."""
    r = np.asarray(residuals, dtype=np.float64).ravel()
    measured = float(np.mean(r * r))
    assert _moment_accepts(r, var, kurtosis, alpha), \
        f"measured noise variance {measured:.6g} vs planned {var:.6g} (n={r.size})"
    assert not _moment_accepts(r * math.sqrt(0.5), var, kurtosis, alpha), "power check: half the noise would pass"
    return measured
