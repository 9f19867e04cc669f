"""Goodness of fit and exact moments of dpfed's exact discrete samplers.

Every statistical test uses a fixed seed and rejects at level ALPHA = 1e-4, so a correct sampler
fails a given test with probability 1e-4 over seeds (about 1e-3 for this whole file); the
power checks show the same tests reject a sampler whose scale is off by 5%. Runtime: ~10 s.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpfed.core import bernoulli, samplers
from dpfed.core.rng import SecureRNG
from dpfed.core.samplers import (
    bernoulli_exp,
    laplace_fraction,
    sample_discrete_gaussian,
    sample_discrete_laplace,
)
from sampler_checks import chi2_pvalue, dgauss_pmf

ALPHA = 1e-4


def rng(seed) -> SecureRNG:
    return SecureRNG.from_seed(f"test_samplers:{seed}")


def dlap_pmf(xs: np.ndarray, scale: float) -> np.ndarray:
    a = 1.0 / scale
    return math.tanh(a / 2) * np.exp(-a * np.abs(xs))  # (1-e^-a)/(1+e^-a) e^{-a|x|}


@pytest.mark.parametrize("scale", [0.4, 1.0, 3.0, Fraction(7, 3), 25.5])
def test_discrete_laplace_chi_square(scale):
    x = sample_discrete_laplace(scale, 200_000, rng(f"dl{scale}"))
    assert x.dtype == np.int64
    assert chi2_pvalue(x, lambda xs: dlap_pmf(xs, float(scale))) > ALPHA


def test_discrete_laplace_chi_square_has_power():
    x = sample_discrete_laplace(3.0, 200_000, rng("dl-power"))
    assert chi2_pvalue(x, lambda xs: dlap_pmf(xs, 3.15)) < ALPHA


@pytest.mark.parametrize("sigma", [0.7, 2.5, 40.0])
def test_discrete_gaussian_chi_square(sigma):
    x = sample_discrete_gaussian(sigma, 200_000, rng(f"dg{sigma}"))
    assert chi2_pvalue(x, lambda xs: dgauss_pmf(xs, sigma)) > ALPHA


def test_discrete_gaussian_chi_square_has_power():
    x = sample_discrete_gaussian(2.5, 200_000, rng("dg-power"))
    assert chi2_pvalue(x, lambda xs: dgauss_pmf(xs, 2.5 * 1.05)) < ALPHA


@pytest.mark.parametrize("scale", [0.5, 2.0, 1e6])
def test_discrete_laplace_exact_moments(scale):
    """Mean 0 and variance 2e^{-1/b}/(1-e^{-1/b})^2, within 5 standard errors (false alarm ~1e-6)."""
    n = 400_000
    x = sample_discrete_laplace(scale, n, rng(f"dlm{scale}")).astype(float)
    a = 1.0 / scale
    var = 2 * math.exp(-a) / (1 - math.exp(-a)) ** 2
    assert abs(x.mean()) < 5 * math.sqrt(var / n)
    if scale <= 100:  # fourth moment from the pmf (only used for the standard error)
        xs = np.arange(-int(60 * scale) - 5, int(60 * scale) + 6)
        m4 = float(np.sum(dlap_pmf(xs, scale) * xs.astype(float) ** 4))
    else:  # continuous-Laplace value, relative error O(1/scale^2)
        m4 = 24 * scale**4
    se = math.sqrt((m4 - var * var) / n)
    assert abs(np.mean(x * x) - var) < 5 * se


@pytest.mark.parametrize("sigma", [1.0, 6.0])
def test_discrete_gaussian_exact_moments(sigma):
    n = 400_000
    x = sample_discrete_gaussian(sigma, n, rng(f"dgm{sigma}")).astype(float)
    xs = np.arange(-int(40 * sigma) - 5, int(40 * sigma) + 6)
    p = dgauss_pmf(xs, sigma)
    var = float(np.sum(p * xs**2))
    m4 = float(np.sum(p * xs**4))
    assert abs(x.mean()) < 5 * math.sqrt(var / n)
    assert abs(np.mean(x * x) - var) < 5 * math.sqrt((m4 - var * var) / n)


def test_discrete_gaussian_large_sigma_ks():
    """sigma = 2^20 (the grid regime of dpfed.core.mechanisms.gaussian): KS against N(0, sigma^2)."""
    sigma = 2.0**20
    x = sample_discrete_gaussian(sigma, 50_000, rng("dg-large")).astype(float)
    assert stats.kstest(x / sigma, "norm").pvalue > ALPHA
    assert stats.kstest(x / sigma, "norm", args=(0, 1.05)).pvalue < ALPHA  # power


def test_discrete_laplace_large_scale_ks():
    scale = 2.0**40
    x = sample_discrete_laplace(scale, 50_000, rng("dl-large")).astype(float)
    assert stats.kstest(x / scale, "laplace").pvalue > ALPHA
    assert stats.kstest(x / scale, "laplace", args=(0, 1.05)).pvalue < ALPHA


@pytest.mark.parametrize("num,den", [(0, 1), (1, 1), (2, 3), (7, 3), (9, 2), (5, 2**40 - 3)])
def test_bernoulli_exp_binomial(num, den):
    n = 200_000
    x = bernoulli_exp(np.full(n, num), den, rng(f"be{num}/{den}"))
    p = math.exp(-num / den)
    assert stats.binomtest(int(x.sum()), n, p).pvalue > ALPHA or p in (0.0, 1.0)
    if num == 0:
        assert x.all()


def test_bernoulli_exp_array_denominators():
    n = 100_000
    num = np.tile(np.array([1, 3, 10]), n)
    den = np.tile(np.array([4, 2, 7]), n)
    x = bernoulli_exp(num, den, rng("be-array")).reshape(n, 3)
    for j, p in enumerate(np.exp(-np.array([1 / 4, 3 / 2, 10 / 7]))):
        assert stats.binomtest(int(x[:, j].sum()), n, p).pvalue > ALPHA


def test_bernoulli_exp_minus_one_and_geometric():
    n = 400_000
    b = bernoulli._bernoulli_exp_minus_one(rng("em1"), n)
    assert stats.binomtest(int(b.sum()), n, math.exp(-1)).pvalue > ALPHA
    v = bernoulli.geometric_exp_minus_one(rng("geo"), n)
    q = math.exp(-1)
    ks = np.arange(0, 12)
    pmf = (1 - q) * q**ks
    obs = np.bincount(np.minimum(v, 11), minlength=12).astype(float)
    exp_ = np.append(pmf[:-1], q**11) * n
    assert stats.chisquare(obs, exp_).pvalue > ALPHA


def test_reproducible_and_shape():
    a = sample_discrete_laplace(2.0, (3, 4), SecureRNG.from_seed(5))
    b = sample_discrete_laplace(2.0, (3, 4), SecureRNG.from_seed(5))
    assert a.shape == (3, 4) and np.array_equal(a, b)
    assert sample_discrete_gaussian(1.0, 0, rng("empty")).shape == (0,)


def test_parameters_round_up_never_down():
    assert laplace_fraction(0.1) >= Fraction(0.1)
    assert laplace_fraction(Fraction(7, 3)) == Fraction(7, 3)
    for sigma in (Fraction(1, 3), Fraction(10, 7), 2.5):
        assert Fraction(samplers.dg_sigma(sigma)) >= sigma
        assert samplers.dg_sigma(sigma) == pytest.approx(float(sigma), rel=1e-15)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_invalid_parameters_raise(bad):
    with pytest.raises(ValueError):
        sample_discrete_laplace(bad, 3, rng("bad"))
    with pytest.raises(ValueError):
        sample_discrete_gaussian(bad, 3, rng("bad"))


def test_overflowing_parameters_raise():
    with pytest.raises(ValueError, match="too large"):
        sample_discrete_laplace(2.0**60, 3, rng("big"))
    with pytest.raises(ValueError, match="too large"):
        sample_discrete_gaussian(2.0**40, 3, rng("big"))
    with pytest.raises(ValueError):
        bernoulli_exp(np.array([1]), np.array([2**62]), rng("big"))
    with pytest.raises(ValueError):
        bernoulli_exp(np.array([-1]), 3, rng("neg"))
    with pytest.raises(ValueError):
        bernoulli_exp(np.array([0.5]), 3, rng("float"))


def test_exp_minus_one_boundaries_exact():
    """Alg. 1 (gamma = 1) from one uniform M on [0, 12!): K > k exactly when M < 12!/k!. Checked at
    every threshold and its neighbours (a deterministic test, no false alarms)."""
    f12 = math.factorial(12)
    ms = sorted({m for k in range(1, 13) for m in (f12 // math.factorial(k) + d for d in (-1, 0, 1))
                 if 0 <= m < f12})
    got = bernoulli._exp_minus_one_from_uniform(np.array(ms, dtype=np.int64), rng("bounds"))
    for m, g in zip(ms, got, strict=True):
        if m == 0:
            continue  # K > 12: continues at random
        k_stop = 1 + sum(m < f12 // math.factorial(j) for j in range(1, 13))
        assert bool(g) == (k_stop % 2 == 1), m


def test_discrete_gaussian_at_max_sigma():
    """At sigma = 2^28 (the limit) the float filter defers the most proposals to the exact
    path. KS against N(0, sigma^2) at level ALPHA."""
    sigma = float(samplers.MAX_GAUSSIAN_SIGMA)
    x = sample_discrete_gaussian(sigma, 60_000, rng("dg-max")).astype(float)
    assert stats.kstest(x / sigma, "norm").pvalue > ALPHA
