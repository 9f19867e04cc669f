"""Empirical privacy audit in the style of Ding, Wang, Wang, Zhang & Kifer (CCS 2018),
"Detecting violations of differential privacy".

For a mechanism M and neighbouring inputs D, D', draw N outputs from each, and for every output
event S in a family (tails {y >= t}, {y <= t}, single outcomes) bound
    ln P[M(D) in S] - ln P[M(D') in S]
from below with exact Clopper-Pearson intervals (lower bound on the first probability, upper bound
on the second), Bonferroni-corrected over all events and both directions. If the largest lower
bound exceeds the claimed epsilon, the claim is refuted at confidence 1 - ALPHA.

* Real mechanisms must pass: a false alarm needs the confidence bound to fail, probability
  <= ALPHA = 1e-3 per mechanism (fixed seeds make each run deterministic).
* The same audit must FLAG each mechanism with its noise scale halved (epsilon doubled while the
  claim stays): the event sets include ones whose true log-ratio is ~2 epsilon.
* (epsilon, delta) mechanisms (the Gaussians) are audited against their whole claimed privacy
  curve: for each epsilon in a grid, a lower confidence bound on P[M(D) in S] - e^eps P[M(D') in S]
  must not exceed the delta(eps) that accounting claims for the mechanism's own event.
Runtime: ~25 s.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpfed.core import accounting
from dpfed.core.mechanisms import (
    discrete_gaussian,
    discrete_laplace,
    exponential,
    gaussian,
    laplace,
    randomized_response,
    rounded_gaussian,
)
from dpfed.core.rng import SecureRNG

ALPHA = 1e-3
N = 200_000


def rng(seed) -> SecureRNG:
    return SecureRNG.from_seed(f"test_empirical_privacy:{seed}")


def cp_lower(k: np.ndarray, n: int, a: float) -> np.ndarray:
    return np.where(k > 0, stats.beta.ppf(a, np.maximum(k, 1), n - k + 1), 0.0)


def cp_upper(k: np.ndarray, n: int, a: float) -> np.ndarray:
    return np.where(k < n, stats.beta.ppf(1 - a, k + 1, np.maximum(n - k, 1)), 1.0)


def events_from_scalars(y0: np.ndarray, y1: np.ndarray, n_thresholds: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Counts of M(D) and M(D') in tail events {y >= t} and {y <= t} at pooled quantiles."""
    pooled = np.concatenate([y0, y1])
    ts = np.unique(np.quantile(pooled, np.linspace(0.002, 0.998, n_thresholds)))
    s0, s1 = np.sort(y0), np.sort(y1)
    ge0 = y0.size - np.searchsorted(s0, ts, side="left")
    ge1 = y1.size - np.searchsorted(s1, ts, side="left")
    le0 = np.searchsorted(s0, ts, side="right")
    le1 = np.searchsorted(s1, ts, side="right")
    return np.concatenate([ge0, le0]), np.concatenate([ge1, le1])


def events_from_categories(y0: np.ndarray, y1: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.bincount(y0, minlength=k), np.bincount(y1, minlength=k)


def privacy_loss_lower_bound(c0: np.ndarray, c1: np.ndarray, n: int) -> float:
    """Max over events and both directions of a (1 - ALPHA) lower confidence bound on the
    log-ratio of event probabilities (Clopper-Pearson, Bonferroni over 2 * #events tests)."""
    a = ALPHA / (2 * 2 * c0.size)  # each test uses two one-sided intervals
    lo0, up0 = cp_lower(c0, n, a), cp_upper(c0, n, a)
    lo1, up1 = cp_lower(c1, n, a), cp_upper(c1, n, a)
    with np.errstate(divide="ignore"):
        r01 = np.log(lo0) - np.log(up1)
        r10 = np.log(lo1) - np.log(up0)
    return float(np.max(np.concatenate([r01, r10])))


EPS = 1.0


def run_laplace(eps_used: float, seed: str):
    r0 = laplace(np.zeros(N), sensitivity=1.0, epsilon=eps_used, rng=rng(seed + "0"), grid_bits=20)
    r1 = laplace(np.ones(N), sensitivity=1.0, epsilon=eps_used, rng=rng(seed + "1"), grid_bits=20)
    return events_from_scalars(r0.value, r1.value)


def run_discrete_laplace(eps_used: float, seed: str):
    r0 = discrete_laplace(np.zeros(N, dtype=np.int64), sensitivity=1, epsilon=eps_used, rng=rng(seed + "0"))
    r1 = discrete_laplace(np.ones(N, dtype=np.int64), sensitivity=1, epsilon=eps_used, rng=rng(seed + "1"))
    lo = -12
    return events_from_categories(np.clip(r0.value, lo, 12) - lo, np.clip(r1.value, lo, 12) - lo, 25)


# Neighbouring score vectors (every score moves by <= 1) on which the exponential mechanism's
# log-ratio for "pick index 0" is close to the full epsilon: 0.98 at k = 50 (see module doc).
K_EXP = 50
SCORES_D = np.r_[1.0, np.zeros(K_EXP - 1)]
SCORES_D1 = np.r_[0.0, np.ones(K_EXP - 1)]


def run_exponential(eps_used: float, seed: str):
    r0 = exponential(SCORES_D, sensitivity=1.0, epsilon=eps_used, rng=rng(seed + "0"), size=N)
    r1 = exponential(SCORES_D1, sensitivity=1.0, epsilon=eps_used, rng=rng(seed + "1"), size=N)
    # events: index 0, and "anything else"
    c0 = np.array([np.sum(r0.value == 0), np.sum(r0.value != 0)])
    c1 = np.array([np.sum(r1.value == 0), np.sum(r1.value != 0)])
    return c0, c1


def run_rr(eps_used: float, seed: str, k: int = 4):
    r0 = randomized_response(np.zeros(N, dtype=np.int64), k=k, epsilon=eps_used, rng=rng(seed + "0"))
    r1 = randomized_response(np.ones(N, dtype=np.int64), k=k, epsilon=eps_used, rng=rng(seed + "1"))
    return events_from_categories(r0.value, r1.value, k)


MECHANISMS = {
    "laplace": run_laplace,
    "discrete_laplace": run_discrete_laplace,
    "exponential": run_exponential,
    "randomized_response": run_rr,
}


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_estimated_privacy_loss_below_claim(name):
    c0, c1 = MECHANISMS[name](EPS, f"{name}-ok")
    bound = privacy_loss_lower_bound(c0, c1, N)
    assert bound <= EPS, f"{name}: privacy loss lower bound {bound:.3f} exceeds epsilon {EPS}"
    # the audit is not vacuous: the loss it certifies comes close to the claim (tight mechanisms)
    assert bound > 0.7 * EPS


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_broken_mechanism_with_halved_noise_is_flagged(name):
    c0, c1 = MECHANISMS[name](2 * EPS, f"{name}-broken")  # noise scale halved, claim still EPS
    bound = privacy_loss_lower_bound(c0, c1, N)
    assert bound > EPS, f"{name}: the audit missed a mechanism spending 2x its claim ({bound:.3f})"


def test_exponential_neighbours_reach_nearly_full_epsilon():
    """The chosen neighbouring scores make the exact log-ratio 0.98 * epsilon (so the audit's
    'close to the claim' check above is meaningful)."""
    h = EPS / 2
    p0 = math.exp(h) / (math.exp(h) + K_EXP - 1)
    p1 = 1 / (1 + (K_EXP - 1) * math.exp(h))
    assert 0.97 * EPS < math.log(p0 / p1) <= EPS


# -- (epsilon, delta): the Gaussians against their claimed privacy curve ---------------------------
SIGMA = 1.5
GAUSS_EPS = (0.25, 0.5, 1.0, 1.5)


def run_gauss(kind: str, sigma: float, seed: str):
    """Outputs on neighbouring inputs 0 and 1 (sensitivity 1), and the mechanism's own event."""
    outs, event = [], None
    for v in (0, 1):
        r = rng(f"{seed}{v}")
        if kind == "gaussian":
            rel = gaussian(np.full(N, float(v)), sensitivity=1.0, sigma=sigma, rng=r, grid_bits=20)
            rel = type(rel)(rel.value, dp_event_for_sigma(rel, sigma), rel.details)
        elif kind == "rounded_gaussian":
            rel = rounded_gaussian(np.full(N, v), sensitivity=1.0, sigma=sigma, rng=r)
        else:
            rel = discrete_gaussian(np.full(N, v), sensitivity=1, sigma=sigma, rng=r)
        outs.append(np.asarray(rel.value, dtype=np.float64))
        event = rel.event
    return outs[0], outs[1], event


def dp_event_for_sigma(rel, sigma: float):
    """gaussian() on a vector of N values charges for an L2 sensitivity over the whole vector;
    each coordinate alone is the scalar mechanism with sensitivity 1 + 2^-20 on the grid."""
    import dp_accounting

    k = rel.details["grid_bits"]
    return dp_accounting.GaussianDpEvent(sigma * 2.0**k / (2.0**k + 1.0))


def approx_dp_violation(c0: np.ndarray, c1: np.ndarray, n: int, event) -> float:
    """Max over events S, both directions and eps in GAUSS_EPS of a (1 - ALPHA) lower confidence
    bound on P0(S) - e^eps P1(S) - delta_claimed(eps) (Bonferroni over all of them)."""
    a = ALPHA / (2 * 2 * c0.size * len(GAUSS_EPS))
    lo0, up0, lo1, up1 = cp_lower(c0, n, a), cp_upper(c0, n, a), cp_lower(c1, n, a), cp_upper(c1, n, a)
    worst = -np.inf
    for eps in GAUSS_EPS:
        d = accounting.delta(event, eps)
        worst = max(worst, float(np.max(lo0 - math.exp(eps) * up1)) - d,
                    float(np.max(lo1 - math.exp(eps) * up0)) - d)
    return worst


@pytest.mark.parametrize("kind", ["gaussian", "rounded_gaussian", "discrete_gaussian"])
def test_gaussians_stay_within_their_claimed_curve(kind):
    y0, y1, event = run_gauss(kind, SIGMA, f"{kind}-ok")
    c0, c1 = events_from_scalars(y0, y1)
    v = approx_dp_violation(c0, c1, N, event)
    assert v <= 0, f"{kind}: P0(S) - e^eps P1(S) exceeds the claimed delta(eps) by {v:.4f}"
    assert v > -0.02  # not vacuous: the tails nearly reach the claimed curve


@pytest.mark.parametrize("kind", ["gaussian", "rounded_gaussian", "discrete_gaussian"])
def test_gaussians_with_halved_noise_are_flagged(kind):
    y0, y1, _ = run_gauss(kind, SIGMA / 2, f"{kind}-broken")
    _, _, claimed = run_gauss(kind, SIGMA, f"{kind}-claim")  # the claim of the intended sigma
    c0, c1 = events_from_scalars(y0, y1)
    assert approx_dp_violation(c0, c1, N, claimed) > 0
