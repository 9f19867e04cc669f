"""The random forest party halves, chosen once by the registry entry from the job's parameters
(:meth:`dpfed.algorithms.contract.Algorithm.party_for`): :class:`ForestParty` answers its one task with the
noisy per-leaf class counts; :class:`SecureForestParty`, under distributed noise with secure aggregation,
releases the exact counts plus one discrete Gaussian share (:mod:`.secure`, a
:class:`~dpfed.algorithms.secure_release.SecureRelease`)."""
from __future__ import annotations


import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms.contract import JobSpec, Released, Task
from dpfed.algorithms.one_release import OneReleaseParty, noisy_vector
from dpfed.algorithms.random_forest import secure
from dpfed.algorithms.random_forest.model import leaf_counts
from dpfed.algorithms.random_forest.plan import TASK_KIND, job_forest
from dpfed.algorithms.random_forest.records import party_records
from dpfed.algorithms.random_forest.release import plan_release
from dpfed.algorithms.secure_release import PlainAnswerRefused, VectorRelease
from dpfed.core.rng import SecureRNG

__all__ = ["ForestParty", "SecureForestParty"]


class ForestParty(OneReleaseParty):
    """The party half: one task, the noisy per-leaf class counts of every tree."""

    builtin = True
    task_kind = TASK_KIND
    learner = "random forest"

    def release_event(self, spec: JobSpec) -> dp_event.DpEvent:
        return plan_release(spec).event

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        plan = plan_release(spec)
        X, y = party_records(spec, X, y)
        counts = leaf_counts(X, y, job_forest(spec))
        return noisy_vector("counts", counts, plan.mechanism == "laplace", l1=plan.l1, epsilon=spec.epsilon,
                            l2=plan.l2, sigma=plan.noise, rng=rng)


class SecureForestParty(PlainAnswerRefused, ForestParty, VectorRelease):
    """Distributed noise under secure aggregation: the same one task, released as the exact integer counts plus
    one noise share through the secure session (never by :meth:`answer`)."""

    builtin = True
    vector_module = secure  # the plan and the party's exact leaf-count vector as one row
