"""The naive Bayes coordinator half: one task, the sum of the parties' integer vectors (the survivors'
sum under secure aggregation), post-processed into the model (:func:`.model.postprocess`)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.naive_bayes.model import postprocess
from dpfed.algorithms.naive_bayes.plan import TASK_KIND, Layout, job_options
from dpfed.algorithms.naive_bayes.release import plan_release
from dpfed.algorithms.one_release import OneReleaseCoordinator

__all__ = ["NaiveBayesCoordinator"]


class NaiveBayesCoordinator(OneReleaseCoordinator):
    """The coordinator half: one task, sum of the parties' integer vectors, post-processing."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        _, self.alpha, self.var_floor = job_options(spec)
        super().__init__(spec, parties, TASK_KIND, "naive Bayes")
        self.layout = Layout.from_schema(spec.schema)
        self.plan = plan_release(spec)

    @property
    def length(self) -> int:
        return int(self.layout.length)

    def model_from(self, total: np.ndarray, contributors: int) -> dict[str, np.ndarray]:
        # noise_var is per share: the sum holds one per contributor
        return postprocess(total, self.layout, self.plan, contributors, self.alpha, self.var_floor)

    def summary(self) -> dict[str, Any]:
        shares = self.survivors if self.release.secure else 1
        return {"mechanism": self.plan.mechanism, "statistics": int(self.layout.length),
                "noise_std_counts": math.sqrt(shares * self.plan.noise_var) / float(self.plan.weights[0])}
