"""One release gate for both paths (issue 24, item 9): the secure session checks every secure task and its
plan's event against the charged plan itself, whatever the learner (:mod:`dpfed.federation.release_gate`).

For every learner of the registry with a secure half, a planted subclass whose secure plan doubles the
clip (the encoder would clip at twice the charged sensitivity: the plan's event is no longer within the
round's ``task_event``) runs a real in-process secure job: every party refuses the masked step before it
computes anything from its records, so no masked input is recorded or sent and the round is aborted with
nothing unmasked. The honest half passes the same gate on the same tasks. Deterministic.
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from dpfed.algorithms.contract import TaskRejected
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.algorithms.secure_release import release_for
from dpfed.federation import release_gate
from dpfed.federation import session as session_module
from dpfed.federation.secure_gather import RoundAborted, SecureGather
from dpfed.simulation.inprocess import make_parties, open_sessions, secure_send
from release_paths import PARTIES, cases, release_paths, secure_rounds

warnings.filterwarnings("ignore", message="SecureRNG seeded explicitly")

SECURE = sorted(n for n, mode in release_paths() if mode == "secure")


def _widened(plan: SecurePlan) -> SecurePlan:
    """The plan with twice the clip (and L1 bound): more than the round's charged event allows."""
    noise = dataclasses.replace(plan.noise, clip=2.0 * plan.noise.clip)
    return dataclasses.replace(plan, noise=noise, l1=None if plan.l1 is None else 2.0 * plan.l1)


def _planted(secure_half: type) -> tuple[type, list[str]]:
    calls: list[str] = []

    class Planted(secure_half):  # type: ignore[misc, valid-type]
        def plan(self, spec, task):
            p = super().plan(spec, task)
            return None if p is None else _widened(p)

        def rows(self, spec, task, X, y, rng):
            calls.append("rows")
            return super().rows(spec, task, X, y, rng)

        def row_sum(self, spec, task, X, y, rng):
            calls.append("row_sum")
            return super().row_sum(spec, task, X, y, rng)

    return Planted, calls


def test_every_secure_learner_is_covered():
    assert {"naive-bayes", "kmeans"} <= set(SECURE)


@pytest.mark.parametrize("name", SECURE)
def test_a_secure_plan_beyond_its_task_event_is_refused_before_anything_leaves(name, monkeypatch):
    case = cases(name, "secure", tag="gate")[0]
    algo = case.algo
    assert isinstance(algo.secure, type), "a learner's secure half is a class (so it can be planted here)"
    planted_half, calls = _planted(algo.secure)
    planted = dataclasses.replace(algo, secure=planted_half)
    monkeypatch.setattr(session_module, "load_algorithm", lambda _name, _plugins=(): planted)
    spec = case.spec
    task = secure_rounds(case, 1)[0]
    honest = algo.party_for(spec.params)
    assert isinstance(release_gate.secure_plan(honest, honest, spec, task), SecurePlan)  # the honest plan passes
    bad = planted.party_for(spec.params)
    with pytest.raises(TaskRejected, match="outside the charged plan"):
        release_gate.secure_plan(bad, bad, spec, task)

    parties = make_parties(spec, list(case.data), seed=5, party_names=list(PARTIES))
    sessions = open_sessions(spec, parties)
    assert all(isinstance(s.half, planted_half) for s in sessions)
    gather = SecureGather(spec, release_for(planted, spec), secure_send(sessions), skip_aborted=False)
    with pytest.raises(RoundAborted):
        gather(task)
    assert gather.masked_parts == [0] and calls == []  # no masked input, nothing computed from records
    for p in parties:
        assert p.ledger.last_answer(spec.job_id) is None  # nothing recorded as sent
        assert p.ledger.spent(spec.job_id) > 0  # the job itself was charged (decided before any round)


@pytest.mark.parametrize("name", SECURE)
def test_a_secure_task_outside_the_charged_plan_is_refused_by_the_gate(name):
    """The gate calls ``check_task`` on the inner task for every learner: a round beyond the schedule is
    refused whatever the learner's own secure code would do."""
    case = cases(name, "secure", tag="gate-task")[0]
    spec, half = case.spec, case.algo.party_for(case.spec.params)
    task = secure_rounds(case, 1)[0]
    beyond = dataclasses.replace(task, round=10_000)
    with pytest.raises(TaskRejected):
        release_gate.secure_plan(half, half, spec, beyond)
    assert np.all(np.isfinite(release_gate.secure_plan(half, half, spec, task).noise.clip))


@pytest.mark.parametrize("name", ["glvq", "gmlvq"])
def test_a_secure_lvq_step_after_the_last_charged_step_is_refused(name):
    """The schedule check itself, not the task-kind check: a well-formed step at round T (the last charged
    one) passes, the same step at round T + 1 is refused before anything is computed (T = epochs / q = 2)."""
    case = cases(name, "secure", tag="gate-steps")[0]
    spec, half = case.spec, case.algo.party_for(case.spec.params)
    step = secure_rounds(case, 2)[1]
    assert step.kind == "step" and (spec.params["epochs"], spec.params["sampling_rate"]) == (1, 0.5)
    release_gate.secure_plan(half, half, spec, dataclasses.replace(step, round=2))
    with pytest.raises(TaskRejected, match="beyond the charged plan of 2 steps"):
        release_gate.secure_plan(half, half, spec, dataclasses.replace(step, round=3))
