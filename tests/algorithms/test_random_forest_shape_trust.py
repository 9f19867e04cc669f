"""A random forest party never takes its (trees, depth) shape from the coordinator: through real party sessions
(``decide`` and ``PartySession.answer``, the secure one with a real SecAgg client), an automatic-shape job
(``records`` given, ``trees`` and ``depth`` not) whose coordinator planned another shape (T +- 1 trees or
D +- 1 levels) gets nothing of that shape. Its offer of the shape under the job's id is refused before any
charge; a task (plain, or the inner task of a masked-input task) naming its shape or carrying a count vector
of its length is refused and nothing is answered or recorded; its bare task, which names no shape, is answered
in the shape the party resolves itself, written out here (numeric domain, n = 200, k = 2, epsilon 1, delta
1e-6: target depth round(log2(100)) + 3 = 10, 30 trees fit it under the 2^22 cap), and the mismatching
coordinator refuses that answer. Deterministic: no false alarms.
"""
from __future__ import annotations

import numpy as np
import pytest

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.contract import Aggregate, JobSpec, Task
from dpfed.algorithms.params import validate
from dpfed.algorithms.random_forest import ForestCoordinator, job_forest
from dpfed.algorithms.random_forest.plan import TASK_KIND
from dpfed.algorithms.random_forest.secure import secure_release
from dpfed.core.ledger import BudgetLedger
from dpfed.data.schema import Feature, Schema
from dpfed.federation import secagg as sa
from dpfed.federation import secure_wire as sw
from dpfed.federation.secure_session import SecAggParty
from dpfed.federation.session import PartyContext, PartySession, TaskError, decide

SCHEMA = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=1.0)),
                n_classes=2)
HONEST = (30, 10)                                   # module docstring
OTHERS = [(31, 10), (29, 10), (30, 11), (30, 9)]
ROSTER = ["party-0", "party-1", "party-2"]
SECURE = {"noise": "distributed", "secure_aggregation": True, "min_survivors": 3, "roster": ROSTER}


def _spec(job: str, **kw) -> JobSpec:
    params = validate(get_algorithm("random-forest"), {"epsilon": 1.0, "delta": 1e-6, "records": 200, **kw}, SCHEMA)
    return JobSpec(job, "random-forest", params, SCHEMA)


def _length(shape: tuple[int, int]) -> int:
    return shape[0] * (1 << shape[1]) * SCHEMA.n_classes


def _party(ledger: BudgetLedger, secagg: SecAggParty | None = None) -> PartyContext:
    g = np.random.default_rng(0)
    X = np.column_stack([g.integers(0, 3, 60), g.uniform(0, 1, 60)])
    return PartyContext(ROSTER[0], X, g.integers(0, 2, 60), SCHEMA, ledger, secagg=secagg)


def _accepted(party: PartyContext, spec: JobSpec) -> tuple[PartySession, float]:
    d = decide(party, spec)
    assert d.accept and d.session is not None, d.reason
    assert (job_forest(spec).trees, job_forest(spec).depth) == HONEST
    return d.session, party.ledger.spent()


def _refused_before_any_charge(party: PartyContext, spec: JobSpec, spent: float) -> None:
    """The coordinator's shape made explicit under the accepted job's id: refused, nothing charged."""
    d = decide(party, spec)
    assert not d.accept and "already used with other parameters" in d.reason, d.reason
    assert party.ledger.spent() == spent


def test_party_refuses_a_coordinator_with_another_shape() -> None:
    """Local noise: every shape a mismatching coordinator can send is refused; its bare task gets the honest
    shape, which it cannot absorb."""
    spec = _spec("rf-shape")
    party = _party(BudgetLedger(":memory:", epsilon_limit=10.0, delta_limit=1e-5))
    session, spent = _accepted(party, spec)
    bare = Task(spec.job_id, 0, TASK_KIND)
    for trees, depth in OTHERS:
        other = _spec(spec.job_id, trees=trees, depth=depth)
        _refused_before_any_charge(party, other, spent)
        coordinator = ForestCoordinator(other, [ROSTER[0]])
        assert coordinator.next_task() == bare       # the task names no shape: there is nothing to trust
        for task in (Task(spec.job_id, 0, TASK_KIND, {"trees": trees, "depth": depth}),
                     Task(spec.job_id, 0, TASK_KIND, arrays={"counts": np.zeros(_length((trees, depth)), np.int64)})):
            with pytest.raises(TaskError, match="carries no parameters"):
                session.answer(task)
        assert party.ledger.last_answer(spec.job_id) is None and party.ledger.spent() == spent
    out = session.answer(bare)
    assert out["counts"].shape == (_length(HONEST),) and party.ledger.spent() == spent
    assert party.ledger.last_answer(spec.job_id) is not None
    for trees, depth in OTHERS:
        with pytest.raises(ValueError, match=f"length {_length((trees, depth))}"):
            ForestCoordinator(_spec(spec.job_id, trees=trees, depth=depth), [ROSTER[0]]).absorb(
                bare, Aggregate(out, (ROSTER[0],)))


def _masked(spec: JobSpec, inner: Task, adverts: list[sa.Advert]) -> Task:
    arrays = {**{sw.INNER + k: np.asarray(v) for k, v in inner.arrays.items()},
              **sw.adverts_to_arrays(adverts, ROSTER, sw.ADV)}
    return Task(spec.job_id, 0, sw.MASKED, {"kind": inner.kind, "params": dict(inner.params)}, arrays)


def test_secure_party_refuses_a_coordinator_with_another_shape(pki) -> None:
    """Distributed noise under secure aggregation: the masked-input task of a coordinator that planned another
    shape (its inner task naming the shape or carrying a count vector of its length) is refused before the
    party encodes anything; the bare one is answered with a masked vector of the honest length."""
    spec = _spec("rf-shape-secure", **SECURE)
    files = {n: pki.files(n) for n in ROSTER}
    ca = files[ROSTER[0]].ca.read_bytes()
    creds = {n: (f.cert.read_bytes(), f.key.read_bytes()) for n, f in files.items()}
    ledger = BudgetLedger(":memory:", epsilon_limit=10.0, delta_limit=1e-5, accountant="rdp")
    party = _party(ledger, SecAggParty(*creds[ROSTER[0]], ca))
    session, spent = _accepted(party, spec)
    plan = secure_release(spec)[1]
    assert plan.noise.dimension == _length(HONEST)
    cfg = sw.secagg_config(spec, plan.noise.bits)
    others = [sa.SecAggClient(cfg, n, *creds[n], ca).advert() for n in ROSTER[1:]]
    mine = sw.adverts_from_arrays(session.answer(Task(spec.job_id, 0, sw.ADVERTISE, {"kind": TASK_KIND})),
                                  spec.job_id, ROSTER)[0]
    for trees, depth in OTHERS:
        _refused_before_any_charge(party, _spec(spec.job_id, trees=trees, depth=depth, **SECURE), spent)
        for inner in (Task(spec.job_id, 0, TASK_KIND, {"trees": trees, "depth": depth}),
                      Task(spec.job_id, 0, TASK_KIND, arrays={"counts": np.zeros(_length((trees, depth)), np.int64)})):
            with pytest.raises(TaskError, match="carries no parameters"):
                session.answer(_masked(spec, inner, [mine, *others]))
        assert party.ledger.last_answer(spec.job_id) is None and party.ledger.spent() == spent
    out = session.answer(_masked(spec, Task(spec.job_id, 0, TASK_KIND), [mine, *others]))
    assert out["y"].shape == (_length(HONEST),) and party.ledger.spent() == spent
    assert party.ledger.last_answer(spec.job_id) is not None
