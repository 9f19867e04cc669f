"""Accounting against dp-accounting and closed forms (runtime budget: < 30 s).

Statistical test: the Monte-Carlo check of k-fold Laplace uses a fixed seed and a 4.5-sigma
two-sided band (false-alarm rate about 7e-6 per comparison, 2e-5 for the three).
"""
from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting import dp_event as E
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from dpfed.core import accounting as A
from dpfed.core import composition

# ----------------------------------------------------------------- anchors / dp-accounting

def test_anchor_figures_and_equality_with_dp_accounting():
    """ANCHORS: q=0.01, T=5000, delta=1e-5, sigma=1.5 -> PLD ~2.17, RDP ~2.37."""
    ev = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.5)), 5000)
    pld = pld_privacy_accountant.PLDAccountant()
    pld.compose(ev)
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(ev)
    ours_pld = A.dp_sgd_epsilon(1.5, 0.01, 5000, 1e-5)
    ours_rdp = A.dp_sgd_epsilon(1.5, 0.01, 5000, 1e-5, accountant="rdp")
    assert ours_pld == pytest.approx(pld.get_epsilon(1e-5), rel=1e-6)
    assert ours_rdp == pytest.approx(rdp.get_epsilon(1e-5), rel=1e-6)
    assert ours_pld == pytest.approx(2.17, abs=0.01)
    assert ours_rdp == pytest.approx(2.37, abs=0.01)
    assert A.dp_sgd_event(1.5, 0.01, 5000) == ev


def test_pld_tighter_than_rdp_and_monotone_in_sigma():
    e = [A.dp_sgd_epsilon(s, 0.02, 300, 1e-5) for s in (0.8, 1.0, 1.5, 3.0)]
    assert all(a > b for a, b in zip(e, e[1:], strict=False))
    assert A.dp_sgd_epsilon(1.0, 0.02, 300, 1e-5, accountant="rdp") > e[1]


def test_delta_inverts_epsilon():
    ev = A.dp_sgd_event(1.2, 0.05, 200)
    eps = A.epsilon(ev, 1e-6)
    assert A.delta(ev, eps) == pytest.approx(1e-6, rel=0.02)
    assert A.delta(ev, eps * 1.1) < 1e-6 < A.delta(ev, eps * 0.9)


# ----------------------------------------------------------------- closed forms

def test_sequential_basic_sums():
    assert A.sequential_basic([(0.5, 1e-6), (0.25, 2e-6), (1.0, 0.0)]) == pytest.approx((1.75, 3e-6))
    assert A.sequential_basic([]) == (0.0, 0.0)
    with pytest.raises(ValueError):
        A.sequential_basic([(-1.0, 0.0)])
    with pytest.raises(ValueError):
        A.sequential_basic([(1.0, 2.0)])


def test_advanced_composition_formula():
    """Dwork-Rothblum-Vadhan: eps' = sqrt(2k ln(1/d')) eps + k eps (e^eps - 1), delta' = k d + d'."""
    eps, k, d, slack = 0.1, 100, 1e-7, 1e-6
    expected_eps = math.sqrt(2 * 100 * math.log(1e6)) * 0.1 + 100 * 0.1 * (math.e ** 0.1 - 1)
    got = A.advanced_composition(eps, d, k, slack)
    assert got[0] == pytest.approx(expected_eps, rel=1e-12)
    assert got[0] == pytest.approx(6.3084, abs=1e-3)  # hand-computed: 5.2565 + 1.0517
    assert got[1] == pytest.approx(k * d + slack, rel=1e-12)
    assert got[0] < k * eps  # beats basic composition here
    # Tight PLD accounting of the same 100 Laplace(eps=0.1) releases beats the bound.
    tight = A.epsilon(dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(10.0), k), slack)
    assert tight < got[0]
    with pytest.raises(ValueError):
        A.advanced_composition(0.1, 0.0, 10, 0.0)


@pytest.mark.parametrize("sigma", [0.7, 1.5, 4.0])
def test_gaussian_epsilon_matches_analytic_balle_wang(sigma):
    """Balle & Wang 2018, Thm 8: delta(eps) = Phi(1/(2s) - eps s) - e^eps Phi(-1/(2s) - eps s)."""
    ev = dpa.GaussianDpEvent(sigma)
    for eps in (0.2, 1.0, 2.0):
        closed = norm.cdf(0.5 / sigma - eps * sigma) - math.exp(eps) * norm.cdf(-0.5 / sigma - eps * sigma)
        got = A.delta(ev, eps)
        assert got >= closed * (1 - 1e-9)  # PLD is pessimistic
        assert got == pytest.approx(closed, rel=2e-3, abs=1e-12)
    analytic = dpa.get_epsilon_gaussian(sigma, 1e-5)
    assert A.epsilon(ev, 1e-5) == pytest.approx(analytic, rel=1e-3)
    assert A.epsilon(ev, 1e-5) >= analytic * (1 - 1e-9)
    assert A.epsilon(ev, 1e-5, accountant="rdp") > analytic


def test_laplace_single_closed_form():
    """Laplace(b), sensitivity 1, eps0 = 1/b: delta(eps) = 1 - exp((eps - eps0)/2), eps <= eps0."""
    b = 2.0
    for eps in (0.0, 0.1, 0.3, 0.49):
        assert A.delta(dpa.LaplaceDpEvent(b), eps) == pytest.approx(1 - math.exp((eps - 1 / b) / 2), rel=1e-6)
    assert A.epsilon(dpa.LaplaceDpEvent(b), 1e-12) <= 1 / b + 1e-9


def test_laplace_composed_k_times_within_k_eps_and_matches_monte_carlo():
    b, k = 2.0, 10
    ev = dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(b), k)
    for d in (1e-3, 1e-5, 1e-8):
        assert A.epsilon(ev, d) <= k / b + 1e-9
    assert A.epsilon(ev, 1e-5) == pytest.approx(4.99, abs=0.01)  # near k*eps0 at tiny delta
    assert A.epsilon(ev, 1e-3) < 0.95 * k / b
    # delta(eps) = E[(1 - exp(eps - L))_+], L the summed privacy loss of Lap(0,b) vs Lap(1,b).
    rng = np.random.default_rng(20260101)
    x = rng.laplace(0.0, b, size=(1_000_000, k))
    loss = ((np.abs(x - 1.0) - np.abs(x)) / b).sum(axis=1)
    for eps in (1.0, 2.0, 3.0):
        v = np.maximum(0.0, 1.0 - np.exp(eps - loss))
        se = v.std() / math.sqrt(v.size)
        assert abs(A.delta(ev, eps) - v.mean()) < 4.5 * se + 1e-5


def test_parallel_composition_is_the_max():
    events = [A.dp_sgd_event(s, 0.05, 100) for s in (1.0, 2.0, 4.0)]
    eps = [A.epsilon(e, 1e-5) for e in events]
    assert A.parallel_epsilon(events, 1e-5) == pytest.approx(max(eps), rel=1e-12)
    assert A.parallel_epsilon(events, 1e-5) < A.epsilon(A.compose(events), 1e-5)
    assert A.parallel_epsilon([], 1e-5) == 0.0
    assert A.parallel_epsilon(events, 1e-5, accountant="rdp") == pytest.approx(
        A.epsilon(events[0], 1e-5, accountant="rdp"), rel=1e-12)


def test_neighbouring_relation_is_explicit():
    sub = dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(1.0))
    assert A.epsilon(sub, 1e-5, neighbouring="replace_one") > 1.03 * A.epsilon(sub, 1e-5)
    # dp-accounting's PLD treats replace-one as sensitivity 2 for the plain Gaussian.
    assert A.epsilon(dpa.GaussianDpEvent(4.0), 1e-5, neighbouring="replace_one") == pytest.approx(
        A.epsilon(dpa.GaussianDpEvent(2.0), 1e-5), rel=1e-6)
    rr = E.RandomizedResponseDpEvent(noise_parameter=0.5, num_buckets=2)
    with pytest.raises(A.AccountingError, match="add_remove"):
        A.epsilon(rr, 1e-5)
    # RR keeping the truth w.p. 3/4 is log(3)-DP; PLD is pessimistic by < 1e-3 relative.
    assert A.epsilon(rr, 1e-5, neighbouring="replace_one") == pytest.approx(math.log(3), rel=1e-3)
    with pytest.raises(A.AccountingError):  # RDP cannot do subsampling under replace-one
        A.epsilon(sub, 1e-5, accountant="rdp", neighbouring="replace_one")
    with pytest.raises(ValueError, match="neighbouring"):
        A.epsilon(sub, 1e-5, neighbouring="swap")
    with pytest.raises(ValueError, match="accountant"):
        A.epsilon(sub, 1e-5, accountant="moments")


def test_non_private_and_noop_events():
    assert A.epsilon(dpa.NonPrivateDpEvent(), 1e-5) == math.inf
    assert A.epsilon(A.compose([dpa.NoOpDpEvent()]), 1e-5) == 0.0
    with pytest.raises(TypeError):
        A.epsilon("not an event", 1e-5)
    with pytest.raises(ValueError):
        A.epsilon(dpa.GaussianDpEvent(1.0), 1.5)


# ----------------------------------------------------------------- compose

def test_compose_groups_identical_events_canonically():
    g, lap = dpa.GaussianDpEvent(3.0), dpa.LaplaceDpEvent(5.0)
    a = A.compose([g, lap, g, dpa.SelfComposedDpEvent(g, 3), dpa.ComposedDpEvent([lap, g])])
    b = A.compose([dpa.SelfComposedDpEvent(lap, 2), dpa.SelfComposedDpEvent(g, 6)])
    assert a == b
    assert A.flatten([a]) == {A.event_to_json(g): 6, A.event_to_json(lap): 2}
    assert A.compose([g]) == g
    assert A.compose([dpa.GaussianDpEvent(3)]) == A.compose([g])  # int and float sigma group together
    ungrouped = dpa.ComposedDpEvent([g, lap, g, g, lap, g, g, g])
    assert A.epsilon(a, 1e-6) == pytest.approx(A.epsilon(ungrouped, 1e-6), rel=1e-3)
    assert A.epsilon(a, 1e-6, accountant="rdp") == pytest.approx(
        A.epsilon(ungrouped, 1e-6, accountant="rdp"), rel=1e-9)
    assert A.epsilon(a, 1e-6) <= A.sequential_basic([(A.epsilon(g, 1e-7), 1e-7)] * 6 + [(0.2, 0)] * 2)[0]


# ----------------------------------------------------------------- calibration

@pytest.mark.parametrize("target,q,steps,accountant", [
    (1.0, 0.02, 1000, "pld"),
    (3.0, 0.05, 200, "pld"),
    (1.0, 0.02, 1000, "rdp"),
    (0.5, 1.0, 10, "pld"),
])
def test_calibration_meets_target_and_is_within_0_1_percent(target, q, steps, accountant):
    sigma = A.calibrate_noise_multiplier(target, 1e-5, q, steps, accountant=accountant)
    assert A.dp_sgd_epsilon(sigma, q, steps, 1e-5, accountant=accountant) <= target
    # Opacus overshoots sigma by 0.6-2 %; ours is within 0.1 % of the smallest valid sigma.
    assert A.dp_sgd_epsilon(sigma * (1 - 1e-3), q, steps, 1e-5, accountant=accountant) > target


@pytest.mark.parametrize("kw", [{"accountant": "rdp"}, {"pld_discretization": 1e-3}], ids=["rdp", "pld"])
def test_calibration_with_extra_event_budgets_both(kw):
    extra = dpa.GaussianDpEvent(8.0)  # e.g. an initialisation release
    base = A.calibrate_noise_multiplier(2.0, 1e-5, 0.05, 100, **kw)
    sigma = A.calibrate_noise_multiplier(2.0, 1e-5, 0.05, 100, extra_event=extra, **kw)
    assert sigma > base
    assert A.epsilon(A.compose([extra, A.dp_sgd_event(sigma, 0.05, 100)]), 1e-5, **kw) <= 2.0
    assert A.epsilon(A.compose([extra, A.dp_sgd_event(sigma * 0.999, 0.05, 100)]), 1e-5, **kw) > 2.0
    with pytest.raises(ValueError, match="extra_event"):
        A.calibrate_noise_multiplier(0.1, 1e-5, 0.05, 100, extra_event=dpa.GaussianDpEvent(1.0), **kw)


def test_calibration_rejects_bad_input():
    for kwargs in ({"target_epsilon": 0.0}, {"delta": 0.0}, {"sampling_rate": 1.5}, {"steps": -1}):
        args = {"target_epsilon": 1.0, "delta": 1e-5, "sampling_rate": 0.01, "steps": 10, **kwargs}
        with pytest.raises(ValueError):
            A.calibrate_noise_multiplier(**args)


# ----------------------------------------------------------------- JSON

ALL_EVENTS = [
    dpa.GaussianDpEvent(1.1),
    dpa.LaplaceDpEvent(0.3),
    E.DiscreteLaplaceDpEvent(noise_parameter=0.2, sensitivity=3),
    E.RandomizedResponseDpEvent(noise_parameter=0.25, num_buckets=4),
    dpa.NoOpDpEvent(),
    dpa.NonPrivateDpEvent(),
    A.dp_sgd_event(0.1 + 0.2, 1 / 3, 7),
    dpa.ComposedDpEvent([dpa.GaussianDpEvent(2.0), dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(1.0), 3)]),
    E.SampledWithoutReplacementDpEvent(1000, 10, dpa.GaussianDpEvent(1.0)),
    E.SingleEpochTreeAggregationDpEvent(noise_multiplier=1.5, step_counts=[3, 4]),
    E.MixtureOfGaussiansDpEvent(standard_deviation=1.0, sensitivities=[0.0, 1.0], sampling_probs=[0.5, 0.5]),
    E.ZCDpEvent(rho=0.125, xi=0.0),
]


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: type(e).__name__)
def test_event_json_round_trip_is_exact(event):
    text = A.event_to_json(event)
    back = A.event_from_json(text)
    assert back == event and type(back) is type(event)
    assert A.event_to_json(back) == text
    assert set(type(event).to_named_tuple(event)._fields) - {"module_name"} <= set(
        __import__("json").loads(text)) | {"class_name"}


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=1e-300, max_value=1e300), st.floats(min_value=1e-12, max_value=1.0),
       st.integers(min_value=1, max_value=10**9))
def test_event_json_round_trip_of_arbitrary_floats(sigma, q, steps):
    ev = A.dp_sgd_event(sigma, q, steps)
    assert A.event_from_json(A.event_to_json(ev)) == ev


def test_event_json_refuses_foreign_classes():
    with pytest.raises(ValueError, match="unknown DpEvent class"):
        A.event_from_json('{"class_name": "system", "module_name": "os"}')
    with pytest.raises(ValueError, match="unknown fields"):
        A.event_from_json('{"class_name": "GaussianDpEvent", "noise_multiplier": 1.0, "x": 2}')
    with pytest.raises(ValueError):
        A.event_from_json("not json")
    with pytest.raises(ValueError):
        A.event_from_json("[1, 2]")
    with pytest.raises(TypeError):
        A.event_to_json({"noise_multiplier": 1.0})


def test_repeated_randomized_response_is_counted_under_pld():
    """dp-accounting 0.6.0's PLDAccountant drops the count of a self-composed RR event; we don't."""
    rr = E.RandomizedResponseDpEvent(noise_parameter=0.5, num_buckets=2)  # log(3)-DP each
    for ev in (dpa.SelfComposedDpEvent(rr, 3), A.compose([rr, rr, rr]),
               dpa.ComposedDpEvent([dpa.SelfComposedDpEvent(rr, 2), rr])):
        assert A.epsilon(ev, 1e-5, neighbouring="replace_one") == pytest.approx(3 * math.log(3), rel=1e-3)


def test_epsilon_delta_event_is_the_claimed_pair():
    """EpsilonDeltaBoundDpEvent (added for sample-and-aggregate): composed as the worst
    (eps, delta)-DP pair (Kairouz-Oh-Viswanath), so at its own delta it costs its epsilon."""
    ev = A.EpsilonDeltaBoundDpEvent(0.7, 4e-7)
    assert A.event_from_json(A.event_to_json(ev)) == ev
    assert A.epsilon(ev, 4e-7) == pytest.approx(0.7, rel=1e-3)
    k2 = A.compose([ev, ev])
    assert A.flatten([k2]) == {A.event_to_json(ev): 2}
    eps2 = A.epsilon(k2, 1e-6)
    assert eps2 <= A.sequential_basic([(0.7, 4e-7)] * 2)[0] + 1e-3
    # RDP takes it by basic composition (issue 29: every ledger accounts for every event)
    assert A.epsilon(ev, 1e-6, accountant="rdp") == pytest.approx(0.7, abs=1e-12)
    # at its own delta exactly it is its own pair; below, nothing holds
    assert A.epsilon(ev, 4e-7, accountant="rdp") == pytest.approx(0.7, abs=1e-12)
    assert math.isinf(A.epsilon(ev, 3e-7, accountant="rdp"))


def test_rdp_ledger_of_pure_releases_is_never_above_their_sum():
    """An RDP ledger holding only pure releases (and bounds) answers no more than basic composition (Dwork &
    Roth 2014, Thm. 3.16), against sums the test writes down; one Gaussian release among them switches the
    basic branch off (the RDP answer then exceeds the pure sum plus nothing: checked by the exact Gaussian
    conversion being above the pure part alone)."""
    lap = E.DiscreteLaplaceDpEvent(0.1, 1)
    assert A.epsilon(lap, 1e-6, accountant="rdp") == pytest.approx(0.1, abs=1e-15)
    five = A.compose([lap, lap, E.SelfComposedDpEvent(lap, 3)])
    assert A.epsilon(five, 1e-6, accountant="rdp") == pytest.approx(0.5, abs=1e-12)
    assert A.delta(five, 0.5, accountant="rdp") == 0.0
    assert A.delta(five, 0.49, accountant="rdp") > 0.0
    bound = A.EpsilonDeltaBoundDpEvent(0.3, 2e-7)
    mixed = A.compose([five, bound])
    assert A.epsilon(mixed, 2e-7, accountant="rdp") == pytest.approx(0.8, abs=1e-12)
    assert A.delta(mixed, 0.8, accountant="rdp") == pytest.approx(2e-7, rel=1e-12)
    # many small pure releases: the RDP curve (advanced composition) wins over the plain sum
    many = E.SelfComposedDpEvent(E.DiscreteLaplaceDpEvent(0.01, 1), 10_000)
    assert A.epsilon(many, 1e-6, accountant="rdp") < 100.0 / 4
    # a Gaussian among them: no basic branch, the RDP conversion alone
    with_gauss = A.compose([five, E.GaussianDpEvent(50.0)])
    assert A.epsilon(with_gauss, 1e-6, accountant="rdp") > 0.5 + 1e-3


def test_within_fast_path_is_exact_equality_only():
    """A single release equal to the plan is within it without flattening; anything else takes the
    matching path (a release one noise step weaker, or of another class, is outside)."""
    plan = E.PoissonSampledDpEvent(0.01, E.GaussianDpEvent(0.675))
    assert A.within([E.PoissonSampledDpEvent(0.01, E.GaussianDpEvent(0.675))], plan) == []
    assert A.within([E.GaussianDpEvent(2)], E.GaussianDpEvent(2.0)) == []  # 2 and 2.0: the same multiplier
    weaker = E.PoissonSampledDpEvent(0.01, E.GaussianDpEvent(0.674))
    assert A.within([weaker], plan) == [weaker]
    other = E.PoissonSampledDpEvent(0.01, E.LaplaceDpEvent(0.675))
    assert A.within([other], plan) == [other]
    assert not composition._same_event(E.GaussianDpEvent(True), E.GaussianDpEvent(1.0))
    assert not composition._same_event(E.GaussianDpEvent(math.nan), E.GaussianDpEvent(math.nan))
