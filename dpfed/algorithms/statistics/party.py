"""The statistics party halves, chosen once by the registry entry from the job's parameters
(:meth:`dpfed.algorithms.contract.Algorithm.party_for`): :class:`StatisticsParty` answers the job's one task
with the noisy integer vector of every query's block; :class:`SecureStatisticsParty`, under distributed noise
with secure aggregation, releases the same vector plus one noise share (:mod:`.secure`)."""
from __future__ import annotations

from typing import Iterator

import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.contract import JobSpec, Released, Task
from dpfed.algorithms.one_release import OneReleaseParty, noisy_vector
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.algorithms.secure_release import PlainAnswerRefused, SecureRelease
from dpfed.algorithms.statistics import secure
from dpfed.algorithms.statistics.encode import party_statistics
from dpfed.algorithms.statistics.plan import TASK_KIND, StatsPlan, job_layout, pure_epsilon
from dpfed.algorithms.statistics.queries import Layout
from dpfed.algorithms.statistics.release import plan_release
from dpfed.core.rng import SecureRNG
from dpfed.core.samplers import sample_discrete_laplace

__all__ = ["StatisticsParty", "SecureStatisticsParty", "block_laplace"]


class StatisticsParty(OneReleaseParty):
    """The party half: one task, the noisy weighted statistics vector of every query."""

    builtin = True
    task_kind = TASK_KIND
    learner = "statistics"

    def release_event(self, spec: JobSpec) -> dp_event.DpEvent:
        return plan_release(spec).event

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        plan, layout = plan_release(spec), job_layout(spec)
        stats = party_statistics(X, y, layout, plan.weights, spec.schema)
        if plan.mechanism != "laplace":  # one sigma for the whole vector (:mod:`.plan`)
            return noisy_vector("stats", stats, False, l1=plan.l1, epsilon=spec.epsilon, l2=plan.l2,
                                sigma=float(plan.noise[0]), rng=rng)
        value, event = block_laplace(stats, plan, layout, rng)  # each block its own scale
        # the session checks that the event lies within the charged plan before anything leaves
        return Released({"stats": value.astype(np.int64).reshape(-1)}, (event,))


def block_laplace(stats: np.ndarray, plan: StatsPlan, layout: Layout, rng: SecureRNG
                  ) -> tuple[np.ndarray, dp_event.DpEvent]:
    """``stats`` plus each block's own exact discrete Laplace of scale ``plan.scales[b]`` (:mod:`.plan`), and the
    event of the whole vector: the randomized-response pair at its exact pure epsilon sum_b h_b W_b / t_b."""
    noise = np.concatenate([sample_discrete_laplace(plan.scales[b], block.size, rng)
                            for b, block in enumerate(layout.blocks)])
    event = dp_event.DiscreteLaplaceDpEvent(pure_epsilon(plan.weights, layout.levels, plan.scales), 1)
    return stats + noise.astype(np.int64), event


class SecureStatisticsParty(PlainAnswerRefused, StatisticsParty, SecureRelease):
    """Distributed noise under secure aggregation: the same one task and plan (:func:`.release.plan_release`
    picks the distributed one), released as the integer vector plus one noise share (never by :meth:`answer`)."""

    builtin = True

    def plan(self, spec: JobSpec, task: Task) -> SecurePlan | None:
        return secure.secure_plan(spec, task)

    def rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
             rng: SecureRNG) -> Iterator[np.ndarray]:
        return secure.secure_rows(spec, task, X, y)
