"""The party session: one party's side of one job, the single place where a party's privacy rules live.

Every runner goes through it: the party daemon (gRPC), the in-process simulation and the Ray
workers. None of them decides, charges, checks or answers by itself.

1. **Decide** (:func:`decide`): parse and validate the public job spec, refuse a schema other than
   the party's own, an unknown algorithm, a job needing labels the party lacks, or one needing
   secure aggregation the party does not run; compute the plan's ``DpEvent`` from the public
   parameters only; charge it durably to the party's ledger under ``JOB:plan`` (the ledger refuses
   it over the limit). A job is its id *and* its parameters (:func:`spec_digest`, bound to the id
   in the charge's transaction): an id seen before with other parameters is refused; with the same
   parameters the offer is a **resume** (a coordinator restarted, a party came back): nothing is
   charged again and the session continues after the last round this party answered. Nothing
   raised while deciding escapes: it becomes a refusal with a reason. The party half is chosen once here
   from the job's params (:meth:`~dpfed.algorithms.contract.Algorithm.party_for`: the learner's secure half
   for distributed noise under secure aggregation, whose rounds :mod:`.secure_session` answers).
2. **Answer** (:meth:`PartySession.answer`): check the task against the plan (``check_task``, through
   :mod:`dpfed.federation.release_gate`, the one gate of the plain and the secure path),
   answer each round at most once, durably: before an answer leaves, (job, round, task digest,
   answer digest, answer bytes) is committed to the ledger's database
   (:meth:`~dpfed.core.ledger.BudgetLedger.record_answer`, as durable as a charge, surviving a
   restart). A repeat of the latest round with the same task gets the identical stored bytes,
   never a new draw; a different task for an answered round and any older round are refused.
   Noise is never re-derived for another task: a resumed seeded session keys its generator by
   the round it resumes at. Compute the answer, check generically that the events the answer
   reports lie within the round's planned event and that every array is finite (defence in
   depth: the algorithms' own releases are finite by construction), record it, and return it. A
   failure while computing an answer leaves the party only as the exception's type (its message
   may hold record values, so it is not logged either).
"""
from __future__ import annotations

import hashlib
import json
import logging
import struct
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
from dp_accounting import DpEvent

from dpfed.algorithms.secure_noise import is_secure
from dpfed.algorithms.contract import Algorithm, Answer, JobSpec, PartyAlgorithm, Task, TaskRejected, jsonable
from dpfed.algorithms.params import validate
from dpfed.algorithms.secure_release import release_of
from dpfed.core import accounting
from dpfed.core.ledger import AnswerConflictError, BudgetExceededError, BudgetLedger, JobConflictError
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Schema
from dpfed.federation import release_gate
from dpfed.federation.plugins import load_algorithm
from dpfed.federation.secure_session import SecAggParty, SecureParty, secure_refusal

__all__ = ["PartyContext", "Decision", "PartySession", "TaskError", "decide", "task_digest", "spec_digest",
           "pack_answer", "unpack_answer", "read_only_task", "answer_hosted"]

log = logging.getLogger("dpfed.party")


class TaskError(TaskRejected):
    """A task the party will not or could not answer; the message is public (no record values)."""


@dataclass
class PartyContext:
    """What a party is, across jobs: its name, its validated records, schema, ledger and options."""

    name: str
    X: np.ndarray
    y: np.ndarray | None
    schema: Schema
    ledger: BudgetLedger
    plugins: Sequence[str] = ()
    secure_aggregation: bool = False   # SIMULATIONS: accept distributed noise without secure aggregation
    seed: int | str | None = None      # SIMULATIONS ONLY: reproducible noise per (seed, job, party)
    secagg: SecAggParty | None = None  # takes part in secure aggregation (secure_session.py)
    coordinator: str = "in-process"    # who offers the jobs (the daemon: "NAME@ADDRESS"), for the ledger's view

    def rng_for(self, job_id: str, resume_round: int = 0) -> SecureRNG:
        """The job's noise generator; a seeded one resumed at round r > 0 gets its own stream (a
        restarted stream would re-use noise already released for other tasks)."""
        if self.seed is None:
            return SecureRNG()
        key = f"{self.seed}:{job_id}:{self.name}" + (f":resume:{resume_round}" if resume_round > 0 else "")
        return SecureRNG.from_seed(key)


@dataclass
class Decision:
    """The party's answer to a job offer. ``session`` is set exactly when the job was accepted."""

    accept: bool
    job_id: str = ""
    reason: str = ""
    event: DpEvent | None = None
    epsilon_job: float = 0.0
    epsilon_total: float = 0.0
    session: "PartySession | None" = None
    budget_error: BudgetExceededError | None = None  # set when the ledger refused the charge
    resumed: bool = False  # the job was charged before (same id and parameters): nothing charged now
    refusal: str = ""  # for a secure-aggregation refusal: its code (secure_session.SecureRefusal.code)

    @property
    def event_json(self) -> str:
        return "" if self.event is None else accounting.event_to_json(self.event)


def task_digest(task: Task) -> str:
    """SHA-256 over everything a task says (job, round, kind, parameters, arrays with dtype and shape)."""
    h = hashlib.sha256()
    h.update(json.dumps([task.job_id, int(task.round), task.kind, jsonable(dict(task.params))],
                        sort_keys=True).encode())
    for name in sorted(task.arrays):
        a = np.ascontiguousarray(task.arrays[name])
        h.update(json.dumps([name, a.dtype.str, list(a.shape)]).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def read_only_task(task: Task) -> Task:
    """``task`` with read-only views of its arrays: what a process hosting several parties hands each of
    them, so that the digest it computed once is the digest of what every one of them reads."""
    views = {}
    for name, a in task.arrays.items():
        v = np.asarray(a).view()
        v.flags.writeable = False
        views[name] = v
    return Task(task.job_id, task.round, task.kind, task.params, views)


def answer_hosted(sessions: Sequence["PartySession"], task: Task) -> Iterator[Answer]:
    """Each of ``sessions`` (parties hosted by one process: the in-process runner, a Ray worker) answers
    ``task`` in turn. The task digest, a function of the task alone, is computed once for all of them
    from a read-only view of the task, not once per party; everything else is each party's own."""
    task = read_only_task(task)
    digest = task_digest(task)
    for s in sessions:
        yield s.answer(task, digest=digest)


def spec_digest(spec: JobSpec) -> str:
    """SHA-256 of a job's canonical JSON (id, algorithm, parameters, schema): what a job *is*."""
    return hashlib.sha256(spec.to_json().encode()).hexdigest()


def pack_answer(arrays: Answer) -> bytes:
    """An answer as bytes (a JSON header of names, dtypes and shapes, then each raw buffer)."""
    items = [(str(k), np.ascontiguousarray(arrays[k])) for k in sorted(arrays)]
    header = json.dumps([[k, a.dtype.str, list(a.shape)] for k, a in items]).encode()
    return b"".join([struct.pack("<Q", len(header)), header, *(a.tobytes() for _, a in items)])


def unpack_answer(data: bytes) -> Answer:
    """The inverse of :func:`pack_answer` (fresh, writable arrays)."""
    (n,) = struct.unpack_from("<Q", data)
    pos, out = 8 + n, {}
    for name, dtype, shape in json.loads(data[8:pos]):
        dt = np.dtype(dtype)
        size = dt.itemsize * int(np.prod(shape, dtype=np.int64))
        out[name] = np.frombuffer(data, dtype=dt, count=size // dt.itemsize if dt.itemsize else 0,
                                  offset=pos).reshape(shape).copy()
        pos += size
    return out


def decide(party: PartyContext, offer: JobSpec | str) -> Decision:
    """Validate an offer, compute its spend from public parameters, charge it, or refuse with a reason."""
    try:
        spec = offer if isinstance(offer, JobSpec) else JobSpec.from_json(offer)
    except Exception as exc:  # noqa: BLE001 - a malformed offer is refused, whatever it is
        return Decision(False, reason=f"malformed job spec: {exc}")
    job_id = spec.job_id

    def refuse(reason: str) -> Decision:
        log.warning("job %s refused: %s", job_id, reason)
        return Decision(False, job_id, reason)

    if spec.schema.to_dict() != party.schema.to_dict():
        return refuse("the job's schema differs from this party's declared schema")
    digest = spec_digest(spec)
    try:
        prior = party.ledger.params_digest(job_id)
    except Exception as exc:  # noqa: BLE001
        return refuse(f"ledger unavailable: {exc}")
    if prior is not None and prior != digest:
        return refuse(f"job id {job_id!r} was already used with other parameters at this party")
    try:
        algo = load_algorithm(spec.algorithm, party.plugins)
    except Exception as exc:  # noqa: BLE001
        return refuse(f"unknown algorithm: {exc}")
    if algo.needs_labels and party.y is None:
        return refuse(f"{spec.algorithm} needs labels; this party has none")
    over = _stated_over_limit(party.ledger, spec) if prior is None else None
    if over is not None:  # no plan is calibrated for a job that asks for more than the whole budget
        refusal = refuse(str(over))
        refusal.budget_error = over
        return refusal
    try:
        validate(algo, spec.params, spec.schema)  # ranges and caps first: a cheap plan for any accepted job
        half = algo.party_for(spec.params)  # the local or the secure half, chosen once
        why = secure_refusal(party.name, party.secagg, party.secure_aggregation,
                             algo.needs_secure_aggregation(spec.params), spec)
        if why is not None:
            refusal = refuse(why.reason)
            refusal.refusal = why.code
            return refusal
        release = release_of(half) if party.secagg is not None and is_secure(spec.params) else None
        if party.secagg is not None and is_secure(spec.params) and release is None:
            return refuse(f"{spec.algorithm} has no secure-aggregation release")
        event = half.job_event(spec)
    except (TaskRejected, ValueError, TypeError, KeyError, ArithmeticError) as exc:
        return refuse(f"bad job parameters: {exc}")
    except Exception as exc:  # noqa: BLE001 - the daemon never dies because of a job's parameters
        return refuse(f"bad job parameters: {type(exc).__name__}: {exc}")
    try:  # durable before anything of this job leaves the party
        total = party.ledger.charge(job_id, event, charge_id=f"{job_id}:plan", params_digest=digest,
                                    origin=(spec.algorithm, party.coordinator))
    except JobConflictError as exc:
        return refuse(str(exc))
    except BudgetExceededError as exc:
        refusal = refuse(str(exc))
        refusal.budget_error = exc
        return refusal
    except Exception as exc:  # noqa: BLE001 - e.g. the charge id was used for another event
        return refuse(f"ledger refused the charge: {exc}")
    try:
        last = party.ledger.last_answer(job_id, with_data=False)
    except Exception as exc:  # noqa: BLE001
        return refuse(f"ledger unavailable: {exc}")
    resume_round = 0 if last is None else last.round + 1
    resumed = prior is not None
    log.info("job %s %s (%s); ledger total epsilon %.6g", job_id,
             f"resumed at round {resume_round}, nothing charged again" if resumed else "accepted",
             spec.algorithm, total)
    session = PartySession(party, spec, algo, half, event, party.rng_for(job_id, resume_round))
    if release is not None and party.secagg is not None:
        session.secure = SecureParty(party.name, spec, half, release, party.secagg, session.rng, session.durable,
                                     None if party.seed is None else party.rng_for(f"{job_id}:dropout"))
    return Decision(True, job_id, event=event, epsilon_job=party.ledger.spent(job_id), epsilon_total=total,
                    session=session, resumed=resumed)


def _stated_over_limit(ledger: BudgetLedger, spec: JobSpec) -> BudgetExceededError | None:
    """The refusal of a new job whose stated epsilon (its plan's target) exceeds the ledger's whole limit, decided
    from public numbers before any calibration (issue 24 item 5: an epsilon-100 offer cost seconds of PLDs)."""
    if not spec.epsilon > ledger.epsilon_limit:
        return None
    return BudgetExceededError((ledger.epsilon_limit, ledger.delta_limit), ledger.spent(), spec.epsilon,
                               spec.job_id, stated=True)


@dataclass
class PartySession:
    """One accepted job at one party: checks and answers its tasks, each round at most once, durably."""

    party: PartyContext
    spec: JobSpec
    algorithm: Algorithm
    half: PartyAlgorithm
    event: DpEvent
    rng: SecureRNG
    secure: SecureParty | None = None  # a secure-aggregation job: every task is a SecAgg step

    @property
    def last_round(self) -> int:
        """The latest round this party answered for the job (-1: none), from the ledger."""
        last = self.party.ledger.last_answer(self.spec.job_id, with_data=False)
        return -1 if last is None else last.round

    def answer(self, task: Task, *, digest: str | None = None) -> Answer:
        """The answer to ``task``, or :class:`TaskError` with a public reason.

        ``digest`` is :func:`task_digest` of this very (read-only) task object, computed by the process
        hosting the party (:func:`answer_hosted`), never a value received with the task.
        """
        job = self.spec.job_id
        if task.job_id != job:
            raise TaskError(f"task rejected: it belongs to job {task.job_id!r}, not {job!r}")
        if not isinstance(task.round, (int, np.integer)) or isinstance(task.round, bool) or task.round < 0:
            raise TaskError("task rejected: the round must be an integer >= 0")
        if digest is None:
            digest = task_digest(task)
        if self.secure is not None:  # answered once per (round, step) there; masked inputs durably here
            try:
                return self.secure.answer(task, digest, self.party.X, self.party.y)
            except TaskRejected as exc:
                raise TaskError(f"task rejected: {exc}") from None
        last = self.party.ledger.last_answer(job, with_data=False)
        if last is not None and task.round <= last.round:
            if task.round < last.round:
                raise TaskError(f"task rejected: round {task.round} is older than the last answered round "
                                f"{last.round}")
            if last.task_digest != digest:
                raise TaskError(f"task rejected: round {task.round} was already answered for a different task")
            return self._stored(self.party.ledger.last_answer(job))  # the same bytes: no new draw, no new spend
        try:
            planned = release_gate.planned_event(self.half, self.spec, task)
        except Exception as exc:  # noqa: BLE001 - public parameters only: the reason may be shown
            raise TaskError(f"task rejected: {exc}") from None
        X, y = self.party.X, self.party.y
        try:
            out = self.half.answer(self.spec, task, X, y, self.rng)
        except TaskRejected as exc:
            raise TaskError(f"task rejected: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the message may hold data: only its type leaves the party
            log.error("job %s round %d: answer failed (%s; message withheld: it may hold record values)",
                      job, task.round, type(exc).__name__)
            raise TaskError(f"the party failed to compute its answer ({type(exc).__name__}; "
                            "see the party's log)") from None
        try:
            arrays = release_gate.plain_release(self.half, task, out, planned)
        except TaskRejected as exc:
            raise TaskError(str(exc)) from None
        _check_finite(arrays)
        return self.durable(int(task.round), digest, arrays)

    def durable(self, round_: int, digest: str, arrays: Answer) -> Answer:
        """Record the answer to round ``round_`` durably before its bytes leave; return what to send
        (the stored answer if this task was answered already)."""
        data = pack_answer(arrays)
        answer_digest = hashlib.sha256(data).hexdigest()
        try:  # durable before the bytes leave; a concurrent identical request gets the stored answer
            stored = self.party.ledger.record_answer(self.spec.job_id, round_, digest, answer_digest, data)
        except AnswerConflictError as exc:
            raise TaskError(f"task rejected: {exc}") from None
        return {k: np.asarray(v) for k, v in arrays.items()} if stored.answer_digest == answer_digest \
            else self._stored(stored)

    @staticmethod
    def _stored(stored: Any) -> Answer:
        if stored is None or hashlib.sha256(stored.data).hexdigest() != stored.answer_digest:
            raise TaskError("internal error: the stored answer does not match its digest; nothing was sent")
        return unpack_answer(stored.data)


def _check_finite(arrays: Answer) -> None:
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.dtype.kind not in "biuf":
            raise TaskError(f"internal error: answer array {name!r} has dtype {a.dtype}; nothing was sent")
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            raise TaskError("internal error: the answer holds non-finite values; nothing was sent")
