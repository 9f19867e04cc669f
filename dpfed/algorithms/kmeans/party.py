"""The party half of k-means: with local noise one task ("fit") answered by the private fit of the party's
records (:mod:`dpfed.algorithms.kmeans.fit`); with distributed noise the secure rounds
(:mod:`dpfed.algorithms.kmeans.secure`), answered through secure aggregation only."""
from __future__ import annotations

from typing import Iterator

import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec, PartyAlgorithm, Released, Task, TaskRejected
from dpfed.algorithms.kmeans.fit import fit_private
from dpfed.algorithms.kmeans.model import numeric_part
from dpfed.algorithms.kmeans.options import spec_plan
from dpfed.algorithms.kmeans.plan import plan_event
from dpfed.algorithms.kmeans.secure import check_task as secure_check_task
from dpfed.algorithms.kmeans.secure import secure_plan, secure_rows
from dpfed.algorithms.kmeans.secure_plan import job_event as secure_job_event
from dpfed.core.rng import SecureRNG

__all__ = ["KMeansParty"]


def _distributed(spec: JobSpec) -> bool:
    return spec.params.get("noise", "local") == "distributed"


class KMeansParty(PartyAlgorithm):
    """Local noise: one task ("fit", round 0), private centers and noisy sizes from this party's records.
    Distributed noise under secure aggregation: the rounds of :mod:`dpfed.algorithms.kmeans.secure`."""

    builtin = True

    def job_event(self, spec: JobSpec) -> dp_event.DpEvent:
        if _distributed(spec):
            return secure_job_event(spec)
        return plan_event(spec_plan(spec)[0])

    def task_event(self, spec: JobSpec, task: Task) -> dp_event.DpEvent | None:
        if _distributed(spec):
            return None  # its rounds are answered by the secure session only (never by answer)
        return plan_event(spec_plan(spec)[0])  # the job is this one round

    def check_task(self, spec: JobSpec, task: Task) -> None:
        if _distributed(spec):
            return secure_check_task(spec, task)
        if task.job_id != spec.job_id or task.kind != "fit" or task.round != 0:
            raise TaskRejected("kmeans answers exactly one task: round 0, kind 'fit'")

    def needs_secure_aggregation(self, spec: JobSpec) -> bool:
        """Distributed noise: each answer carries one share of the noise."""
        return _distributed(spec)

    def secure_plan(self, spec: JobSpec, task: Task) -> sn.SecurePlan | None:
        if not sn.is_secure(spec.params):
            return None
        return secure_plan(spec, task)

    def secure_rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
                    rng: SecureRNG) -> Iterator[np.ndarray]:
        if self.secure_plan(spec, task) is None:
            raise TaskRejected("not a secure kmeans task")
        return secure_rows(spec, task, X, rng)

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        if _distributed(spec):
            raise TaskRejected("a distributed-noise kmeans job answers only through secure aggregation")
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
