"""A job is its id *and* its parameters (issue 25, item 4), on every release path of every learner.

For every (learner, noise mode) of the registry (:func:`release_paths.release_paths`, secure paths included,
so a new learner is covered automatically): a party accepts a job and charges it once; the same id offered
again with only epsilon changed is refused and charges nothing: refused by the job's identity, before any
charge is attempted (not merely by the ledger finding another event under the plan's charge id); the same
offer again is a resume (nothing charged again). Shown to fail once with a job digest that leaves epsilon out.
Deterministic.
"""
from __future__ import annotations

import warnings

import pytest

from dpfed.algorithms.contract import JobSpec
from dpfed.federation.session import decide
from dpfed.simulation.inprocess import make_parties
from release_paths import PARTIES, cases, release_paths

warnings.filterwarnings("ignore", message="SecureRNG seeded explicitly")


def _with_epsilon(spec: JobSpec, epsilon: float) -> JobSpec:
    return JobSpec(spec.job_id, spec.algorithm, {**spec.params, "epsilon": epsilon}, spec.schema)


def _identity(spec: JobSpec, data) -> None:
    party = make_parties(spec, list(data), seed=1, party_names=list(PARTIES))[0]
    attempts: list[str] = []
    charge = party.ledger.charge

    def counted(job, event, **kw):
        attempts.append(job)
        return charge(job, event, **kw)

    party.ledger.charge = counted  # type: ignore[method-assign]
    first = decide(party, spec)
    assert first.accept and not first.resumed, first.reason
    spent = party.ledger.spent(spec.job_id)
    assert spent > 0 and len(attempts) == 1
    other = decide(party, _with_epsilon(spec, spec.epsilon * 1.5))
    assert not other.accept and other.session is None
    assert len(attempts) == 1  # refused by the job's identity, before any charge is attempted
    assert party.ledger.charge_ids(spec.job_id) == [f"{spec.job_id}:plan"]
    assert party.ledger.spent(spec.job_id) == spent
    again = decide(party, spec)
    assert again.accept and again.resumed
    assert party.ledger.charge_ids(spec.job_id) == [f"{spec.job_id}:plan"]
    assert party.ledger.spent(spec.job_id) == spent


@pytest.mark.parametrize("name,mode", release_paths())
def test_a_job_id_with_only_epsilon_changed_is_refused(name, mode):
    for case in cases(name, mode, tag="identity"):
        _identity(case.spec, case.data)
