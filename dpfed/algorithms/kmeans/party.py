"""The party halves of k-means, chosen once by the registry entry from the job's parameters
(:meth:`dpfed.algorithms.contract.Algorithm.party_for`): :class:`KMeansParty` under local noise (one task,
"fit", answered by the private fit of the party's records, :mod:`dpfed.algorithms.kmeans.fit`);
:class:`SecureKMeansParty` under distributed noise with secure aggregation (the rounds of
:mod:`dpfed.algorithms.kmeans.secure`, answered through secure aggregation only: a
:class:`~dpfed.algorithms.secure_release.SecureRelease`)."""
from __future__ import annotations

from typing import Iterator

import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.contract import JobSpec, PartyAlgorithm, Released, Task, TaskRejected
from dpfed.algorithms.kmeans import secure
from dpfed.algorithms.kmeans.fit import fit_private
from dpfed.algorithms.kmeans.model import numeric_part
from dpfed.algorithms.kmeans.options import spec_plan
from dpfed.algorithms.kmeans.plan import plan_event
from dpfed.algorithms.kmeans.secure_plan import job_event as secure_job_event
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.algorithms.secure_release import PlainAnswerRefused, SecureRelease
from dpfed.core.rng import SecureRNG

__all__ = ["KMeansParty", "SecureKMeansParty"]


class KMeansParty(PartyAlgorithm):
    """Local noise: one task ("fit", round 0), private centers and noisy sizes from this party's records."""

    builtin = True

    def job_event(self, spec: JobSpec) -> dp_event.DpEvent:
        return plan_event(spec_plan(spec)[0])

    def task_event(self, spec: JobSpec, task: Task) -> dp_event.DpEvent | None:
        return plan_event(spec_plan(spec)[0])  # the job is this one round

    def check_task(self, spec: JobSpec, task: Task) -> None:
        if task.job_id != spec.job_id or task.kind != "fit" or task.round != 0:
            raise TaskRejected("kmeans answers exactly one task: round 0, kind 'fit'")

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        plan, o = spec_plan(spec)
        Xn, lower, upper = numeric_part(X, spec.schema)
        events: list[dp_event.DpEvent] = []
        try:
            C, sizes = fit_private(Xn, lower, upper, plan, rng, per_cluster=o["per_cluster"],
                                   max_blocks=o["max_blocks"], block_size=o["block_size"],
                                   anchor_seed=o["anchor_seed"], strict=False, events=events)
        except ValueError as exc:
            raise TaskRejected(str(exc)) from None
        # one row per party (stack_combine)
        return Released({"centers": C[None], "sizes": sizes.astype(np.float64)[None]}, tuple(events))


class SecureKMeansParty(PlainAnswerRefused, PartyAlgorithm, SecureRelease):
    """Distributed noise under secure aggregation: the rounds of :mod:`dpfed.algorithms.kmeans.secure`, each
    one integer vector plus one discrete Gaussian share (never answered by :meth:`answer`)."""

    builtin = True

    def job_event(self, spec: JobSpec) -> dp_event.DpEvent:
        return secure_job_event(spec)

    def task_event(self, spec: JobSpec, task: Task) -> dp_event.DpEvent | None:
        """The scheduled round's release (its part of :meth:`job_event`, the composition of every round's)."""
        return secure.round_event(spec, task)

    def check_task(self, spec: JobSpec, task: Task) -> None:
        secure.check_task(spec, task)

    def plan(self, spec: JobSpec, task: Task) -> SecurePlan | None:
        return secure.secure_plan(spec, task)

    def rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
             rng: SecureRNG) -> Iterator[np.ndarray]:
        return secure.secure_rows(spec, task, X, rng)
