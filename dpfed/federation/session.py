"""The party session: one party's side of one job, the single place where a party's privacy rules live.

Every runner goes through it: the party daemon (gRPC), the in-process simulation and the Ray
workers. None of them decides, charges, checks or answers by itself.

1. **Decide** (:func:`decide`): parse and validate the public job spec, refuse a schema other than
   the party's own, an unknown algorithm, a job needing labels the party lacks, or one needing
   secure aggregation the party does not run; compute the plan's ``DpEvent`` from the public
   parameters only; charge it durably to the party's ledger under ``JOB:plan`` (the ledger refuses
   it over the limit). Nothing raised while deciding escapes: it becomes a refusal with a reason.
2. **Answer** (:meth:`PartySession.answer`): check the task against the plan (``check_task``),
   answer each round at most once (a repeat of the same task gets the stored answer, never a new
   draw; any other repeat or an older round is refused), compute the answer, check generically
   that the events the answer reports lie within the round's planned event and that every array
   is finite, record what was answered, and return it. A failure while computing an answer
   leaves the party only as the exception's type (its message may hold record values).
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from dp_accounting import DpEvent

from dpfed.algorithms.contract import Algorithm, Answer, JobSpec, PartyAlgorithm, Released, Task, TaskRejected
from dpfed.core import accounting
from dpfed.core.ledger import BudgetExceededError, BudgetLedger
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Schema
from dpfed.federation.plugins import load_algorithm

__all__ = ["PartyContext", "Decision", "PartySession", "TaskError", "decide", "task_digest"]

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
    secure_aggregation: bool = False   # accept jobs whose privacy needs secure aggregation (simulations)
    seed: int | str | None = None      # SIMULATIONS ONLY: reproducible noise per (seed, job, party)

    def rng_for(self, job_id: str) -> SecureRNG:
        if self.seed is None:
            return SecureRNG()
        return SecureRNG.from_seed(f"{self.seed}:{job_id}:{self.name}")


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

    @property
    def event_json(self) -> str:
        return "" if self.event is None else accounting.event_to_json(self.event)


def task_digest(task: Task) -> str:
    """SHA-256 over everything a task says (job, round, kind, parameters, arrays with dtype and shape)."""
    h = hashlib.sha256()
    h.update(json.dumps([task.job_id, int(task.round), task.kind, _jsonable(dict(task.params))],
                        sort_keys=True).encode())
    for name in sorted(task.arrays):
        a = np.ascontiguousarray(task.arrays[name])
        h.update(json.dumps([name, a.dtype.str, list(a.shape)]).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


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
    try:
        algo = load_algorithm(spec.algorithm, party.plugins)
    except Exception as exc:  # noqa: BLE001
        return refuse(f"unknown algorithm: {exc}")
    if algo.needs_labels and party.y is None:
        return refuse(f"{spec.algorithm} needs labels; this party has none")
    try:
        half = algo.party()
        if half.needs_secure_aggregation(spec) and not party.secure_aggregation:
            return refuse("this job is private against the coordinator only under secure aggregation (e.g. "
                          "distributed noise), which dpfed does not implement; the party accepts it only in "
                          "simulations")
        event = half.job_event(spec)
    except (TaskRejected, ValueError, TypeError, KeyError, ArithmeticError) as exc:
        return refuse(f"bad job parameters: {exc}")
    except Exception as exc:  # noqa: BLE001 - the daemon never dies because of a job's parameters
        return refuse(f"bad job parameters: {type(exc).__name__}: {exc}")
    try:  # durable before anything of this job leaves the party
        total = party.ledger.charge(job_id, event, charge_id=f"{job_id}:plan")
    except BudgetExceededError as exc:
        refusal = refuse(str(exc))
        refusal.budget_error = exc
        return refusal
    except Exception as exc:  # noqa: BLE001 - e.g. the charge id was used for another event
        return refuse(f"ledger refused the charge: {exc}")
    log.info("job %s accepted (%s); ledger total epsilon %.6g", job_id, spec.algorithm, total)
    session = PartySession(party, spec, algo, half, event, party.rng_for(job_id))
    return Decision(True, job_id, event=event, epsilon_job=party.ledger.spent(job_id), epsilon_total=total,
                    session=session)


@dataclass
class PartySession:
    """One accepted job at one party: checks and answers its tasks, each round at most once."""

    party: PartyContext
    spec: JobSpec
    algorithm: Algorithm
    half: PartyAlgorithm
    event: DpEvent
    rng: SecureRNG
    answered: dict[int, tuple[str, Answer]] = field(default_factory=dict)  # round -> (task digest, answer)

    @property
    def last_round(self) -> int:
        return max(self.answered, default=-1)

    def answer(self, task: Task) -> Answer:
        """The answer to ``task``, or :class:`TaskError` with a public reason."""
        if task.job_id != self.spec.job_id:
            raise TaskError(f"task rejected: it belongs to job {task.job_id!r}, not {self.spec.job_id!r}")
        digest = task_digest(task)
        if task.round in self.answered:
            seen, stored = self.answered[task.round]
            if seen != digest:
                raise TaskError(f"task rejected: round {task.round} was already answered for a different task")
            return stored  # the same bytes again: no new draw, no new spend
        if task.round < self.last_round:
            raise TaskError(f"task rejected: round {task.round} is older than the last answered round "
                            f"{self.last_round}")
        try:
            self.half.check_task(self.spec, task)
            planned = self.half.task_event(self.spec, task)
        except Exception as exc:  # noqa: BLE001 - public parameters only: the reason may be shown
            raise TaskError(f"task rejected: {exc}") from None
        X, y = self.party.X, self.party.y
        try:
            out = self.half.answer(self.spec, task, X, y, self.rng)
        except TaskRejected as exc:
            raise TaskError(f"task rejected: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the message may hold data: only its type leaves the party
            log.exception("job %s round %d: answer failed", self.spec.job_id, task.round)
            raise TaskError(f"the party failed to compute its answer ({type(exc).__name__}; "
                            "see the party's log)") from None
        arrays = out.arrays if isinstance(out, Released) else out
        if isinstance(out, Released) and planned is not None:
            _check_within(out.events, planned, task)
        _check_finite(arrays)
        self.answered = {task.round: (digest, arrays)}  # only the latest round may legitimately be repeated
        return arrays


def _check_within(events: Sequence[DpEvent], planned: DpEvent, task: Task) -> None:
    """Every event an answer reports must appear in the round's planned event (as a multiset)."""
    got, plan = accounting.flatten(list(events)), accounting.flatten([planned])
    extra = got - plan
    if extra:
        raise TaskError(f"internal error: the answer to round {task.round} would spend outside the charged "
                        f"plan ({sum(extra.values())} unplanned release(s)); nothing was sent")


def _check_finite(arrays: Answer) -> None:
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.dtype.kind not in "biuf":
            raise TaskError(f"internal error: answer array {name!r} has dtype {a.dtype}; nothing was sent")
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            raise TaskError("internal error: the answer holds non-finite values; nothing was sent")
