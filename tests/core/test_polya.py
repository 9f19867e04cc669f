"""Polya shares (dpfed.core.polya) against exact references: NB(1/m, p) draws fit SciPy's negative binomial pmf
(an independent implementation of Gamma(k + r) / (k! Gamma(r)) (1 - p)^r p^k), on the float-filtered path and on
the exact interval-arithmetic path alone; m independent shares sum to the discrete Laplace P(x) ∝ p^|x|; the
share variance and the wrap-around tail bound hold. Every goodness-of-fit test is a chi-square test on cells of
>= 20 expected draws, failing at p < 1e-4 (its false-alarm rate)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpfed.core.distributed_laplace import PolyaNoisePlan, polya_bits, polya_scale
from dpfed.core.polya import geometric_tail_bound, polya_share_variance, sample_negative_binomial, sample_polya_share
from dpfed.core.rng import SecureRNG

ALPHA = 1e-4


def _chi2(x: np.ndarray, cdf, ppf) -> float:
    """Chi-square p-value of integer draws ``x`` against the law with CDF ``cdf`` and quantile function ``ppf``
    (both vectorised on integers / probabilities): cells (e_i, e_{i+1}] between the law's 1/40 quantiles (merged
    until each expects >= 20 draws), tails pooled."""
    n = x.size
    e = np.unique(ppf(np.linspace(0, 1, 41)[1:-1]).astype(np.int64))
    F = np.concatenate([[0.0], cdf(e), [1.0]])
    keep = [0]
    for i in range(1, len(F) - 1):
        if (F[i] - F[keep[-1]]) * n >= 20 and (1 - F[i]) * n >= 20:
            keep.append(i)
    keep.append(len(F) - 1)
    F = F[keep]
    e = e[np.array(keep[1:-1]) - 1]
    obs = np.bincount(np.searchsorted(e, x, side="left"), minlength=len(e) + 1).astype(float)
    exp_ = np.diff(F) * n
    assert obs.sum() == n and len(e) >= 4
    return float(stats.chisquare(obs, exp_ * n / exp_.sum()).pvalue)


@pytest.mark.parametrize("scale,m,n", [(3.0, 5, 40_000), (50.0, 2, 40_000), (1e4, 5, 40_000), (2.5e6, 3, 40_000)])
def test_negative_binomial_fits_the_exact_pmf(scale, m, n):
    x = sample_negative_binomial(scale, m, n, SecureRNG.from_seed(f"nb{scale}{m}"))
    assert x.dtype == np.int64 and x.min() >= 0
    p = math.exp(-1.0 / scale)
    law = stats.nbinom(1.0 / m, 1.0 - p)  # SciPy: failures before r successes of probability 1 - p
    assert _chi2(x, law.cdf, law.ppf) > ALPHA


def test_exact_interval_path_alone_fits_the_pmf():
    """Every Poisson and logarithmic decision by mpmath intervals (no float filter)."""
    x = sample_negative_binomial(4.0, 3, 3000, SecureRNG.from_seed("exact"), _exact_only=True)
    law = stats.nbinom(1.0 / 3, 1.0 - math.exp(-0.25))
    assert _chi2(x, law.cdf, law.ppf) > ALPHA


@pytest.mark.parametrize("scale,m", [(2.0, 4), (300.0, 5), (7.0, 1)])
def test_m_shares_sum_to_the_discrete_laplace(scale, m):
    n = 40_000
    rng = SecureRNG.from_seed(f"sum{scale}")
    total = sum(sample_polya_share(scale, m, n, rng) for _ in range(m))
    q = math.exp(-1.0 / scale)

    def cdf(k):  # P(X <= k) of P(x) = (1 - q) / (1 + q) q^|x|
        k = np.asarray(k, dtype=float)
        return np.where(k < 0, q ** (-k) / (1 + q), 1 - q ** (k + 1) / (1 + q))

    def ppf(u):  # the smallest k with cdf(k) >= u
        u = np.asarray(u, dtype=float)
        lo = np.ceil(np.log(u * (1 + q)) / math.log(q)) * -1
        hi = np.ceil(np.log((1 - u) * (1 + q)) / math.log(q) - 1)
        k = np.where(u < 1 / (1 + q), lo, hi)
        return k - (cdf(k - 1) >= u)  # float rounding: step back where the previous integer qualifies

    assert _chi2(total, cdf, ppf) > ALPHA
    # and the variance of one share is the planned one (the sample variance within 6 standard errors, kurtosis 6)
    one = sample_polya_share(scale, m, n, rng).astype(float)
    var = polya_share_variance(scale, m)
    assert var * m == pytest.approx(2 * q / (1 - q) ** 2)
    assert abs(one.var() / var - 1) < 6 * math.sqrt(20.0 / n)  # share kurtosis <= 3 + 6 m (cumulants)


def test_shapes_and_bad_parameters():
    rng = SecureRNG.from_seed("shape")
    assert sample_polya_share(5.0, 3, (4, 7), rng).shape == (4, 7)
    assert sample_polya_share(5.0, 3, 0, rng).shape == (0,)
    for bad in [(0.0, 3), (-1.0, 3), (math.inf, 3), (2.0**41, 3), (5.0, 0), (5.0, 1.5)]:
        with pytest.raises(ValueError):
            sample_polya_share(bad[0], bad[1], 3, rng)


def test_tail_bound_and_bits_cover_all_shares():
    """The tail bound against the exact law of 10 shares planned for 4 (NB(2.5) - NB(2.5)), summed numerically."""
    scale, m, P, prob = 20.0, 4, 10, 1e-6
    x = geometric_tail_bound(scale, m, P, prob)
    law = stats.nbinom(P / m, 1 - math.exp(-1 / scale))
    k = np.arange(0, int(4 * x))
    pmf = law.pmf(k)
    diff = np.convolve(pmf, pmf[::-1])  # pmf of NB - NB on -(K-1)..K-1
    centre = len(k) - 1
    tail = diff[:centre - int(math.ceil(x)) + 1].sum() + diff[centre + int(math.ceil(x)):].sum()
    assert tail <= prob
    plan = PolyaNoisePlan(polya_scale(80, 1.0), 3)
    bits = polya_bits(16, 1000 * 10.0, plan, 5, 100, 1e-9)
    assert 2 ** (bits - 1) > 1000 * 10 + geometric_tail_bound(plan.scale, 3, 5, 1e-11)
    assert plan.epsilon(80) <= 1.0 and plan.epsilon(80) == pytest.approx(80 / 81, rel=1e-6)
    assert plan.event(160).noise_parameter == pytest.approx(160 / 81, rel=1e-6)


def test_per_block_plan_spends_the_sum_of_its_blocks_and_draws_each_blocks_law():
    """Per-block scales: pure epsilon sum_b l1_b / t_b (exact rational: 1 / 4 + 3 * 2^16 / (2^16 * 12) = 1 / 2,
    computed here), twice that for twice the L1; the draw of 3 shares on each block is the discrete Laplace of that
    block's scale (chi-square of |x| against 2 (1 - q) q^k / (1 + q), p < 1e-4 a false alarm); malformed blocks and a
    vector of the wrong length are refused."""
    from fractions import Fraction

    t1, t2 = Fraction(4), Fraction(12 * (1 << 16))
    plan = PolyaNoisePlan(t2, 3, ((4000, t1, 1), (20, t2, 3 << 16)))
    assert plan.epsilon(1 + (3 << 16)) == 0.5 and plan.epsilon(2 * (1 + (3 << 16))) == 1.0
    x = sum(plan.add_noise_mod(np.zeros(4020, np.int64), 40, SecureRNG.from_seed(f"blocks{i}")).view(np.int64)
            for i in range(3)) % (1 << 40)  # the 3 parties' shares summed mod 2^40, then centred
    x = np.where(x >= 1 << 39, x - (1 << 40), x)
    a = np.abs(x[:4000])
    q = math.exp(-1 / 4)
    e = np.arange(0, 12)
    F = np.concatenate([[0.0], 1 - 2 * q ** (e + 1) / (1 + q), [1.0]])
    obs = np.bincount(np.minimum(a, 12), minlength=13)
    assert stats.chisquare(obs, np.diff(F) * a.size).pvalue > ALPHA
    assert np.abs(x[4000:]).mean() > 1000  # the moments block's scale, 786,432: |x| of order 10^5
    with pytest.raises(ValueError):
        plan.add_noise_mod(np.zeros(4000, np.int64), 40, SecureRNG.from_seed("short"))
    with pytest.raises(ValueError):
        PolyaNoisePlan(t1, 3, ((10, t1, 1), (10, t2, 1)))  # `scale` must be the largest block's
