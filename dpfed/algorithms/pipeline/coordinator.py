"""The coordinator half of a PCA pipeline job: PCA's coordinator for rounds 0 and 1, then the learner's on
the projected records, every learner task carrying the PCA model and the projected features' bounds
(:func:`.spec.wrap_task`, :func:`.spec.component_bounds`)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dpfed.algorithms.contract import Aggregate, Algorithm, CoordinatorAlgorithm, JobSpec, Task
from dpfed.algorithms.pipeline import spec as ps

__all__ = ["PipelineCoordinator", "pipeline_combine"]


class PipelineCoordinator(CoordinatorAlgorithm):
    """PCA first, then the learner (module docstring)."""

    def __init__(self, pca: Algorithm, learner: Algorithm, spec: JobSpec, parties: Sequence[str]) -> None:
        # only picklable parts are kept (the coordinator daemon checkpoints it): the learner's name and factory
        self.spec, self.parties = spec, list(parties)
        self.learner_name, self.learner_factory = learner.name, learner.coordinator
        self.pca = pca.coordinator(ps.pca_spec(spec), parties)
        self.learner: CoordinatorAlgorithm | None = None
        self.pca_model: dict[str, np.ndarray] | None = None
        self.bounds: np.ndarray | None = None       # the projected features' bounds, from the released PCA

    def next_task(self) -> Task | None:
        if self.pca_model is None:
            return self.pca.next_task()
        if self.learner is None:
            self.learner = self.learner_factory(ps.learner_spec(self.spec, self.learner_name), self.parties)
        task = self.learner.next_task()
        if self.bounds is None:
            self.bounds = ps.component_bounds(self.pca_model, float(self.spec.params.get("pca_bound", ps.DEFAULT_BOUND)))
        return None if task is None else ps.wrap_task(task, self.pca_model, self.bounds)

    def absorb(self, task: Task, combined: Aggregate) -> None:
        if task.round < ps.ROUNDS:
            self.pca.absorb(task, combined)
            if task.round == ps.ROUNDS - 1:
                self.pca_model = self.pca.model()
            return
        if self.learner is None:
            raise ValueError("a learner round before the PCA finished")
        self.learner.absorb(ps.learner_task(task), combined)

    @property
    def progress(self) -> float:
        return 0.1 * self.pca.progress + (0.9 * self.learner.progress if self.learner is not None else 0.0)

    def model(self) -> dict[str, np.ndarray]:
        if self.learner is None or self.pca_model is None:
            raise RuntimeError("the pipeline job has not finished")
        out = self.learner.model()
        out.update({f"pca_{k}": v for k, v in self.pca_model.items() if k != "algorithm"})
        if self.bounds is not None:
            out["pca_bounds"] = self.bounds.copy()
        out["pipeline"] = np.array(ps.PREFIX + self.learner_name)
        return out

    def summary(self) -> dict[str, Any]:
        out = {f"pca_{k}": v for k, v in self.pca.summary().items()}
        if self.learner is not None:
            out.update(self.learner.summary())
        return out


def pipeline_combine(pca: Algorithm, learner: Algorithm, task: Task, parts: Sequence[Aggregate]) -> Aggregate:
    """Each step's own ``combine`` for its rounds."""
    if task.round < ps.ROUNDS:
        return pca.combine(task, parts)
    return learner.combine(ps.learner_task(task), parts)
