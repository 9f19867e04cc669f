"""The declared parameter tables (dpfed.algorithms.params): every range and cap refuses with one line
naming the parameter, accepted parameters give a plan quickly, and the coordinator/party/CLI share them."""
from __future__ import annotations

import math

import pytest

from dpfed.algorithms.contract import JobSpec, TaskRejected
from dpfed.algorithms.params import DELTA_MAX, EPSILON_MAX, EPSILON_MIN, table_for, validate
from dpfed.algorithms.registry import algorithm_names, get_algorithm
from dpfed.data.schema import Feature, Schema

SCHEMA = Schema(tuple(Feature(f"x{i}", "numeric", lower=0.0, upper=1.0) for i in range(4)), n_classes=3)
WIDE = Schema(tuple(Feature(f"p{i}", "numeric", lower=0.0, upper=255.0) for i in range(5000)), n_classes=10)

# (algorithm, params, parameter the one-line refusal must name)
BAD = [
    ("naive-bayes", {"epsilon": 1e-20}, "epsilon"),
    ("naive-bayes", {"epsilon": 1e-5}, "epsilon"),
    ("naive-bayes", {"epsilon": math.inf}, "epsilon"),
    ("naive-bayes", {"epsilon": math.nan}, "epsilon"),
    ("naive-bayes", {"epsilon": 1e4}, "epsilon"),
    ("naive-bayes", {"epsilon": "1"}, "epsilon"),
    ("naive-bayes", {"epsilon": 1, "delta": 1.0}, "delta"),
    ("naive-bayes", {"epsilon": 1, "delta": -1e-9}, "delta"),
    ("naive-bayes", {"epsilon": 1, "alpha": -1}, "alpha"),
    ("naive-bayes", {"epsilon": 1, "var_floor": 0}, "var_floor"),
    ("naive-bayes", {"epsilon": 1, "mechanism": "magic"}, "mechanism"),
    ("naive-bayes", {"epsilon": 1, "delta": 0.0, "mechanism": "gaussian"}, "mechanism"),
    ("naive-bayes", {"epsilon": 1, "unknown": 3}, "unknown"),
    ("kmeans", {"epsilon": 1e-12}, "epsilon"),
    ("kmeans", {"epsilon": 1, "lloyd_iters": 1e6}, "lloyd_iters"),
    ("kmeans", {"epsilon": 1, "refine_steps": 100000}, "refine_steps"),
    ("kmeans", {"epsilon": 1, "k": 20001}, "k"),
    ("kmeans", {"epsilon": 1e-3, "method": "lloyd", "lloyd_iters": 1000}, "lloyd_iters"),  # per-step share
    ("kmeans", {"epsilon": 1, "k": 2.5}, "k"),
    ("kmeans", {"epsilon": 1, "k": True}, "k"),
    ("kmeans", {"epsilon": 1, "per_cluster": 0}, "per_cluster"),
    ("kmeans", {"epsilon": 1, "max_blocks": 2}, "max_blocks"),
    ("kmeans", {"epsilon": 1, "delta": 0.0}, "delta"),
    ("kmeans", {"epsilon": 1, "k": 1000, "max_blocks": 100000}, "max_blocks"),
    ("glvq", {"epsilon": 1, "sampling_rate": 0}, "sampling_rate"),
    ("glvq", {"epsilon": 1, "epochs": math.inf}, "epochs"),
    ("glvq", {"epsilon": 1, "epochs": 1e9}, "epochs"),
    ("glvq", {"epsilon": 1, "epochs": 10000, "sampling_rate": 1e-5}, "sampling_rate"),
    ("glvq", {"epsilon": 1, "noise_multiplier": 1e-6}, "noise_multiplier"),
    ("glvq", {"epsilon": 1, "prototypes_per_class": 10**9}, "prototypes_per_class"),
    ("glvq", {"epsilon": 1, "lr": -1}, "lr"),
    ("glvq", {"epsilon": 1, "lr_decay": -1}, "lr_decay"),
    ("glvq", {"epsilon": 1, "beta": -1}, "beta"),
    ("glvq", {"epsilon": 1, "adam_betas": [0.9, 1.5]}, "adam_betas"),
    ("gmlvq", {"epsilon": 1, "omega_rank": 10**9}, "omega_rank"),
    ("gmlvq", {"epsilon": 1, "prototypes_per_class": 100}, "GiB"),  # memory estimate: full Omega, d = 5000
]


@pytest.mark.parametrize("algorithm,params,name", BAD, ids=[f"{a}-{n}-{i}" for i, (a, _, n) in enumerate(BAD)])
def test_bad_parameters_are_refused_in_one_line_naming_them(algorithm, params, name):
    schema = WIDE if name == "GiB" else SCHEMA
    with pytest.raises(TaskRejected) as err:
        validate(get_algorithm(algorithm), params, schema)
    msg = str(err.value)
    assert "\n" not in msg and name in msg, msg


def test_defaults_filled_and_types_normalised():
    out = validate(get_algorithm("kmeans"), {"epsilon": 1, "lloyd_iters": 7.0}, SCHEMA)
    assert out["lloyd_iters"] == 7 and isinstance(out["lloyd_iters"], int)
    assert out["epsilon"] == 1.0 and isinstance(out["epsilon"], float)
    assert out["k"] == 5 and out["delta"] == 1e-6
    assert validate(get_algorithm("naive-bayes"), {"epsilon": 1, "delta": 0})["delta"] == 0.0


def test_every_registered_algorithm_declares_a_table_with_epsilon_and_delta():
    for name in algorithm_names():
        table = table_for(get_algorithm(name))
        assert not table.open, name
        eps, delta = table.get("epsilon"), table.get("delta")
        assert eps.lo == EPSILON_MIN and eps.upper == EPSILON_MAX
        assert delta.upper == DELTA_MAX == 1e-3 and not delta.hi_open


def test_a_delta_above_the_cap_is_refused_with_its_reason():
    """Issue 24 item 5: delta 0.999999 cost a party 20 s; above 1e-3 the offer is refused, saying why."""
    validate(get_algorithm("glvq"), {"epsilon": 1.0, "delta": DELTA_MAX})
    with pytest.raises(TaskRejected, match=r"delta.*got 0\.01 \(delta is the chance the guarantee fails outright"):
        validate(get_algorithm("glvq"), {"epsilon": 1.0, "delta": 0.01})


@pytest.mark.parametrize("algorithm,params", [
    ("naive-bayes", {"epsilon": EPSILON_MIN}),
    ("kmeans", {"epsilon": EPSILON_MIN}),
    ("kmeans", {"epsilon": EPSILON_MIN, "method": "lloyd", "lloyd_iters": 5}),
])
def test_plans_at_the_smallest_epsilon_stay_within_it(algorithm, params):
    """Issue 13: at tiny epsilon the naive Bayes plan asked for more than the job's epsilon."""
    from dpfed.core import accounting

    p = validate(get_algorithm(algorithm), params, SCHEMA)
    spec = JobSpec("j", algorithm, p, SCHEMA)
    event = get_algorithm(algorithm).party_for(spec.params).job_event(spec)
    assert accounting.epsilon(event, spec.delta) <= spec.epsilon


def test_party_refuses_out_of_range_offer_with_the_one_line(tmp_path):
    """The party session validates before computing the plan (issue 10 item 8: lloyd_iters 1e6 hung)."""
    import numpy as np

    from dpfed.core.ledger import BudgetLedger
    from dpfed.federation.session import PartyContext, decide

    fields = PartyContext.__dataclass_fields__
    kw = {"name": "p", "X": np.zeros((10, 4)), "y": np.zeros(10, np.int64), "schema": SCHEMA,
          "ledger": BudgetLedger(tmp_path / "l.db", epsilon_limit=10.0, delta_limit=1e-3)}
    ctx = PartyContext(**{k: v for k, v in kw.items() if k in fields})
    spec = JobSpec("j1", "kmeans", {"epsilon": 1.0, "delta": 1e-6, "lloyd_iters": 10**6, "method": "lloyd"}, SCHEMA)
    d = decide(ctx, spec)
    assert not d.accept and "lloyd_iters" in d.reason and "[1, 1000]" in d.reason
