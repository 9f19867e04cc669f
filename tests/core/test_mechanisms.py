"""dpfed.core.mechanisms and dpfed.core.clipping: output laws, spent-vs-claimed epsilon, validation.

Statistical tests use fixed seeds and reject at ALPHA = 1e-4 (false alarm 1e-4 per test over
seeds, ~2e-3 for the file). Runtime budget: ~40 s on a loaded 2-core machine.
"""
from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution as pld
from scipy import stats

from dpfed.core import accounting, clipping
from dpfed.core.mechanisms import (
    Release,
    discrete_gaussian,
    discrete_laplace,
    exponential,
    gaussian,
    gaussian_sigma,
    laplace,
    randomized_response,
    rounded_gaussian,
    rr_frequencies,
)
from dpfed.core.rng import SecureRNG

ALPHA = 1e-4
ADD_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
REPLACE = dp_accounting.NeighboringRelation.REPLACE_ONE


def rng(seed) -> SecureRNG:
    return SecureRNG.from_seed(f"test_mechanisms:{seed}")


def pld_epsilon(event, delta: float, relation=ADD_REMOVE) -> float:
    acc = dp_accounting.pld.PLDAccountant(relation, value_discretization_interval=1e-4)
    acc.compose(event)
    return acc.get_epsilon(delta)


# -- spent epsilon (dp-accounting PLD) equals the claim -----------------------------------------
@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_laplace_event_matches_claim(eps):
    for x, grid in ((np.zeros(1000), None), (2.5, 12)):
        r = laplace(x, sensitivity=2.0, epsilon=eps, rng=rng("lap-ev"), grid_bits=grid)
        assert isinstance(r, Release)
        spent = pld_epsilon(r.event, 1e-12)
        assert spent <= eps * (1 + 1e-4) + 1e-4
        assert spent >= eps * 0.999 - 1e-4  # not wastefully conservative either


@pytest.mark.parametrize("sens", [1, 3, 5000])
def test_discrete_laplace_event_matches_claim(sens):
    r = discrete_laplace(np.arange(10), sensitivity=sens, epsilon=0.7, rng=rng("dl-ev"))
    assert r.value.dtype == np.int64 and r.value.shape == (10,)
    if sens <= 4096:
        assert isinstance(r.event, dp_event.DiscreteLaplaceDpEvent)
        assert r.event.sensitivity == sens
    spent = pld_epsilon(r.event, 1e-12)
    assert 0.7 * 0.999 - 1e-4 <= spent <= 0.7 * (1 + 1e-4) + 1e-4


@pytest.mark.parametrize("eps,delta", [(0.5, 1e-6), (1.0, 1e-5), (4.0, 1e-8)])
def test_gaussian_calibrated_event_matches_claim(eps, delta):
    r = gaussian(np.zeros(100), sensitivity=1.5, epsilon=eps, delta=delta, rng=rng("g-ev"))
    assert isinstance(r.event, dp_event.GaussianDpEvent)
    spent = pld_epsilon(r.event, delta)
    assert eps * 0.995 <= spent <= eps * (1 + 1e-3)


def test_gaussian_sigma_event_uses_grid_sensitivity():
    r = gaussian(np.ones(4), sensitivity=1.0, sigma=3.0, rng=rng("g-sig"), grid_bits=10)
    sens_g = 2**10 + 2.0  # sens * 2^k + sqrt(d)
    assert r.details["sensitivity_on_grid"] >= sens_g
    sigma_g = 3.0 * 2**10
    expected = sigma_g / r.details["sensitivity_on_grid"]  # rounded Gaussian: exact, no factor
    assert isinstance(r.event, dp_event.GaussianDpEvent)
    assert r.event.noise_multiplier == pytest.approx(expected, rel=1e-12)
    assert r.event.noise_multiplier <= expected
    assert np.all(r.value * 2**10 == np.round(r.value * 2**10))  # on the public grid


@pytest.mark.parametrize("d,z,sens", [(1, 0.8, 1.0), (100, 2.0, 0.5), (10_000, 5.0, 3.0)])
def test_gaussian_by_noise_multiplier_pays_the_grid_in_noise(d, z, sens):
    """noise_multiplier=z: the event is exactly GaussianDpEvent(z) (what algorithm plans charge), and
    the std covers the grid-inflated sensitivity: sigma >= z * sens_grid * 2^-k > z * sens."""
    r = gaussian(np.zeros(d), sensitivity=sens, noise_multiplier=z, rng=rng("g-nm"))
    assert r.event == dp_event.GaussianDpEvent(z)
    k = r.details["grid_bits"]
    assert r.details["sigma"] * 2.0**k >= z * r.details["sensitivity_on_grid"]
    assert r.details["sensitivity_on_grid"] >= sens * 2.0**k + math.sqrt(d)
    assert r.details["sigma"] == pytest.approx(z * sens, rel=1e-5)
    with pytest.raises(ValueError, match="exactly one"):
        gaussian(np.zeros(3), sensitivity=1.0, noise_multiplier=1.0, sigma=1.0, rng=rng("x"))


def test_gaussian_sigma_analytic_and_classic():
    for eps, delta in ((0.3, 1e-5), (1.0, 1e-6), (8.0, 1e-10)):
        s = gaussian_sigma(epsilon=eps, delta=delta, sensitivity=2.0)
        g = pld.from_gaussian_mechanism(s / 2.0, value_discretization_interval=1e-4)
        assert g.get_epsilon_for_delta(delta) == pytest.approx(eps, rel=1e-3)
        assert g.get_delta_for_epsilon(eps) <= delta * (1 + 1e-3)
    classic = gaussian_sigma(epsilon=0.5, delta=1e-5, analytic=False)
    assert classic == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 0.5)
    assert gaussian_sigma(epsilon=0.5, delta=1e-5) < classic  # Balle & Wang: analytic is smaller
    with pytest.raises(ValueError, match="epsilon < 1"):
        gaussian_sigma(epsilon=2.0, delta=1e-5, analytic=False)


def test_exponential_event_is_pure_epsilon():
    r = exponential([0.0, 1.0, 5.0], sensitivity=1.0, epsilon=0.8, rng=rng("exp-ev"))
    assert r.value in (0, 1, 2)
    assert pld_epsilon(r.event, 0.0) == pytest.approx(0.8, rel=1e-4)
    # it is the binary-RR pair: delta(eps') = (e^eps - e^eps')/(1 + e^eps) for eps' < eps
    d = dp_accounting.pld.PLDAccountant(ADD_REMOVE, value_discretization_interval=1e-6)
    d.compose(r.event)
    assert d.get_delta(0.3) == pytest.approx((math.exp(0.8) - math.exp(0.3)) / (1 + math.exp(0.8)), rel=1e-3)


@pytest.mark.parametrize("k", [2, 5])
def test_randomized_response_event_matches_claim(k):
    r = randomized_response(np.zeros(10, dtype=int), k=k, epsilon=1.3, rng=rng("rr-ev"))
    assert pld_epsilon(r.event, 0.0, REPLACE) == pytest.approx(1.3, rel=1e-4)


# -- the discretisation corrections dominate the exact discrete PLDs -----------------------------
@pytest.mark.parametrize("sens,eps", [(1, 0.3), (2, 1.0), (5, 3.0), (10, 1.0)])
def test_discrete_laplace_dominated_by_continuous_with_sensitivity_plus_one(sens, eps):
    a = eps / sens
    disc = pld.from_discrete_laplace_mechanism(a, sensitivity=sens, value_discretization_interval=1e-5)
    same = pld.from_laplace_mechanism(1 / a, sensitivity=sens, value_discretization_interval=1e-5)
    plus1 = pld.from_laplace_mechanism(1 / a, sensitivity=sens + 1, value_discretization_interval=1e-5)
    for delta in (1e-2, 1e-4, 1e-6):
        assert disc.get_epsilon_for_delta(delta) <= plus1.get_epsilon_for_delta(delta)
    # ... and the correction is needed: at the same sensitivity the discrete curve is worse
    assert disc.get_epsilon_for_delta(1e-2) > same.get_epsilon_for_delta(1e-2)


@pytest.mark.parametrize("sigma,sens,m", [(2.0, 1, 1), (5.0, 1, 3), (3.0, 2, 2)])
def test_discrete_gaussian_event_is_the_exact_discrete_pld(sigma, sens, m):
    """The charge is dp-accounting's exact discrete-Gaussian PLD, composed over the m coordinates
    one record moves (plus a 2e-30 truncation delta), not a continuous stand-in."""
    r = discrete_gaussian(np.zeros(4, dtype=int), sensitivity=sens, coordinates=m, sigma=sigma, rng=rng("dg-ev"))
    one = r.event if m == 1 else r.event.event
    assert isinstance(one, accounting.ScalarDiscreteGaussianDpEvent) and one.sensitivity == sens
    assert one.sigma >= sigma and one.sigma == pytest.approx(sigma, rel=1e-6)  # the law sampled
    disc = pld.from_discrete_gaussian_mechanism(sigma, sensitivity=sens, value_discretization_interval=1e-4)
    disc = disc.self_compose(m) if m > 1 else disc
    for delta in (1e-2, 1e-4, 1e-6, 1e-9):
        assert accounting.epsilon(r.event, delta) == pytest.approx(disc.get_epsilon_for_delta(delta),
                                                                   rel=1e-3, abs=1e-4)
    # the discrete Gaussian is slightly *worse* than the continuous Gaussian at the same sigma,
    # which is why it is not charged as one
    cont = pld.from_gaussian_mechanism(sigma / (sens * math.sqrt(m)), value_discretization_interval=1e-4)
    assert disc.get_epsilon_for_delta(1e-6) > cont.get_epsilon_for_delta(1e-6)
    # RDP: the provable zCDP bound rho = m s^2 / (2 sigma^2)
    rho = m * sens**2 / (2 * sigma**2)
    assert r.details["rho"] == pytest.approx(rho)
    zc = accounting.epsilon(dp_accounting.ZCDpEvent(rho), 1e-6, accountant="rdp")
    assert accounting.epsilon(r.event, 1e-6, accountant="rdp") == pytest.approx(zc, rel=1e-6)


def test_discrete_gaussian_refuses_non_integer_sensitivity_and_huge_sigma():
    with pytest.raises(ValueError, match="integer"):
        discrete_gaussian([1, 2], sensitivity=1.5, sigma=2.0, rng=rng("bad"))
    with pytest.raises(ValueError, match="rounded_gaussian"):
        discrete_gaussian([1, 2], sigma=2.0**15, rng=rng("bad"))


@pytest.mark.parametrize("sens", [1.0, 3.5])
def test_rounded_gaussian_event_is_exact_gaussian(sens):
    r = rounded_gaussian(np.arange(50), sensitivity=sens, epsilon=1.0, delta=1e-6, rng=rng("rg-ev"))
    assert r.value.dtype == np.int64 and r.value.shape == (50,)
    assert isinstance(r.event, dp_event.GaussianDpEvent)
    assert r.event.noise_multiplier == pytest.approx(r.details["sigma"] / sens, rel=1e-12)
    assert pld_epsilon(r.event, 1e-6) == pytest.approx(1.0, rel=2e-3)
    with pytest.raises(ValueError, match="integer"):
        rounded_gaussian([0.5], sensitivity=1, sigma=1, rng=rng("bad"))


# -- output laws ----------------------------------------------------------------------------------
def test_laplace_output_ks_and_grid():
    x = np.linspace(-3, 3, 60_000)
    r = laplace(x, sensitivity=1.0, epsilon=0.5, rng=rng("lap-ks"))
    k = r.details["grid_bits"]
    assert np.all(np.ldexp(r.value, k) == np.round(np.ldexp(r.value, k)))
    z = r.value - np.round(np.ldexp(x, k)) * 2.0**-k
    assert stats.kstest(z, "laplace", args=(0, r.details["scale"])).pvalue > ALPHA
    assert stats.kstest(z, "laplace", args=(0, 0.95 * r.details["scale"])).pvalue < ALPHA
    assert r.details["scale"] == pytest.approx(2.0, rel=1e-4)


def test_gaussian_output_ks_and_variance():
    x = np.full(60_000, 10.0)
    r = gaussian(x, sensitivity=1.0, sigma=1.7, rng=rng("g-ks"))
    z = r.value - 10.0
    assert stats.kstest(z, "norm", args=(0, 1.7)).pvalue > ALPHA
    assert stats.kstest(z, "norm", args=(0, 1.7 * 1.05)).pvalue < ALPHA
    n = z.size  # variance within 5 standard errors (sd of s^2 is sigma^2 sqrt(2/n))
    assert abs(z.var() - 1.7**2) < 5 * 1.7**2 * math.sqrt(2 / n)


def test_scalar_outputs_keep_type():
    assert isinstance(laplace(1.0, sensitivity=1, epsilon=1, rng=rng("s")).value, float)
    assert isinstance(gaussian(1.0, sensitivity=1, sigma=1, rng=rng("s")).value, float)
    assert isinstance(discrete_laplace(3, sensitivity=1, epsilon=1, rng=rng("s")).value, int)
    assert isinstance(discrete_gaussian(3, sensitivity=1, sigma=1, rng=rng("s")).value, int)
    assert isinstance(randomized_response(1, k=3, epsilon=1, rng=rng("s")).value, int)


def test_exponential_distribution_chi_square():
    scores = np.array([0.0, 1.0, 2.5, -1.0])
    eps, sens = 1.2, 1.0
    r = exponential(scores, sensitivity=sens, epsilon=eps, rng=rng("exp-chi"), size=100_000)
    assert isinstance(r.event, dp_event.SelfComposedDpEvent) and r.event.count == 100_000
    w = np.exp(eps * scores / (2 * sens))
    obs = np.bincount(r.value, minlength=4)
    assert stats.chisquare(obs, w / w.sum() * obs.sum()).pvalue > ALPHA
    mono = exponential(scores, sensitivity=sens, epsilon=eps, rng=rng("exp-mono"), size=100_000,
                       monotonic=True)
    w = np.exp(eps * scores / sens)
    assert stats.chisquare(np.bincount(mono.value, minlength=4), w / w.sum() * 100_000).pvalue > ALPHA


def test_exponential_huge_score_gaps_are_exact_and_safe():
    r = exponential([0.0, 1e12, -1e12], sensitivity=1.0, epsilon=1.0, rng=rng("exp-big"), size=50)
    assert np.all(r.value == 1)


@pytest.mark.parametrize("k", [2, 6])
def test_randomized_response_law_and_unbiased_estimator(k):
    n = 120_000
    eps = 1.0
    truth = np.arange(n) % k
    r = randomized_response(truth, k=k, epsilon=eps, rng=rng(f"rr{k}"))
    p_keep = math.exp(eps) / (math.exp(eps) + k - 1)
    kept = np.sum(r.value == truth)
    assert stats.binomtest(int(kept), n, p_keep).pvalue > ALPHA
    est = rr_frequencies(r.value, k=k, epsilon=eps)
    assert est.sum() == pytest.approx(1.0)
    # each estimate's sd is sqrt(f(1-f)/n)/(p - q) with f <= 1; 5 sd
    q = 1 / (math.exp(eps) + k - 1)
    assert np.all(np.abs(est - 1 / k) < 5 * 0.5 / math.sqrt(n) / (p_keep - q))
    skewed = np.where(np.arange(n) < n * 0.7, 0, 1)
    est2 = rr_frequencies(randomized_response(skewed, k=k, epsilon=eps, rng=rng("rr-sk")).value, k=k, epsilon=eps)
    assert est2[0] == pytest.approx(0.7, abs=5 * 0.5 / math.sqrt(n) / (p_keep - q))


# -- input validation -----------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_rejected(bad):
    for fn in (lambda v: laplace(v, sensitivity=1, epsilon=1, rng=rng("v")),
               lambda v: gaussian(v, sensitivity=1, sigma=1, rng=rng("v")),
               lambda v: exponential(v, sensitivity=1, epsilon=1, rng=rng("v")),
               lambda v: clipping.clip_rows_l2(v[None, :], 1.0)):
        with pytest.raises(ValueError, match="NaN or infinity"):
            fn(np.array([1.0, bad]))


@pytest.mark.parametrize("eps", [0, -1, np.nan, np.inf, "a"])
def test_bad_epsilon_rejected(eps):
    with pytest.raises(ValueError, match="epsilon"):
        laplace([1.0], sensitivity=1, epsilon=eps, rng=rng("e"))
    with pytest.raises(ValueError, match="epsilon"):
        discrete_laplace([1], sensitivity=1, epsilon=eps, rng=rng("e"))
    with pytest.raises(ValueError, match="epsilon"):
        randomized_response([1], k=2, epsilon=eps, rng=rng("e"))


def test_other_bad_inputs_rejected():
    r = rng("bad")
    with pytest.raises(ValueError, match="sensitivity"):
        laplace([1.0], sensitivity=-1, epsilon=1, rng=r)
    with pytest.raises(ValueError, match="integer"):
        discrete_laplace([1.5], sensitivity=1, epsilon=1, rng=r)
    with pytest.raises(ValueError, match="integer sensitivity"):
        discrete_laplace([1], sensitivity=1.5, epsilon=1, rng=r)
    with pytest.raises(ValueError, match="1-D"):
        exponential(np.zeros((2, 2)), sensitivity=1, epsilon=1, rng=r)
    with pytest.raises(ValueError, match="1-D"):
        exponential([], sensitivity=1, epsilon=1, rng=r)
    with pytest.raises(ValueError, match="0..2"):
        randomized_response([0, 3], k=3, epsilon=1, rng=r)
    with pytest.raises(ValueError, match="k must"):
        randomized_response([0], k=1, epsilon=1, rng=r)
    with pytest.raises(ValueError, match="sigma or"):
        gaussian([1.0], sensitivity=1, sigma=1, epsilon=1, delta=1e-5, rng=r)
    with pytest.raises(ValueError, match="give sigma"):
        gaussian([1.0], sensitivity=1, epsilon=1, rng=r)
    with pytest.raises(ValueError, match="delta"):
        gaussian([1.0], sensitivity=1, epsilon=1, delta=1.5, rng=r)
    with pytest.raises(ValueError, match="too large for the public grid"):
        laplace([1e300], sensitivity=1, epsilon=1, rng=r)
    with pytest.raises(ValueError, match="grid_bits"):
        laplace([1.0], sensitivity=1, epsilon=1, rng=r, grid_bits=2.5)


def test_error_messages_do_not_leak_values():
    secret = 123456.789
    with pytest.raises(ValueError) as info:
        laplace([secret, np.nan], sensitivity=1, epsilon=1, rng=rng("leak"))
    assert "123456" not in str(info.value)


# -- clipping helpers -----------------------------------------------------------------------------
def test_clip_rows_l2():
    X = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [-6.0, 8.0]])
    out, norms = clipping.clip_rows_l2(X, 1.0)
    assert np.allclose(norms, [5, 0.5, 0, 10])
    assert np.all(np.linalg.norm(out, axis=1) <= 1.0)
    assert np.array_equal(out[1], X[1]) and np.array_equal(out[2], X[2])
    assert np.allclose(out[0], [0.6, 0.8]) and np.allclose(out[3], [-0.6, 0.8])
    big = rng("clip").normal((2000, 7), scale=50.0)
    c, _ = clipping.clip_rows_l2(big, 0.1)
    assert np.all(np.sqrt(np.sum(c * c, axis=1)) <= 0.1)
    with pytest.raises(ValueError, match="2-D"):
        clipping.clip_rows_l2(np.ones(3), 1.0)
    with pytest.raises(ValueError, match="max_norm"):
        clipping.clip_rows_l2(np.ones((2, 2)), 0.0)


def test_clamp_and_sensitivities():
    X = np.array([[-5.0, 0.5], [2.0, 9.0]])
    assert np.array_equal(clipping.clamp(X, 0.0, 1.0), [[0, 0.5], [1, 1]])
    assert np.array_equal(clipping.clamp(X, [-1.0, 0.0], [1.0, 5.0]), [[-1, 0.5], [1, 5]])
    with pytest.raises(ValueError, match="lower bound"):
        clipping.clamp(X, 1.0, 0.0)
    with pytest.raises(ValueError, match="per-column"):
        clipping.clamp(X, [0.0, 0.0, 0.0], 1.0)
    assert clipping.count_sensitivity() == 1
    assert clipping.sum_sensitivity(-2.0, 1.0) == 2.0
    assert clipping.sum_sensitivity([-1.0, 0.0], [1.0, 3.0]) == 4.0
    assert clipping.sum_sensitivity([-1.0, 0.0], [1.0, 3.0], norm=2) == pytest.approx(math.sqrt(10))
    assert clipping.mean_sensitivity(0.0, 10.0, 100) == pytest.approx(0.1)
    assert clipping.mean_sensitivity([0.0, 0.0], [3.0, 4.0], 10, norm=2) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        clipping.mean_sensitivity(0.0, 1.0, 0)
    # the mean bound really holds for add/remove with a public lower bound n on the size
    data = np.array([0.0] * 100)
    assert abs(np.mean(np.append(data, 10.0)) - np.mean(data)) <= clipping.mean_sensitivity(0, 10, 100)


def test_l2_clip_factors_put_every_vector_inside_the_ball_and_never_raise():
    from dpfed.core.clipping import clip_rows_l2, l2_clip_factors

    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 7)) * rng.choice([0.01, 1.0, 1e3], size=(500, 1))
    f = l2_clip_factors(np.linalg.norm(X, axis=1), 1.0)
    assert np.all(np.linalg.norm(X * f[:, None], axis=1) <= 1.0)
    inside = np.linalg.norm(X, axis=1) <= 1.0
    assert np.all(f[inside] == 1.0) and np.all(f[~inside] < 1.0)
    clipped, norms = clip_rows_l2(X, 1.0)
    assert np.array_equal(clipped, X * l2_clip_factors(norms, 1.0)[:, None])
    assert list(l2_clip_factors(np.array([np.inf, np.nan, -1.0, 0.0]), 2.0)) == [0.0, 0.0, 0.0, 1.0]


def test_clamp_in_place_and_with_infinite_values():
    from dpfed.core.clipping import clamp

    X = np.array([[-np.inf, 0.5, 9.0], [np.nan, -3.0, np.inf]])
    with pytest.raises(ValueError):
        clamp(X, -1.0, 1.0)
    out = clamp(X, -1.0, 1.0, out=X, allow_infinite=True)
    assert out is X
    assert np.array_equal(X[0], [-1.0, 0.5, 1.0]) and np.isnan(X[1, 0]) and list(X[1, 1:]) == [-1.0, 1.0]
