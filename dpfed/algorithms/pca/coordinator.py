"""The PCA coordinator half: two tasks (the noisy mean, then the second moment around it), each the sum of the
parties' integer vectors (the survivors' sum under secure aggregation), post-processed into the model
(:func:`.model.noisy_center`, :func:`.model.postprocess`)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import Aggregate, CoordinatorAlgorithm, JobSpec, Task
from dpfed.algorithms.one_release import check_contributors, integer_total
from dpfed.algorithms.pca.model import noisy_center, postprocess
from dpfed.algorithms.pca.plan import ARRAYS, GRID, KINDS
from dpfed.algorithms.pca.release import plan_release

__all__ = ["PCACoordinator"]


class PCACoordinator(CoordinatorAlgorithm):
    """The coordinator half: one task, the sum of the parties' integer vectors, top-k eigenvectors."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec, self.parties = spec, list(parties)
        if not self.parties:
            raise ValueError("a PCA job needs at least one party")
        self.plan = plan_release(spec)
        self.secure = sn.is_secure(spec.params)
        self.min_survivors = sn.secure_params(spec.params).min_survivors if self.secure else len(self.parties)
        self.survivors = len(self.parties)
        self._round = 0                               # the next round to issue
        self._center: np.ndarray | None = None        # round 0's noisy mean
        self._model: dict[str, np.ndarray] | None = None

    def next_task(self) -> Task | None:
        r = self._round
        if r == 0:
            self._round = 1
            return Task(self.spec.job_id, 0, KINDS[0])
        if r == 1 and self._center is not None:
            self._round = 2
            return Task(self.spec.job_id, 1, KINDS[1], arrays={"center": self._center.copy()})
        return None

    def absorb(self, task: Task, combined: Aggregate) -> None:
        r = task.round
        if r not in (0, 1) or task.kind != KINDS[r] or (self._center if r == 0 else self._model) is not None:
            raise ValueError("PCA absorbs one answer set per round: the mean (round 0), then the second moment")
        survivors = check_contributors(self.parties, combined, secure=self.secure, min_survivors=self.min_survivors,
                                       learner="PCA")
        rp, name = self.plan.rounds[r], ARRAYS[r]
        total = integer_total(combined, name, rp.length)
        self.survivors = survivors
        schema = self.spec.schema
        if r == 0:
            self._center = noisy_center(total, rp.geometry, schema.lower, schema.upper)
        else:
            assert self._center is not None
            center = np.clip(self._center, schema.lower, schema.upper)
            self._model = postprocess(total, rp.geometry.at(center), self.plan.k)

    @property
    def progress(self) -> float:
        return 1.0 if self._model is not None else (0.5 if self._center is not None else 0.0)

    def model(self) -> dict[str, np.ndarray]:
        if self._model is None:
            raise RuntimeError("the PCA job has not finished")
        return dict(self._model)

    def summary(self) -> dict[str, Any]:
        shares = self.survivors if self.secure else len(self.parties)
        rp = self.plan.rounds[1]
        g = rp.geometry
        # noise std of one entry of the covariance sum sum u u^T (rescaled units), all shares / parties summed
        unit = (g.clip / g.k_in) ** 2
        return {"mechanism": self.plan.mechanism, "statistics": int(rp.length), "clip": g.clip,
                "noise_std_second_moment": math.sqrt(shares) * rp.sigma * unit, "grid": GRID}
