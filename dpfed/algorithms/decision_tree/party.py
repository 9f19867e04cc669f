"""The private decision tree's party halves, chosen once by the registry entry from the job's parameters:
:class:`TreeParty` answers each round with its noisy counts (local noise, every party adds the full noise);
:class:`SecureTreeParty`, under distributed noise with secure aggregation, releases the exact counts plus one
discrete Gaussian share (:mod:`.secure`, a :class:`~dpfed.algorithms.secure_release.SecureRelease`). Both
check every task against the plan first (:func:`.task.structure`)."""
from __future__ import annotations


import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.contract import JobSpec, PartyAlgorithm, Released, Task, TaskRejected
from dpfed.algorithms.decision_tree import secure
from dpfed.algorithms.decision_tree.release import plan_release
from dpfed.algorithms.decision_tree.task import party_vector, round_of, structure
from dpfed.algorithms.secure_release import PlainAnswerRefused, VectorRelease
from dpfed.core.rng import SecureRNG

__all__ = ["TreeParty", "SecureTreeParty"]


class TreeParty(PartyAlgorithm):
    """Local noise: D level rounds and one leaves round, each one rounded-Gaussian count vector."""

    builtin = True

    def job_event(self, spec: JobSpec) -> dp_event.DpEvent:
        try:
            return plan_release(spec).event
        except ValueError as exc:
            raise TaskRejected(f"invalid decision tree parameters: {exc}") from None

    def task_event(self, spec: JobSpec, task: Task) -> dp_event.DpEvent | None:
        r = round_of(spec, task)
        return None if r is None else plan_release(spec).rounds[r].event

    def check_task(self, spec: JobSpec, task: Task) -> None:
        structure(spec, task)

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        from dpfed.core.mechanisms import rounded_gaussian

        counts = party_vector(spec, task, X, y)
        rnd = plan_release(spec).rounds[int(task.round)]
        rel = rounded_gaussian(counts, sensitivity=rnd.l2, sigma=rnd.noise, rng=rng)
        # the session checks that rel.event lies within the round's planned event before anything leaves
        return Released({"counts": np.asarray(rel.value, dtype=np.int64)}, (rel.event,))


class SecureTreeParty(PlainAnswerRefused, TreeParty, VectorRelease):
    """Distributed noise under secure aggregation: the same rounds, each released as the exact integer counts
    plus one noise share through the secure session (never by :meth:`answer`)."""

    builtin = True
    vector_module = secure  # each round's plan and the party's exact integer counts as one row
