"""The naive Bayes coordinator half: one task, the sum of the parties' integer vectors (the survivors'
sum under secure aggregation), post-processed into the model (:func:`.model.postprocess`)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms.contract import Aggregate, CoordinatorAlgorithm, JobSpec, Task
from dpfed.algorithms.naive_bayes.model import postprocess
from dpfed.algorithms.naive_bayes.plan import TASK_KIND, Layout, job_options
from dpfed.algorithms.naive_bayes.release import plan_release
from dpfed.algorithms.one_release import OneRelease

__all__ = ["NaiveBayesCoordinator"]


class NaiveBayesCoordinator(CoordinatorAlgorithm):
    """The coordinator half: one task, sum of the parties' integer vectors, post-processing."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        _, self.alpha, self.var_floor = job_options(spec)
        self.spec, self.release = spec, OneRelease.of(spec, parties, TASK_KIND, "naive Bayes")
        self.layout = Layout.from_schema(spec.schema)
        self.plan = plan_release(spec)
        self.survivors = len(self.release.parties)
        self._model: dict[str, np.ndarray] | None = None

    def next_task(self) -> Task | None:
        return self.release.next_task()

    def absorb(self, task: Task, combined: Aggregate) -> None:
        got, total = self.release.total(task, combined, "stats", self.layout.length, absorbed=self._model is not None)
        self.survivors = got  # noise_var is per share: the sum holds one per contributor
        self._model = postprocess(total, self.layout, self.plan, got, self.alpha,
                                  self.var_floor)

    @property
    def progress(self) -> float:
        return 1.0 if self._model is not None else 0.0

    def model(self) -> dict[str, np.ndarray]:
        if self._model is None:
            raise RuntimeError("the naive Bayes job has not finished")
        return dict(self._model)

    def summary(self) -> dict[str, Any]:
        shares = self.survivors if self.release.secure else 1
        return {"mechanism": self.plan.mechanism, "statistics": int(self.layout.length),
                "noise_std_counts": math.sqrt(shares * self.plan.noise_var) / float(self.plan.weights[0])}
