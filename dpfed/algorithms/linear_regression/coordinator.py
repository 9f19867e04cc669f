"""The linear-regression coordinator half: one task, the sum of the parties' integer vectors (the survivors'
sum under secure aggregation), post-processed into the model (:func:`.model.postprocess`)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms.contract import Aggregate, CoordinatorAlgorithm, JobSpec, Task
from dpfed.algorithms.linear_regression.model import postprocess
from dpfed.algorithms.linear_regression.plan import TASK_KIND, Layout, job_method
from dpfed.algorithms.linear_regression.release import plan_release
from dpfed.algorithms.one_release import OneRelease

__all__ = ["LinearRegressionCoordinator"]


class LinearRegressionCoordinator(CoordinatorAlgorithm):
    """The coordinator half: one task, sum of the parties' integer vectors, post-processing."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec, self.release = spec, OneRelease.of(spec, parties, TASK_KIND, "linear-regression")
        self.layout = Layout.from_schema(spec.schema, job_method(spec))
        self.plan = plan_release(spec)
        self.survivors = len(self.release.parties)
        self._model: dict[str, np.ndarray] | None = None

    def next_task(self) -> Task | None:
        return self.release.next_task()

    def absorb(self, task: Task, combined: Aggregate) -> None:
        got, total = self.release.total(task, combined, "stats", self.layout.length, absorbed=self._model is not None)
        self.survivors = got  # one noise release (or share) per contributor
        self._model = postprocess(total, self.layout, self.plan, got,
                                  max(self.spec.delta, 1e-300))

    @property
    def progress(self) -> float:
        return 1.0 if self._model is not None else 0.0

    def model(self) -> dict[str, np.ndarray]:
        if self._model is None:
            raise RuntimeError("the linear-regression job has not finished")
        return dict(self._model)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mechanism": self.plan.method, "statistics": int(self.layout.length),
                               "noise_std_xtx": math.sqrt(self.survivors * self.plan.noise_var)
                               / float(self.plan.weights["xx"])}
        if self._model is not None and "ridge_lambda" in self._model:
            out["ridge_lambda"] = float(self._model["ridge_lambda"])
        return out
