"""An offer inside its declared ranges whose noise is far too small is refused, cheaply (issue 24, item 5).

The offer of the issue: GLVQ with ``noise_multiplier = 0.05`` (the low end of its range) at epsilon 1,
whose real epsilon is ~1300; deciding it used to build a PLD of 3.4 GiB. The refusal reason is asserted,
not the time (bench/bench_offers.py measures that).
"""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.core.ledger import BudgetLedger
from dpfed.data.schema import Schema
from dpfed.federation.session import PartyContext, decide

SCHEMA = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)


def _party() -> PartyContext:
    X = np.random.default_rng(0).uniform(size=(200, 3))
    return PartyContext("p0", X, (X[:, 0] > 0.5).astype(np.int64), SCHEMA,
                        BudgetLedger(":memory:", epsilon_limit=10.0, delta_limit=1e-5))


def test_the_tiny_noise_multiplier_offer_is_refused_for_its_epsilon_and_charges_nothing():
    party = _party()
    d = decide(party, JobSpec("j-005", "glvq", {"epsilon": 1.0, "delta": 1e-5, "noise_multiplier": 0.05}, SCHEMA))
    assert not d.accept
    assert "the job's noise gives epsilon" in d.reason and "> its stated epsilon 1" in d.reason
    assert party.ledger.charge_ids() == []


def test_the_same_noise_with_a_stated_epsilon_above_the_limit_is_refused_by_the_ledger_bound():
    """Stated epsilon 100 (the top of the range) passes the job's own check only if the noise meets it; here
    it does not either, and a limit of 10 is exceeded: whichever check runs first, nothing is charged."""
    party = _party()
    d = decide(party, JobSpec("j-big", "glvq", {"epsilon": 100.0, "delta": 1e-5, "noise_multiplier": 0.05}, SCHEMA))
    assert not d.accept and party.ledger.charge_ids() == []
    assert "epsilon" in d.reason


def test_a_stated_epsilon_above_the_whole_limit_is_refused_before_any_plan():
    """Epsilon 20 against a limit of 10: refused as over budget from the stated target (no calibration needed),
    with the budget error the simulators raise, and nothing charged; epsilon 10 itself is not refused for it."""
    party = _party()
    d = decide(party, JobSpec("j-20", "naive-bayes", {"epsilon": 20.0, "delta": 0.0, "mechanism": "laplace"}, SCHEMA))
    assert not d.accept and d.budget_error is not None and party.ledger.charge_ids() == []
    assert "privacy budget exceeded" in d.reason and "states epsilon 20" in d.reason
    ok = decide(party, JobSpec("j-10", "naive-bayes", {"epsilon": 10.0, "delta": 0.0, "mechanism": "laplace"}, SCHEMA))
    assert ok.accept, ok.reason
