"""The random forest coordinator half: one task, the sum of the parties' count vectors (the survivors' sum
under secure aggregation), post-processed into the model (:func:`.model.postprocess`)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms.contract import Aggregate, CoordinatorAlgorithm, JobSpec, Task
from dpfed.algorithms.one_release import OneRelease
from dpfed.algorithms.random_forest.model import postprocess
from dpfed.algorithms.random_forest.plan import TASK_KIND, job_forest, job_options
from dpfed.algorithms.random_forest.release import plan_release

__all__ = ["ForestCoordinator"]


class ForestCoordinator(CoordinatorAlgorithm):
    """The coordinator half: one task, the summed noisy leaf counts, the averaged leaf distributions."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec, self.release = spec, OneRelease.of(spec, parties, TASK_KIND, "random forest")
        self.options = job_options(spec)
        self.forest = job_forest(spec)
        self.plan = plan_release(spec)
        self.survivors = len(self.release.parties)
        self._model: dict[str, np.ndarray] | None = None

    def next_task(self) -> Task | None:
        return self.release.next_task()

    def absorb(self, task: Task, combined: Aggregate) -> None:
        self.survivors, total = self.release.total(task, combined, "counts", self.forest.length,
                                                   absorbed=self._model is not None)
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
