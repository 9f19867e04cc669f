"""Plans at large epsilon (20, 50, 100): every algorithm finishes through ``run_inprocess`` and no
party spends more than the job's epsilon, with ledgers whose limit is exactly that epsilon and whose
PLD grid is their own default (``accounting.pld_grid(limit)``), as a party daemon's ledger would be.
Their speed is measured in ``python bench/bench_accounting.py --plans``, not here."""
from __future__ import annotations

import numpy as np
import pytest

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.lvq import prepare_params
from dpfed.core import accounting
from dpfed.core.ledger import BudgetLedger, LedgerError
from dpfed.data.schema import Schema
from dpfed.simulation import run_inprocess

SCHEMA = Schema.numeric_box(2, -1.0, 1.0, n_classes=3)
DELTA = 1e-6


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    X = np.clip(rng.normal(0.0, 0.2, (n, 2)) + np.array([[-0.5, 0.0], [0.5, 0.0], [0.0, 0.5]])[y], -1, 1)
    return X, y


def _params(algorithm: str, eps: float) -> dict[str, object]:
    params: dict[str, object] = {"epsilon": eps, "delta": DELTA}
    if algorithm == "kmeans":
        return {**params, "k": 3}
    if algorithm in ("glvq", "gmlvq"):
        return prepare_params({**params, "epochs": 1, "sampling_rate": 0.05})
    return params


def test_the_grid_rule_keeps_small_epsilons_and_nests() -> None:
    assert all(accounting.pld_grid(e) == accounting.PLD_VALUE_DISCRETIZATION for e in (1e-3, 1.0, 2.5, 9.99))
    grids = [accounting.pld_grid(e) for e in (10.0, 20.0, 50.0, 80.0, 100.0, 1e9)]
    assert grids == [2e-4, 4e-4, 8e-4, 1.6e-3, 1.6e-3, 1.6e-3]
    assert all(g / 1e-4 == 2 ** round(np.log2(g / 1e-4)) for g in grids)  # nested: 1e-4 times a power of 2
    assert all(accounting.pld_grid(e) <= accounting.RELATIVE_GRID * e for e in (10.0, 33.0, 77.0, 100.0))


def test_a_ledger_keeps_the_grid_it_was_created_with(tmp_path) -> None:
    path = tmp_path / "ledger.sqlite"
    with BudgetLedger(path, epsilon_limit=1.0, delta_limit=DELTA) as led:  # created at 1e-4
        assert led.pld_discretization == 1e-4
        led.charge("a", accounting.EpsilonDeltaBoundDpEvent(0.5, 0.0))
    with BudgetLedger(path, epsilon_limit=100.0, delta_limit=DELTA) as led:  # the owner raised the limit
        assert led.pld_discretization == 1e-4 and led.spent() == pytest.approx(0.5, rel=1e-3)
    with pytest.raises(LedgerError, match="pld_discretization"):
        BudgetLedger(path, epsilon_limit=100.0, delta_limit=DELTA, pld_discretization=1.6e-3)
    with BudgetLedger(tmp_path / "new.sqlite", epsilon_limit=100.0, delta_limit=DELTA) as led:
        assert led.pld_discretization == 1.6e-3


@pytest.mark.parametrize("eps", [20.0, 50.0, 100.0])
@pytest.mark.parametrize("algorithm", ["naive-bayes", "kmeans", "glvq", "gmlvq"])
def test_large_epsilon_plans_finish_within_their_target(algorithm: str, eps: float) -> None:
    spec = JobSpec(f"big-{algorithm}-{eps:g}", algorithm, _params(algorithm, eps), SCHEMA)
    parts = [_data(600, 1), _data(600, 2)]
    ledgers = [BudgetLedger(":memory:", epsilon_limit=eps, delta_limit=DELTA) for _ in parts]
    assert all(led.pld_discretization == accounting.pld_grid(eps) for led in ledgers)
    res = run_inprocess(spec, parts, seed=0, ledgers=ledgers)
    assert res.rounds >= 1 and res.model
    assert all(0.99 * eps <= e <= eps for e in res.party_epsilon.values()), res.party_epsilon
    assert res.epsilon_spent <= eps
