"""The party session answers every round at most once, durably, and a job is its id and its parameters.

In-process (the same :func:`decide` / :meth:`PartySession.answer` every runner uses) with a real
SQLite ledger file; "a restart" closes the ledger and opens a new party on the same file, as a
killed daemon does when it comes back. Over real gRPC with a hostile coordinator:
``tests/test_net_malicious_coordinator.py``.
"""
from __future__ import annotations

import numpy as np
import pytest

from dpfed.algorithms import lvq
from dpfed.algorithms.contract import JobSpec, Task
from dpfed.core.ledger import AnswerConflictError, BudgetLedger, JobConflictError
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Schema
from dpfed.federation.session import PartyContext, TaskError, decide, pack_answer, unpack_answer

SCHEMA = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)


def _data(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 3))
    return X, (X[:, 0] > 0.5).astype(np.int64)


def _party(path, seed=None) -> PartyContext:
    X, y = _data()
    return PartyContext("p0", X, y, SCHEMA, BudgetLedger(path, epsilon_limit=10.0, delta_limit=1e-5), seed=seed)


def _spec(job: str = "job-1", **kw) -> JobSpec:
    params = lvq.prepare_params({"epsilon": 1.0, "delta": 1e-5, "epochs": 1, "sampling_rate": 0.25, **kw})
    return JobSpec(job, "glvq", params, SCHEMA)


def _tasks(spec: JobSpec, n: int) -> list[Task]:
    """The coordinator's real tasks (init, then steps from an honest model)."""
    coord = lvq.LVQCoordinator(spec, ["p0"])
    out = [coord.next_task()]
    for r in range(1, n):
        out.append(Task(spec.job_id, r, "step", arrays={"prototypes": coord.W + 0.01 * r}))
    return out


def _same(a: dict, b: dict) -> bool:
    return pack_answer(a) == pack_answer(b)


def test_ledger_is_wal_with_synchronous_full(tmp_path):
    with BudgetLedger(tmp_path / "l.db", epsilon_limit=1.0, delta_limit=1e-6) as led:
        assert led.pragmas() == {"journal_mode": "wal", "synchronous": "full"}


def test_pack_roundtrip_is_exact():
    a = {"b": np.arange(6, dtype=np.int64).reshape(2, 3), "a": np.array([np.pi, -0.0, 1e-300]),
         "e": np.zeros((0, 4))}
    back = unpack_answer(pack_answer(a))
    assert sorted(back) == ["a", "b", "e"] and pack_answer(back) == pack_answer(a)
    assert all(back[k].dtype == a[k].dtype and back[k].shape == a[k].shape for k in a)


def test_a_repeated_round_gets_the_identical_bytes_and_no_new_record(tmp_path):
    party = _party(tmp_path / "l.db")
    spec = _spec()
    d = decide(party, spec)
    assert d.accept and not d.resumed
    t = _tasks(spec, 3)
    first = [d.session.answer(t[0])]
    for _ in range(5):  # finding 1: a repeat is the same draw, not a fresh one
        assert _same(d.session.answer(t[0]), first[0])
    first.append(d.session.answer(t[1]))
    assert _same(d.session.answer(t[1]), first[1])
    with pytest.raises(TaskError, match="older than the last answered round 1"):
        d.session.answer(t[0])
    other = Task(spec.job_id, 1, "step", arrays={"prototypes": t[1].arrays["prototypes"] + 0.5})
    with pytest.raises(TaskError, match="already answered for a different task"):
        d.session.answer(other)
    with pytest.raises(TaskError, match="beyond the charged plan"):
        d.session.answer(Task(spec.job_id, 10**6, "step", arrays=dict(t[1].arrays)))
    assert [r for r, _, _ in party.ledger.answered_rounds(spec.job_id)] == [0, 1]
    assert party.ledger.charge_ids(spec.job_id) == [f"{spec.job_id}:plan"]


def test_restart_resumes_without_a_new_charge_and_replays_the_stored_bytes(tmp_path):
    path = tmp_path / "l.db"
    spec = _spec()
    t = _tasks(spec, 5)
    party = _party(path)
    d = decide(party, spec)
    answers = [d.session.answer(task) for task in t[:3]]
    spent = party.ledger.spent()
    party.ledger.close()  # the daemon dies here

    party = _party(path)   # ... and comes back
    again = decide(party, spec)
    assert again.accept and again.resumed
    assert party.ledger.charge_ids() == [f"{spec.job_id}:plan"] and party.ledger.spent() == spent
    assert _same(again.session.answer(t[2]), answers[2])   # the latest round: the stored bytes
    for old in t[:2]:
        with pytest.raises(TaskError, match="older"):
            again.session.answer(old)
    fresh = again.session.answer(t[3])                      # unanswered rounds are computed
    assert not _same(fresh, answers[2])
    assert [r for r, _, _ in party.ledger.answered_rounds(spec.job_id)] == [0, 1, 2, 3]

    # the same id with other parameters is another job: refused, nothing charged
    changed = _spec(lr=0.5)
    refused = decide(party, changed)
    assert not refused.accept and "already used with other parameters" in refused.reason
    assert party.ledger.charge_ids() == [f"{spec.job_id}:plan"]
    party.ledger.close()


def test_a_seeded_resume_never_reuses_released_noise(tmp_path):
    """A simulation's seeded generator restarted at round 0 would give round 3 the noise of round 0."""
    path = tmp_path / "l.db"
    spec = _spec()
    party = _party(path, seed=7)
    d = decide(party, spec)
    for task in _tasks(spec, 2):
        d.session.answer(task)
    party.ledger.close()
    party = _party(path, seed=7)
    again = decide(party, spec)
    original = SecureRNG.from_seed(f"7:{spec.job_id}:p0").uniform(16)
    assert not np.array_equal(again.session.rng.uniform(16), original)
    party.ledger.close()


def test_the_ledger_binds_a_job_id_to_one_parameters_digest(tmp_path):
    import dp_accounting as dpa

    with BudgetLedger(tmp_path / "l.db", epsilon_limit=5.0, delta_limit=1e-6) as led:
        ev = dpa.LaplaceDpEvent(1.0)
        led.charge("j", ev, charge_id="j:plan", params_digest="aa")
        led.charge("j", ev, charge_id="j:plan", params_digest="aa")  # a resume: idempotent
        with pytest.raises(JobConflictError):
            led.charge("j", ev, charge_id="j:plan", params_digest="bb")
        led.charge("legacy", ev, charge_id="legacy:plan")
        with pytest.raises(JobConflictError, match="without a recorded parameters digest"):
            led.charge("legacy", ev, charge_id="legacy:plan", params_digest="aa")
        assert led.charge_ids() == ["j:plan", "legacy:plan"]
        with pytest.raises(AnswerConflictError, match="no charge"):
            led.record_answer("nobody", 0, "t", "a", b"x")
        assert led.record_answer("j", 0, "t0", "a0", b"x").data == b"x"
        assert led.record_answer("j", 0, "t0", "zz", b"other").data == b"x"  # the stored bytes win
        with pytest.raises(AnswerConflictError, match="different task"):
            led.record_answer("j", 0, "t1", "a1", b"y")
        led.record_answer("j", 2, "t2", "a2", b"z")
        with pytest.raises(AnswerConflictError, match="older"):
            led.record_answer("j", 1, "t1", "a1", b"y")
        assert led.last_answer("j") == (2, "t2", "a2", b"z")
        assert led.answered_rounds("j") == [(0, "t0", "a0"), (2, "t2", "a2")]


def test_hosted_parties_answer_and_record_as_a_party_alone(tmp_path):
    """answer_hosted (a process hosting many parties computes the task digest once): the same bytes and the
    same recorded (round, task digest, answer digest) as the party answering alone; the task it hands out
    is read-only, so the one digest is the digest of what every hosted party reads."""
    from dpfed.federation.session import answer_hosted, read_only_task, task_digest

    spec = _spec()
    alone, hosted = _party(tmp_path / "a.db", seed=3), _party(tmp_path / "b.db", seed=3)
    sa, sb = decide(alone, spec).session, decide(hosted, spec).session
    for t in _tasks(spec, 3):
        [got] = list(answer_hosted([sb], t))
        assert _same(got, sa.answer(t))
    rounds = hosted.ledger.answered_rounds(spec.job_id)
    assert rounds == alone.ledger.answered_rounds(spec.job_id)
    assert [r[1] for r in rounds] == [task_digest(t) for t in _tasks(spec, 3)]
    ro = read_only_task(_tasks(spec, 2)[1])
    with pytest.raises(ValueError):
        ro.arrays["prototypes"][...] = 0.0
    alone.ledger.close()
    hosted.ledger.close()
