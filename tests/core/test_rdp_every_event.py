"""An RDP ledger takes every release dpfed makes under add/remove (issue 29 item 1: "every ledger accounts for
every event dpfed releases"): discrete Laplace and (epsilon, 0) bounds by D_alpha <= min(eps, alpha eps^2 / 2)
(Bun & Steinke 2016), (epsilon, delta > 0) bounds by basic composition. Checked against the exact Renyi
divergences of the discrete Laplace pair computed here, and against dp-accounting's own RDP accountant for the
rest. Before, the RDP accountant refused all three."""
from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant

from dpfed.core import accounting
from dpfed.core.events import EpsilonDeltaBoundDpEvent
from dpfed.core.ledger import BudgetLedger

ORDERS = np.arange(2, 65)


@pytest.mark.parametrize("a", [0.05, 0.5, 2.0])
def test_pure_bound_is_above_the_exact_renyi_divergence_of_the_discrete_laplace(a):
    x = np.arange(-4000, 4001)
    logp = -a * np.abs(x)
    logp -= np.logaddexp.reduce(logp)
    logq = -a * np.abs(x - 1)
    logq -= np.logaddexp.reduce(logq)
    for alpha in ORDERS:
        exact = np.logaddexp.reduce(alpha * logp + (1 - alpha) * logq) / (alpha - 1)
        assert exact <= min(a, alpha * a * a / 2) + 1e-12


def test_rdp_ledger_charges_discrete_laplace_and_epsilon_delta_bounds():
    lap = dpa.SelfComposedDpEvent(dpa.dp_event.DiscreteLaplaceDpEvent(0.1, 1), 20)
    bound = EpsilonDeltaBoundDpEvent(0.5, 1e-7)
    with BudgetLedger(":memory:", epsilon_limit=10.0, delta_limit=1e-5, accountant="rdp") as rdp, \
            BudgetLedger(":memory:", epsilon_limit=10.0, delta_limit=1e-5) as pld:
        for led in (rdp, pld):
            led.charge("a", lap)
            led.charge("b", bound)
        assert rdp.spent() >= pld.spent() - 1e-9 > 0


def test_epsilon_delta_bound_composes_by_basic_composition():
    ev = dpa.ComposedDpEvent([EpsilonDeltaBoundDpEvent(0.5, 1e-7), dpa.GaussianDpEvent(5.0)])
    ref = rdp_privacy_accountant.RdpAccountant()
    ref.compose(dpa.GaussianDpEvent(5.0))
    assert accounting.epsilon(ev, 1e-5, accountant="rdp") == pytest.approx(ref.get_epsilon(1e-5 - 1e-7) + 0.5,
                                                                        rel=1e-12)
    # a bound alone is its own pair at its own delta (basic composition), and nothing below it
    assert accounting.epsilon(EpsilonDeltaBoundDpEvent(0.5, 1e-5), 1e-5, accountant="rdp") == 0.5
    assert math.isinf(accounting.epsilon(EpsilonDeltaBoundDpEvent(0.5, 1e-5), 9e-6, accountant="rdp"))
