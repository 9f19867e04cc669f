"""The random forest coordinator half: one task, the sum of the parties' count vectors (the survivors' sum
under secure aggregation), post-processed into the model (:func:`.model.postprocess`)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import Aggregate, CoordinatorAlgorithm, JobSpec, Task
from dpfed.algorithms.one_release import check_contributors, integer_total
from dpfed.algorithms.random_forest.model import postprocess
from dpfed.algorithms.random_forest.plan import TASK_KIND, job_forest, job_options
from dpfed.algorithms.random_forest.release import plan_release

__all__ = ["ForestCoordinator"]


class ForestCoordinator(CoordinatorAlgorithm):
    """The coordinator half: one task, the summed noisy leaf counts, the averaged leaf distributions."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec, self.parties = spec, list(parties)
        if not self.parties:
            raise ValueError("a random forest job needs at least one party")
        self.options = job_options(spec)
        self.forest = job_forest(spec)
        self.plan = plan_release(spec)
        self.secure = sn.is_secure(spec.params)
        self.min_survivors = sn.secure_params(spec.params).min_survivors if self.secure else len(self.parties)
        self.survivors = len(self.parties)
        self._issued = False
        self._model: dict[str, np.ndarray] | None = None

    def next_task(self) -> Task | None:
        if self._issued:
            return None
        self._issued = True
        return Task(self.spec.job_id, 0, TASK_KIND)

    def absorb(self, task: Task, combined: Aggregate) -> None:
        if task.kind != TASK_KIND or task.round != 0 or self._model is not None:
            raise ValueError("the random forest absorbs exactly one answer set, for its round-0 task")
        survivors = check_contributors(self.parties, combined, secure=self.secure, min_survivors=self.min_survivors,
                                       learner="random forest")
        total = integer_total(combined, "counts", self.forest.length)
        self.survivors = survivors
        self._model = postprocess(total, self.forest, self.options.alpha, self.plan.mechanism)

    @property
    def progress(self) -> float:
        return 1.0 if self._model is not None else 0.0

    def model(self) -> dict[str, np.ndarray]:
        if self._model is None:
            raise RuntimeError("the random forest job has not finished")
        return dict(self._model)

    def summary(self) -> dict[str, Any]:
        shares = self.survivors  # local: every party adds the full noise; secure: one share per contributor
        return {"mechanism": self.plan.mechanism, "trees": self.forest.trees, "depth": self.forest.depth,
                "counts": int(self.forest.length), "noise_std_counts": math.sqrt(shares * self.plan.noise_var)}
