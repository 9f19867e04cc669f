"""The statistics coordinator half: one task, the sum of the parties' integer vectors (the survivors' sum
under secure aggregation), post-processed into answers with standard errors and intervals (:mod:`.estimate`)."""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms.contract import Aggregate, CoordinatorAlgorithm, JobSpec, Task
from dpfed.algorithms.one_release import OneRelease
from dpfed.algorithms.statistics.estimate import Answer, estimate_all
from dpfed.algorithms.statistics.plan import CONFIDENCE, TASK_KIND, job_layout
from dpfed.algorithms.statistics.release import plan_release

__all__ = ["StatisticsCoordinator", "results_model"]


def results_model(answers: Sequence[Answer], mechanism: str) -> dict[str, np.ndarray]:
    """The answers as model arrays: ``results`` (JSON text) and per query ``qI_value|se|lower|upper``."""
    model: dict[str, np.ndarray] = {"algorithm": np.array("statistics"), "mechanism": np.array(mechanism),
                                    "results": np.array(json.dumps([a.to_dict() for a in answers]))}
    for i, a in enumerate(answers):
        for key in ("value", "se", "lower", "upper"):
            model[f"q{i}_{key}"] = np.asarray(getattr(a, key), dtype=np.float64)
    return model


class StatisticsCoordinator(CoordinatorAlgorithm):
    """The coordinator half: one task, sum of the parties' integer vectors, post-processing."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec, self.release = spec, OneRelease.of(spec, parties, TASK_KIND, "statistics")
        self.layout = job_layout(spec)
        self.plan = plan_release(spec)
        self.survivors = len(self.release.parties)
        self._answers: list[Answer] | None = None

    def next_task(self) -> Task | None:
        return self.release.next_task()

    def absorb(self, task: Task, combined: Aggregate) -> None:
        got, total = self.release.total(task, combined, "stats", self.layout.length,
                                        absorbed=self._answers is not None)
        self.survivors = shares = got  # one noise draw per answer (local: the full noise; ddgauss: one share)
        var = np.array([self.plan.entry_variance(b, shares) for b in range(self.layout.n_blocks)])
        self._answers = estimate_all(self.layout, self.spec.schema, total, self.plan.weights, var,
                                     self.plan.mechanism, float(self.spec.params.get("confidence", CONFIDENCE)))

    @property
    def progress(self) -> float:
        return 1.0 if self._answers is not None else 0.0

    @property
    def answers(self) -> list[Answer]:
        if self._answers is None:
            raise RuntimeError("the statistics job has not finished")
        return list(self._answers)

    def model(self) -> dict[str, np.ndarray]:
        return results_model(self.answers, self.plan.mechanism)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mechanism": self.plan.mechanism, "statistics": int(self.layout.length)}
        if self._answers is not None:
            out["results"] = [a.to_dict() for a in self._answers]
        return out
