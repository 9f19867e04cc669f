"""The linear-regression coordinator half: one task, the sum of the parties' integer vectors (the survivors'
sum under secure aggregation), post-processed into the model (:func:`.model.postprocess`)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.linear_regression.model import postprocess
from dpfed.algorithms.linear_regression.plan import TASK_KIND, Layout, job_method
from dpfed.algorithms.linear_regression.release import plan_release
from dpfed.algorithms.one_release import OneReleaseCoordinator

__all__ = ["LinearRegressionCoordinator"]


class LinearRegressionCoordinator(OneReleaseCoordinator):
    """The coordinator half: one task, sum of the parties' integer vectors, post-processing."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        super().__init__(spec, parties, TASK_KIND, "linear-regression")
        self.layout = Layout.from_schema(spec.schema, job_method(spec))
        self.plan = plan_release(spec)

    @property
    def length(self) -> int:
        return int(self.layout.length)

    def model_from(self, total: np.ndarray, contributors: int) -> dict[str, np.ndarray]:
        # one noise release (or share) per contributor
        return postprocess(total, self.layout, self.plan, contributors, max(self.spec.delta, 1e-300))

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mechanism": self.plan.method, "statistics": int(self.layout.length),
                               "noise_std_xtx": math.sqrt(self.survivors * self.plan.noise_var)
                               / float(self.plan.weights["xx"])}
        if self._model is not None and "ridge_lambda" in self._model:
            out["ridge_lambda"] = float(self._model["ridge_lambda"])
        return out
