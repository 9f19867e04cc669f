"""The release gate: one check of every release against the plan a party charged, for the plain and the
secure path alike, whatever the learner.

A party charges a job's whole plan (``job_event``) before it answers anything (:mod:`.session`). Then, before
any bytes of a round leave it:

* the task must lie within the charged plan (``check_task``), and its part of the plan is ``task_event``;
* plain path (:func:`plain_release`): every event the answer reports (:class:`~dpfed.algorithms.contract.Released`)
  must lie within that part (:func:`dpfed.core.accounting.within`); dpfed's own learners must report them;
* secure path (:func:`secure_plan`): the round's public :class:`~dpfed.algorithms.secure_plan.SecurePlan`
  (what the encoder will use: noise share, sensitivities) has an event (:meth:`SecurePlan.event`) that must lie
  within that part, checked here rather than by each learner; dpfed's own learners must declare it.

Every refusal is :class:`~dpfed.algorithms.contract.TaskRejected` with a public reason (public parameters
only), raised before anything is computed from the records or sent.
"""
from __future__ import annotations

from dp_accounting import DpEvent

from dpfed.algorithms.contract import (
    Answer,
    JobSpec,
    PartyAlgorithm,
    Released,
    Task,
    TaskRejected,
    is_builtin,
    released_arrays,
)
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.algorithms.secure_release import SecureRelease
from dpfed.core import accounting

__all__ = ["planned_event", "plain_release", "secure_plan"]


def planned_event(half: PartyAlgorithm, spec: JobSpec, task: Task) -> DpEvent | None:
    """``task``'s part of the charged plan, once ``check_task`` accepted it (None: not declared)."""
    half.check_task(spec, task)
    return half.task_event(spec, task)


def plain_release(half: PartyAlgorithm, task: Task, out: Answer | Released, planned: DpEvent | None) -> Answer:
    """The arrays of a plain answer once its reported events lie within ``planned``
    (:func:`~dpfed.algorithms.contract.released_arrays`, the same check the in-process driver makes)."""
    return released_arrays(half, task, out, planned)


def secure_plan(half: PartyAlgorithm, release: SecureRelease, spec: JobSpec, task: Task) -> SecurePlan:
    """The plan of the secure round ``task`` (the algorithm's inner task), once the task is checked against the
    charged plan and the plan's event lies within the round's ``task_event``."""
    planned = planned_event(half, spec, task)
    plan = release.plan(spec, task)
    if plan is None:
        raise TaskRejected(f"round {task.round}: {task.kind!r} is not a secure task of this job")
    if planned is None:
        if is_builtin(half):
            raise TaskRejected(f"internal error: {type(half).__name__} declares no planned event for secure round "
                               f"{task.round}; nothing was sent")
        return plan
    try:
        event = plan.event()
    except ValueError as exc:
        raise TaskRejected(f"internal error: secure round {task.round} has no event ({exc}); "
                           "nothing was sent") from None
    if accounting.within([event], planned):
        raise TaskRejected(f"internal error: secure round {task.round} would spend outside the charged plan "
                           "(its noise plan is not within the round's planned event); nothing was sent")
    return plan
