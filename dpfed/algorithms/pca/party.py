"""The PCA party halves, chosen once by the registry entry from the job's parameters:
:class:`PCAParty` answers its one task with its noisy integer vector (local noise); :class:`SecurePCAParty`,
under distributed noise with secure aggregation, releases the exact integer vector plus one noise share
through SecAgg (a :class:`~dpfed.algorithms.secure_release.SecureRelease`)."""
from __future__ import annotations

from typing import Iterator

import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.contract import JobSpec, PartyAlgorithm, Released, Task, TaskRejected
from dpfed.algorithms.pca import secure
from dpfed.algorithms.pca.plan import ARRAYS
from dpfed.algorithms.pca.release import plan_release
from dpfed.algorithms.pca.rounds import check_round, round_geometry
from dpfed.algorithms.pca.statistics import round_vector
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.algorithms.secure_release import PlainAnswerRefused, SecureRelease
from dpfed.core.rng import SecureRNG

__all__ = ["PCAParty", "SecurePCAParty"]


class PCAParty(PartyAlgorithm):
    """The party half: one task, the noisy upper triangle of its augmented second-moment sum."""

    builtin = True

    def job_event(self, spec: JobSpec) -> dp_event.DpEvent:
        try:
            return plan_release(spec).event
        except ValueError as exc:
            raise TaskRejected(f"invalid PCA parameters: {exc}") from None

    def check_task(self, spec: JobSpec, task: Task) -> None:
        check_round(spec, task)

    def task_event(self, spec: JobSpec, task: Task) -> dp_event.DpEvent:
        try:
            return plan_release(spec).rounds[1 if task.round == 1 else 0].event
        except ValueError as exc:
            raise TaskRejected(f"invalid PCA parameters: {exc}") from None

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        from dpfed.core.mechanisms import rounded_gaussian

        rp = plan_release(spec).rounds[task.round]
        stats = round_vector(rp.kind, X, round_geometry(spec, rp, task))
        rel = rounded_gaussian(stats, sensitivity=rp.l2, sigma=rp.sigma, rng=rng)
        # the session checks that rel.event lies within the charged plan before anything leaves
        return Released({ARRAYS[task.round]: np.asarray(rel.value, dtype=np.int64)}, (rel.event,))


class SecurePCAParty(PlainAnswerRefused, PCAParty, SecureRelease):
    """Distributed noise under secure aggregation: the same one task, released as the exact integer vector
    plus one discrete Gaussian share (never by :meth:`answer`)."""

    builtin = True

    def plan(self, spec: JobSpec, task: Task) -> SecurePlan | None:
        return secure.secure_plan(spec, task)

    def rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
             rng: SecureRNG) -> Iterator[np.ndarray]:
        return secure.secure_rows(spec, task, X)
