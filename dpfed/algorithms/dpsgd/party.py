"""What every DP-SGD party half does the same way, whatever its gradient: the charge of the whole job (refused
when its noise spends more than the stated epsilon), the refusals of a round before its arrays are looked at
(another job, a repeat, beyond the T charged steps, per-task parameters, the wrong kind), and the per-job caches
of the parameters and of the transformed records."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Mapping, TypeVar

import numpy as np
from dp_accounting import DpEvent

from dpfed.algorithms.contract import JobSpec, Task
from dpfed.algorithms.dpsgd.plan import spent
from dpfed.core import accounting
from dpfed.core.errors import TaskRejected

__all__ = ["charged_event", "check_round", "JobCache", "RecordCache"]

L = TypeVar("L")


def charged_event(spec: JobSpec, event_of: Callable[[], DpEvent], accountant: str, what: str) -> DpEvent:
    """The job's event ``event_of()``, checked before the party charges it: TaskRejected ``invalid {what}`` when the
    plan cannot be made, or when it spends more than the job's epsilon at its delta ("pld": by :func:`.plan.spent`,
    possibly a proven lower bound; "rdp": by the RDP accountant, the secure plans')."""
    try:
        event = event_of()
        if accountant == "rdp":
            eps, low = accounting.epsilon(event, spec.delta, accountant="rdp"), False
        else:
            eps, low = spent(event, spec.epsilon, spec.delta)
    except ValueError as exc:
        raise TaskRejected(f"invalid {what}: {exc}") from None
    if eps > spec.epsilon * (1.0 + 1e-9):
        raise TaskRejected(f"the job's noise gives epsilon {'>= ' if low else ''}{eps:.6g} > its "
                           f"stated epsilon {spec.epsilon:.6g}")
    return event


def check_round(task: Task, last: int, steps: int, learner: str, first_kind: str) -> None:
    """Refuse ``task`` unless it is the next round to answer (after ``last``), within the ``steps`` charged, without
    per-task parameters, and of kind ``first_kind`` in round 0, ``step`` after (``learner`` names it)."""
    if task.round <= last:
        raise TaskRejected(f"round {task.round} was already answered (a repeat would spend budget twice)")
    if task.round > steps:
        raise TaskRejected(f"round {task.round} lies beyond the charged plan of {steps} steps")
    if task.params:
        raise TaskRejected(f"{learner} tasks take no per-task parameters (everything is fixed by the job)")
    expected = first_kind if task.round == 0 else "step"
    if task.kind != expected:
        raise TaskRejected(f"round {task.round} must be a {expected!r} task, got {task.kind!r}")


@dataclass
class JobCache(Generic[L]):
    """Each job's parameters (``defaults`` filled in) and its ``layout``, kept per job id while its spec is the same."""

    defaults: Mapping[str, Any]
    layout: Callable[[JobSpec], L]
    hits: dict[str, tuple[JobSpec, dict[str, Any], L]] = field(default_factory=dict)

    def get(self, spec: JobSpec) -> tuple[dict[str, Any], L]:
        hit = self.hits.get(spec.job_id)
        if hit is None or hit[0] != spec:
            hit = (spec, {**self.defaults, **spec.params}, self.layout(spec))
            self.hits[spec.job_id] = hit
        return hit[1], hit[2]


@dataclass
class RecordCache:
    """A job's records ``transform``-ed (encoded, rescaled) once, kept per job id while the array is the same."""

    transform: Callable[[JobSpec, np.ndarray], np.ndarray]
    hits: dict[str, tuple[int, tuple[int, ...], np.ndarray]] = field(default_factory=dict)

    def get(self, spec: JobSpec, X: np.ndarray) -> np.ndarray:
        hit = self.hits.get(spec.job_id)
        if hit is None or hit[0] != id(X) or hit[1] != X.shape:
            hit = (id(X), X.shape, self.transform(spec, X))
            self.hits[spec.job_id] = hit
        return hit[2]
