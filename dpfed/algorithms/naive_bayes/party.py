"""The naive Bayes party half: one task, answered with the noisy weighted statistics vector (or,
under secure aggregation, the integer vector of :mod:`.secure`)."""
from __future__ import annotations

from typing import Iterator

import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec, PartyAlgorithm, Released, Task, TaskRejected
from dpfed.algorithms.naive_bayes import secure
from dpfed.algorithms.naive_bayes.plan import TASK_KIND
from dpfed.algorithms.naive_bayes.release import plan_release
from dpfed.algorithms.naive_bayes.statistics import party_records, sufficient_statistics
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.core.rng import SecureRNG

__all__ = ["NaiveBayesParty"]


class NaiveBayesParty(PartyAlgorithm):
    """The party half: one task, the noisy weighted statistics vector."""

    builtin = True

    def job_event(self, spec: JobSpec) -> dp_event.DpEvent:
        try:
            return plan_release(spec).event
        except ValueError as exc:
            raise TaskRejected(f"invalid naive Bayes parameters: {exc}") from None

    def needs_secure_aggregation(self, spec: JobSpec) -> bool:
        """Distributed noise: each answer carries one share of the noise."""
        return spec.params.get("noise", "local") == "distributed"

    def secure_plan(self, spec: JobSpec, task: Task) -> SecurePlan | None:
        return secure.secure_plan(spec, task)

    def secure_rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
                    rng: SecureRNG) -> Iterator[np.ndarray]:
        """The party's integer statistics vector as one row (:func:`.secure.secure_rows`)."""
        return secure.secure_rows(spec, task, X, y)

    def check_task(self, spec: JobSpec, task: Task) -> None:
        if task.job_id != spec.job_id:
            raise TaskRejected(f"task is for job {task.job_id!r}, not {spec.job_id!r}")
        if task.kind != TASK_KIND or task.round != 0:
            raise TaskRejected(f"naive Bayes answers one task ({TASK_KIND!r}, round 0); got {task.kind!r} "
                               f"round {task.round}")
        if task.params or task.arrays:
            raise TaskRejected("the naive Bayes task carries no parameters (its plan is the job spec)")

    def task_event(self, spec: JobSpec, task: Task) -> dp_event.DpEvent:
        return plan_release(spec).event  # the job is this one release

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        from dpfed.core.mechanisms import discrete_laplace, rounded_gaussian

        if sn.is_secure(spec.params):
            raise TaskRejected("a secure-aggregation job answers only through secure aggregation")
        plan = plan_release(spec)
        layout, X, y = party_records(spec, X, y)
        stats = sufficient_statistics(X, y, layout, plan.weights)
        if plan.mechanism == "laplace":
            rel = discrete_laplace(stats, sensitivity=plan.l1, epsilon=spec.epsilon, rng=rng)
        else:
            rel = rounded_gaussian(stats, sensitivity=plan.l2, sigma=plan.noise, rng=rng)
        # the session checks that rel.event lies within the charged plan before anything leaves
        return Released({"stats": np.asarray(rel.value, dtype=np.int64)}, (rel.event,))
