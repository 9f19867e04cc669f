"""The lazy exact samplers of dpfed.core.samplers: rounded Gaussian, discrete Gaussian, Bernoulli(e^-g).

Statistical tests use fixed seeds and reject at ALPHA = 1e-4 (false-alarm rate 1e-4 per test over
seeds, ~1e-3 for the file); each goodness-of-fit test is paired with a power check that rejects a
5 % wrong scale. The float filter is checked decision by decision against the exact interval
arithmetic path, and the exact path alone is checked for its law. Runtime: ~20 s.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpfed.core import bernoulli, samplers
from dpfed.core.rng import SecureRNG
from dpfed.core.samplers import sample_rounded_gaussian
from sampler_checks import chi2_pvalue, dgauss_pmf

ALPHA = 1e-4


def rng(seed) -> SecureRNG:
    return SecureRNG.from_seed(f"test_rounded_gaussian:{seed}")


def rounded_pmf(xs: np.ndarray, sigma: float) -> np.ndarray:
    xs = xs.astype(float)
    return stats.norm.sf((xs - 0.5) / sigma) - stats.norm.sf((xs + 0.5) / sigma)


@pytest.mark.parametrize("sigma", [0.6, 1.5, 3.0, 10.0])
def test_chi_square(sigma):
    x = sample_rounded_gaussian(sigma, 400_000, rng(f"chi{sigma}"))
    assert x.dtype == np.int64 and x.shape == (400_000,)
    assert chi2_pvalue(x, lambda xs: rounded_pmf(xs, sigma)) > ALPHA


def test_chi_square_has_power():
    x = sample_rounded_gaussian(3.0, 400_000, rng("power"))
    assert chi2_pvalue(x, lambda xs: rounded_pmf(xs, 3.15)) < ALPHA


def test_not_a_discrete_gaussian():
    """At sigma = 0.6 the rounded and the discrete Gaussian differ (P(0) = 0.595 vs 0.664): the
    test tells them apart, so the chi-square above really checks *this* law."""

    x = sample_rounded_gaussian(0.6, 400_000, rng("not-dg"))
    assert chi2_pvalue(x, lambda xs: dgauss_pmf(xs, 0.6)) < ALPHA


@pytest.mark.parametrize("sigma", [2.0**20, 2.0**27])
def test_large_sigma_ks(sigma):
    x = sample_rounded_gaussian(sigma, 100_000, rng(f"ks{sigma}")).astype(float)
    assert stats.kstest(x / sigma, "norm").pvalue > ALPHA
    assert stats.kstest(x / sigma, "norm", args=(0, 1.05)).pvalue < ALPHA


def test_exact_path_alone_has_the_law():
    """Every proposal through the mpmath interval path (the path the float filter defers to)."""
    x = sample_rounded_gaussian(1.5, 3_000, rng("exact"), _exact_only=True)
    assert chi2_pvalue(x, lambda xs: rounded_pmf(xs, 1.5), min_expected=10.0) > ALPHA
    assert chi2_pvalue(x, lambda xs: rounded_pmf(xs, 2.5), min_expected=10.0) < ALPHA


@pytest.mark.parametrize("sigma", [0.8, 3.0, 2.0**26])
def test_float_filter_agrees_with_interval_arithmetic(sigma):
    """Where the float filter decides, exact interval arithmetic on the same 64 + 32 bits decides
    the same way (accept/reject and the integer); a single disagreement fails."""
    r = rng(f"agree{sigma}")
    v, w = r.uint64(3000), r._uint32(3000)
    decided, accepted, out = samplers._rg_float_decide(v, w, sigma)
    assert decided.mean() > 0.999
    checked = 0
    for i in np.flatnonzero(decided):
        verdict, val = samplers._rg_interval_decide(int(v[i]), 64, int(w[i]), 32, sigma, 160, False)
        if verdict in ("more", "accept?"):
            continue  # intervals from 64 bits too wide to decide: nothing to compare
        assert (verdict == "accept") == bool(accepted[i])
        if accepted[i]:
            assert val == out[i]
        checked += 1
    assert checked > 2900


def test_float_filter_defers_near_the_acceptance_boundary():
    """U within 2^-32 of the acceptance probability: the filter must not decide."""
    v = np.array([2**63, 2**62, 3 * 2**62], dtype=np.uint64)
    e = -np.log(v.astype(float) * 2.0**-64)
    a = np.exp(-0.5 * (e - 1) ** 2)
    w = np.floor(a * 2**32).astype(np.uint32)  # U's interval contains a
    decided, _, _ = samplers._rg_float_decide(v, w, 3.0)
    assert not decided.any()


def test_float_filter_defers_near_a_half_integer():
    """sigma * E within float error of a half-integer: the filter must not round."""
    v = np.array([2**63], dtype=np.uint64)
    e = float(-np.log(2.0**63 * 2.0**-64))  # ln 2
    sigma = 2.5 / e                          # sigma E = 2.5 up to rounding
    w = np.array([0], dtype=np.uint32)       # U ~ 0: certainly accepted
    decided, _, _ = samplers._rg_float_decide(v, w, sigma)
    assert not decided[0]
    got = samplers._rg_exact_one(int(v[0]), 0, sigma, rng("half"))
    assert got in (2, 3)


def test_bad_sigma():
    for bad in (0.0, -1.0, float("nan"), float("inf"), 2.0**41):
        with pytest.raises(ValueError):
            sample_rounded_gaussian(bad, 3, rng("bad"))
    assert sample_rounded_gaussian(1.0, 0, rng("empty")).shape == (0,)
    assert sample_rounded_gaussian(1.0, (2, 3), rng("shape")).shape == (2, 3)


# -- the lazy exact Bernoulli(exp(-gamma)) behind the discrete Laplace / Gaussian and exponential --
@pytest.mark.parametrize("num,den", [(1, 3), (7, 2), (0, 5), (2**40 + 1, 2**40)])
def test_lazy_bernoulli_exp_frequency(num, den):
    import math

    x = samplers.bernoulli_exp(np.full(200_000, num), den, rng(f"be{num}/{den}"))
    p = math.exp(-num / den)
    assert stats.binomtest(int(x.sum()), x.size, p).pvalue > ALPHA


def test_lazy_bernoulli_exact_fallback_has_the_conditional_law():
    """U's first 32 bits straddle a = e^{-1/3}: given that, P(U < a) = a 2^32 - w, not a.
    The mpmath fallback must reproduce this conditional probability (a binomial test); a
    fallback that re-drew an independent Bernoulli(a) would fail it."""
    import math

    a = math.exp(-1 / 3)
    w = math.floor(a * 2**32)
    cond = a * 2**32 - w
    r = rng("fallback")
    hits = sum(bernoulli._uniform_below_exp(w, 1, 3, r) for _ in range(3000))
    assert stats.binomtest(hits, 3000, cond).pvalue > ALPHA
    assert abs(cond - a) > 0.05  # the test distinguishes the conditional law from a


# -- discrete Gaussian (step density by rejection from the Laplace law) -----------------------------
def test_discrete_gaussian_exact_path_alone_has_the_law():

    sigma = 1.3
    t, m = samplers._dg_envelope(sigma)
    r = rng("dg-exact")
    v, w, neg = r.uint64(4000), r._uint32(4000), bernoulli.random_bits(r, 4000)
    got = [samplers._dg_exact_one(int(a), int(b), bool(c), t, sigma, m, r) for a, b, c in zip(v, w, neg, strict=True)]
    x = np.array([g for g in got if g is not None], dtype=np.int64)
    assert 0.5 < x.size / 4000 < 0.8  # acceptance ~0.76 exp(-1/(2 sigma)) = 0.52..0.8
    assert chi2_pvalue(x, lambda xs: dgauss_pmf(xs, sigma), min_expected=10.0) > ALPHA
    assert chi2_pvalue(x, lambda xs: dgauss_pmf(xs, 2.0), min_expected=10.0) < ALPHA


@pytest.mark.parametrize("sigma", [0.4, 3.0, 2.0**26])
def test_discrete_gaussian_filter_agrees_with_interval_arithmetic(sigma):
    t, m = samplers._dg_envelope(sigma)
    r = rng(f"dg-agree{sigma}")
    v, w, neg = r.uint64(1500), r._uint32(1500), bernoulli.random_bits(r, 1500)
    decided, accepted, out = samplers._dg_float_decide(v, w, neg, t, m, 1.0 / (2 * sigma * sigma))
    assert decided.mean() > 0.999

    class NoMoreBits:  # the exact path must decide from the same 64 + 32 bits, or we skip it
        def uint64(self, n):
            raise LookupError

        _uint32 = uint64

    checked = 0
    for i in np.flatnonzero(decided):
        try:
            got = samplers._dg_exact_one(int(v[i]), int(w[i]), bool(neg[i]), t, sigma, m, NoMoreBits())
        except LookupError:
            continue
        assert (got is not None) == bool(accepted[i])
        if got is not None:
            assert got == out[i]
        checked += 1
    assert checked > 1400


def test_discrete_gaussian_envelope_bounds_the_exponent():
    """exp(|x|/t - round(x)^2/(2 sigma^2) - m) <= 1 everywhere: m is a true bound (dense grid)."""
    for sigma in (0.3, 0.5, 1.0, 2.7, 40.0):
        t, m = samplers._dg_envelope(sigma)
        x = np.linspace(0, 60 * sigma + 5, 400_001)
        r = np.floor(x + 0.5)
        assert np.max(x / t - r * r / (2 * sigma * sigma)) <= m
