"""The statistics party halves, chosen once by the registry entry from the job's parameters
(:meth:`dpfed.algorithms.contract.Algorithm.party_for`): :class:`StatisticsParty` answers the job's one task
with the noisy integer vector of every query's block; :class:`SecureStatisticsParty`, under distributed noise
with secure aggregation, releases the same vector plus one noise share (:mod:`.secure`)."""
from __future__ import annotations

from typing import Iterator

import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.contract import JobSpec, Released, Task, TaskRejected
from dpfed.algorithms.one_release import OneReleaseParty
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.algorithms.secure_release import SecureRelease
from dpfed.algorithms.statistics import secure
from dpfed.algorithms.statistics.encode import party_statistics
from dpfed.algorithms.statistics.plan import TASK_KIND, job_layout
from dpfed.algorithms.statistics.release import plan_release
from dpfed.core.rng import SecureRNG

__all__ = ["StatisticsParty", "SecureStatisticsParty"]


class StatisticsParty(OneReleaseParty):
    """The party half: one task, the noisy weighted statistics vector of every query."""

    builtin = True
    task_kind = TASK_KIND
    learner = "statistics"

    def release_event(self, spec: JobSpec) -> dp_event.DpEvent:
        return plan_release(spec).event

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        from dpfed.core.mechanisms import discrete_laplace, rounded_gaussian

        plan = plan_release(spec)
        stats = party_statistics(X, y, job_layout(spec), plan.weights, spec.schema)
        if plan.mechanism == "laplace":
            rel = discrete_laplace(stats, sensitivity=plan.l1, epsilon=spec.epsilon, rng=rng)
        else:
            rel = rounded_gaussian(stats, sensitivity=plan.l2, sigma=plan.noise, rng=rng)
        # the session checks that rel.event lies within the charged plan before anything leaves
        return Released({"stats": np.asarray(rel.value, dtype=np.int64).reshape(-1)}, (rel.event,))


class SecureStatisticsParty(StatisticsParty, SecureRelease):
    """Distributed noise under secure aggregation: the same one task and plan (:func:`.release.plan_release`
    picks the distributed one), released as the integer vector plus one noise share (never by :meth:`answer`)."""

    builtin = True

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        raise TaskRejected("a secure-aggregation job answers only through secure aggregation")

    def plan(self, spec: JobSpec, task: Task) -> SecurePlan | None:
        return secure.secure_plan(spec, task)

    def rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
             rng: SecureRNG) -> Iterator[np.ndarray]:
        return secure.secure_rows(spec, task, X, y)
