"""The private decision tree's automatic depth (``decision_tree/depth.py``) against the rule written out here
with an independent noise multiplier (Balle & Wang 2018's analytic Gaussian, Thm. 8, solved by bisection here
with scipy's normal CDF): an explicit ``depth`` wins (a contract, CLI included), no ``records`` gives the
library default; the plan of an automatic-depth job equals events built here for that depth; a party refuses
a coordinator whose plan has another depth; the estimator takes a public record bound; five parties and the
coordinator under secure aggregation grow the automatic depth. Deterministic: no false alarms.
"""
from __future__ import annotations

import argparse
import math
from typing import Any

import dp_accounting as dpa
import numpy as np
import pytest
from scipy.stats import norm

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.contract import JobSpec, Task
from dpfed.algorithms.decision_tree import DPDecisionTreeClassifier, TreeCoordinator, plan_release
from dpfed.algorithms.decision_tree.options import add_arguments, params_from_args
from dpfed.algorithms.decision_tree.plan import DEFAULT_DEPTH, job_options
from dpfed.algorithms.params import validate
from dpfed.core.ledger import BudgetLedger
from dpfed.data.schema import Feature, Schema
from dpfed.federation.session import PartyContext, TaskError, decide
from dpfed.simulation.inprocess import run_inprocess
from noise_checks import atoms

SCHEMA = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=10.0),
                 Feature("b", "categorical", categories=5), Feature("v", "numeric", lower=-5.0, upper=5.0)),
                n_classes=3)
BINS, F, S, K = 4, 4, 3 + 4 + 5 + 4, 3     # grid: 4 features, 16 cells, 3 classes


def _bw_multiplier(eps: float, delta: float) -> float:
    """The smallest z with delta(eps) of N(0, z^2) at sensitivity 1 <= delta (Balle & Wang 2018, Thm. 8)."""
    def dlt(z: float) -> float:
        return norm.cdf(0.5 / z - eps * z) - math.exp(eps) * norm.cdf(-0.5 / z - eps * z)

    lo, hi = 1e-3, 1e4
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if dlt(mid) > delta else (lo, mid)
    return hi


def _want(n: int, eps: float, delta: float = 1e-6, share: float = 0.2) -> int:
    """The largest D <= 12 with n / (2^(D-1) (S / F) K) >= s sqrt(D / (1 - share)) sqrt(F) (FS10's N / (t C)
    against one entry's noise std, SNR 1), at least 1."""
    s = _bw_multiplier(eps, delta)
    ok = [d for d in range(1, 13) if n / (2 ** (d - 1) * (S / F) * K) >= s * math.sqrt(d / (1 - share) * F)]
    return max([1, *ok])


def _spec(job: str = "dt-auto", schema: Schema = SCHEMA, **kw) -> JobSpec:
    params = validate(get_algorithm("decision-tree"), {"delta": 1e-6, "bins": BINS, **kw}, schema)
    return JobSpec(job, "decision-tree", params, schema)


def test_automatic_depth_follows_the_signal_to_noise_rule() -> None:
    seen = set()
    for n in (300, 3_000, 30_000, 300_000):
        for eps in (0.1, 0.3, 1.0, 3.0):
            want = _want(n, eps)
            assert job_options(_spec(epsilon=eps, records=n)).depth == want, (n, eps)
            seen.add(want)
    assert len(seen) >= 5                                          # the rule, not a constant, decides
    assert job_options(_spec(epsilon=1.0, records=3_000, leaf_share=0.6)).depth == _want(3_000, 1.0, share=0.6)
    assert job_options(_spec(epsilon=10.0, records=10 ** 9)).depth == 12       # the depth parameter's cap


def test_explicit_depth_wins_and_no_records_is_the_default() -> None:
    assert job_options(_spec(epsilon=1.0, records=300_000, depth=2)).depth == 2
    assert job_options(_spec(epsilon=1.0)).depth == DEFAULT_DEPTH
    assert "depth" not in _spec(epsilon=1.0, records=300).params             # nothing filled in: resolved


def test_cli_keeps_explicit_depth_and_omits_the_default() -> None:
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    assert "depth" not in params_from_args(ap.parse_args([]))
    assert params_from_args(ap.parse_args(["--dt-depth", "5"]))["depth"] == 5


def test_plan_of_an_automatic_depth_job_equals_events_built_here() -> None:
    """D = the rule's depth: D level Gaussians with multiplier s / sqrt(0.8 / D) and the leaves' s / sqrt(0.2)."""
    spec = _spec(epsilon=1.0, records=30_000)
    d = _want(30_000, 1.0)
    plan = plan_release(spec)
    assert [r.kind for r in plan.rounds] == ["dt-level"] * d + ["dt-leaves"] and d >= 3
    s = plan.rounds[d].multiplier * math.sqrt(0.2)
    built = dpa.ComposedDpEvent([dpa.GaussianDpEvent(s / math.sqrt(0.8 / d))] * d
                                + [dpa.GaussianDpEvent(s / math.sqrt(0.2))])
    half = get_algorithm("decision-tree").party_for(spec.params)
    got = sorted(a.noise_multiplier for a, n in atoms(half.job_event(spec)) for _ in range(n))
    assert got == pytest.approx(sorted(a.noise_multiplier for a, n in atoms(built) for _ in range(n)), rel=1e-9)
    assert plan.rounds[d].dimension == ((2 << d) - 1) * K and plan.rounds[d - 1].dimension == (1 << (d - 1)) * S * K


def _first_task(spec: JobSpec) -> Task:
    task = TreeCoordinator(spec, ["p"]).next_task()
    assert task is not None
    return task


def test_party_refuses_a_coordinator_with_another_depth() -> None:
    """Through the real party session: the party recomputes the depth from the public parameters, so a
    coordinator that planned one level more (or one less) sends tasks of the wrong shape, and a task of its
    round D (a level there, the leaves here) has the wrong kind: each is refused and nothing is answered."""
    spec = _spec(epsilon=1.0, records=30_000)
    d = job_options(spec).depth
    g = np.random.default_rng(1)
    X = np.column_stack([g.integers(0, 3, 50), g.uniform(0, 10, 50), g.integers(0, 5, 50), g.uniform(-5, 5, 50)])
    party = PartyContext("p", X, g.integers(0, 3, 50), SCHEMA, BudgetLedger(":memory:", epsilon_limit=10.0,
                                                                             delta_limit=0.5))
    session = decide(party, spec).session
    assert session is not None
    for other in (d + 1, d - 1):
        with pytest.raises(TaskError, match="planned depth"):
            session.answer(_first_task(_spec(epsilon=1.0, records=30_000, depth=other)))
    last = Task(spec.job_id, d, "dt-level", arrays={"feature": np.full((1 << d) - 1, -1, np.int64),
                                                     "left": np.zeros(((1 << d) - 1, 5), np.uint8)})
    with pytest.raises(TaskError, match="not a 'dt-level' task"):   # round D is the leaves' round here
        session.answer(last)
    assert set(session.answer(_first_task(spec))) == {"counts"}           # the same plan: answered


@pytest.mark.filterwarnings("ignore:SecureRNG seeded explicitly")
def test_estimator_takes_a_public_record_bound_for_the_automatic_depth() -> None:
    """``records=n``: the automatic depth of a job with the public bound n, never the rows given (40 here)."""
    g = np.random.default_rng(0)
    X = np.column_stack([g.integers(0, 3, 40), g.uniform(0, 10, 40), g.integers(0, 5, 40), g.uniform(-5, 5, 40)])
    y = g.integers(0, 3, 40)
    kw: dict[str, Any] = {"epsilon": 3.0, "bins": BINS, "schema": SCHEMA, "random_state": 0}
    est = DPDecisionTreeClassifier(records=300_000, **kw).fit(X, y)
    assert est.depth_ == _want(300_000, 3.0) != DEFAULT_DEPTH and len(est.model_["feature"]) == 2 ** est.depth_ - 1
    assert est.get_params()["records"] == 300_000
    assert DPDecisionTreeClassifier(**kw).fit(X, y).depth_ == DEFAULT_DEPTH
    assert DPDecisionTreeClassifier(records=300_000, max_depth=3, **kw).fit(X, y).depth_ == 3


def test_secure_parties_and_coordinator_grow_the_automatic_depth() -> None:
    """Five parties under secure aggregation without ``depth``: every party and the coordinator resolve the
    depth of the rule from the public ``records`` bound; the job runs to the end with it."""
    g = np.random.default_rng(2)
    X = np.column_stack([g.integers(0, 3, 1000), g.uniform(0, 10, 1000), g.integers(0, 5, 1000),
                         g.uniform(-5, 5, 1000)])
    y = (X[:, 1] >= 5).astype(np.int64) + (X[:, 0] == 2)
    spec = JobSpec("dt-auto-secure", "decision-tree", {"epsilon": 3.0, "delta": 1e-6, "bins": BINS, "records": 20_000,
                                                       "noise": "distributed", "secure_aggregation": True,
                                                       "min_survivors": 4, "bits": 24}, SCHEMA)
    parts = [(X[i::5], y[i::5]) for i in range(5)]
    res = run_inprocess(spec, parts, seed=3)
    want = _want(20_000, 3.0)
    assert res.summary["depth"] == want and res.rounds == want + 1 and len(res.model["feature"]) == 2 ** want - 1
