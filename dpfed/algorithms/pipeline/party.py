"""The party halves of a PCA pipeline job: PCA's halves answer rounds 0 and 1, the learner's halves every
later round on the projected records (:func:`.spec.project`). The job's plan is ONE event, the composition
of the two steps' job events, charged before anything leaves; every round's ``task_event`` is its step's,
so the party session and the release gate check each release against its own part of that one plan."""
from __future__ import annotations

from typing import Iterator

import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.contract import Algorithm, Answer, JobSpec, PartyAlgorithm, Released, Task, TaskRejected
from dpfed.algorithms.pipeline import spec as ps
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.algorithms.secure_release import SecureRelease, release_of
from dpfed.core.rng import SecureRNG

__all__ = ["PipelineParty", "SecurePipelineParty"]


class PipelineParty(PartyAlgorithm):
    """PCA, then the learner on the projection (module docstring)."""

    builtin = True

    def __init__(self, pca: Algorithm, learner: Algorithm) -> None:
        self.pca, self.learner = pca, learner
        self._halves: dict[str, tuple[PartyAlgorithm, PartyAlgorithm]] = {}

    def halves(self, spec: JobSpec) -> tuple[PartyAlgorithm, PartyAlgorithm]:
        """The two steps' party halves of ``spec``, chosen once (a half may remember its rounds)."""
        key = spec.to_json()
        if key not in self._halves:
            pca, learner = ps.split_params(spec.params)
            self._halves[key] = (self.pca.party_for(pca), self.learner.party_for(learner))
        return self._halves[key]

    def step(self, spec: JobSpec, task: Task) -> tuple[PartyAlgorithm, JobSpec, Task]:
        """The half, its spec and its own task for pipeline round ``task``."""
        pca_half, learner_half = self.halves(spec)
        if task.round < ps.ROUNDS:
            return pca_half, ps.pca_spec(spec), task
        return learner_half, ps.learner_spec(spec, self.learner.name), ps.learner_task(task)

    def job_event(self, spec: JobSpec) -> dp_event.DpEvent:
        pca_half, learner_half = self.halves(spec)
        return dp_event.ComposedDpEvent([pca_half.job_event(ps.pca_spec(spec)),
                                         learner_half.job_event(ps.learner_spec(spec, self.learner.name))])

    def check_task(self, spec: JobSpec, task: Task) -> None:
        if task.job_id != spec.job_id:
            raise TaskRejected(f"task is for job {task.job_id!r}, not {spec.job_id!r}")
        half, sub, own = self.step(spec, task)
        if task.round >= ps.ROUNDS:
            ps.check_arrays(spec, task)
        half.check_task(sub, own)

    def task_event(self, spec: JobSpec, task: Task) -> dp_event.DpEvent | None:
        half, sub, own = self.step(spec, task)
        return half.task_event(sub, own)

    def records(self, spec: JobSpec, task: Task, X: np.ndarray) -> np.ndarray:
        return X if task.round < ps.ROUNDS else ps.project(spec, task, X)

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
               rng: SecureRNG) -> Answer | Released:
        half, sub, own = self.step(spec, task)
        return half.answer(sub, own, self.records(spec, task, X), y, rng)


class SecurePipelineParty(PipelineParty, SecureRelease):
    """Distributed noise under secure aggregation: each round is its step's secure release."""

    builtin = True

    def secure_step(self, spec: JobSpec, task: Task) -> tuple[SecureRelease, JobSpec, Task]:
        half, sub, own = self.step(spec, task)
        release = release_of(half)
        if release is None:
            raise TaskRejected(f"the pipeline's {sub.algorithm} step has no secure release")
        return release, sub, own

    def plan(self, spec: JobSpec, task: Task) -> SecurePlan | None:
        release, sub, own = self.secure_step(spec, task)
        return release.plan(sub, own)

    def rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
             rng: SecureRNG) -> Iterator[np.ndarray]:
        release, sub, own = self.secure_step(spec, task)
        return release.rows(sub, own, self.records(spec, task, X), y, rng)

    def row_sum(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
                rng: SecureRNG) -> np.ndarray | None:
        release, sub, own = self.secure_step(spec, task)
        return release.row_sum(sub, own, self.records(spec, task, X), y, rng)

    def decode(self, spec: JobSpec, task: Task, plan: SecurePlan, total: np.ndarray) -> Answer:
        release, sub, own = self.secure_step(spec, task)
        return release.decode(sub, own, plan, total)
