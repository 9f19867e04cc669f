"""Cheap bounds that decide an offer (dpfed.core.offer_cost, the PLD size guard of dpfed.core.accountants).

The lower bound is compared with dp-accounting's own (pessimistic, fine-grid) PLD accountant and with the
exact Gaussian curve (Balle & Wang 2018): it must never exceed them. The guard must leave every question
near its grid alone and coarsen only the far-off ones.
"""
from __future__ import annotations

import math

import dp_accounting as dpa
import pytest
from dp_accounting.pld import pld_privacy_accountant

from dpfed.core import accounting as A
from dpfed.core import offer_cost
from dpfed.core.ledger import BudgetExceededError, BudgetLedger

DELTA = 1e-5


def _dp_sgd(z: float, q: float = 0.01, steps: int = 5000) -> dpa.DpEvent:
    return A.dp_sgd_event(z, q, steps)


def _pld_epsilon(event: dpa.DpEvent) -> float:
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(event)
    return float(acc.get_epsilon(DELTA))


@pytest.mark.parametrize("event", [
    dpa.GaussianDpEvent(0.7),
    dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(3.0), 40),
    _dp_sgd(0.9, 0.05, 40),
    dpa.ComposedDpEvent([dpa.LaplaceDpEvent(2.0), _dp_sgd(1.5, 0.1, 12)]),
    dpa.SelfComposedDpEvent(dpa.dp_event.DiscreteLaplaceDpEvent(0.3, 2), 5),
])
def test_the_lower_bound_never_exceeds_the_accountants_epsilon(event):
    low = offer_cost.epsilon_lower_bound(event, DELTA)
    assert 0 < low <= _pld_epsilon(event)


def test_the_lower_bound_is_tight_for_one_gaussian():
    """Against the exact curve: delta(eps) = Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) - eps z) at the bound
    is at least DELTA (so the exact epsilon is >= the bound), and the bound is within 2 % of the PLD's."""
    z = 0.8
    low = offer_cost.epsilon_lower_bound(dpa.GaussianDpEvent(z), DELTA)
    assert A.gaussian_delta(z, low) >= DELTA
    assert low >= 0.98 * _pld_epsilon(dpa.GaussianDpEvent(z))


def test_the_guard_leaves_questions_near_their_grid_alone_and_coarsens_far_ones():
    calibrated = _dp_sgd(A.calibrate_noise_multiplier(1.0, DELTA, 0.01, 5000))
    assert A.guarded_grid(calibrated, DELTA, "add_remove", 1e-4) == 1e-4
    assert A.guarded_grid(_dp_sgd(0.05), DELTA, "add_remove", 1e-4) > 100 * 1e-4
    assert A.epsilon(_dp_sgd(0.05), DELTA) > 1000  # cheap now, and still an upper bound (real ~1300)


def test_exceeds_refuses_the_tiny_noise_offer_and_stays_silent_within_the_limit():
    """The offer of the issue (noise multiplier 0.05, 5000 steps at q = 0.01): its real epsilon is ~1300."""
    low = offer_cost.exceeds(_dp_sgd(0.05), DELTA, 10.0)
    assert low is not None and low > 100
    assert offer_cost.exceeds(_dp_sgd(1.0), DELTA, 10.0) is None  # epsilon ~4: within


def test_a_ledger_refuses_the_tiny_noise_charge_on_the_lower_bound_and_records_nothing():
    with BudgetLedger(":memory:", epsilon_limit=10.0, delta_limit=DELTA) as led:
        with pytest.raises(BudgetExceededError, match="epsilon>=") as err:
            led.charge("j", _dp_sgd(0.05))
        assert err.value.requested > 10.0 and err.value.spent == 0.0
        assert led.would_exceed(_dp_sgd(0.05)) and led.charge_ids() == []
        assert led.charge("k", _dp_sgd(1.0)) == pytest.approx(A.epsilon(_dp_sgd(1.0), DELTA, pld_discretization=2e-4))


def test_no_bound_for_an_event_it_does_not_know():
    """A release the lower bound cannot build (a scalar discrete Gaussian) is left out: 0, not a guess."""
    assert offer_cost.epsilon_lower_bound(A.ScalarDiscreteGaussianDpEvent(0.1, 1), DELTA) == 0.0
    assert math.isfinite(A.loss_scale(_dp_sgd(0.05), DELTA))
