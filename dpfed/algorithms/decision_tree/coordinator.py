"""The private decision tree's coordinator half: it grows the tree level by level from the summed noisy
counts (post-processing only: :func:`.model.choose_splits` and the stopping rule :func:`.model.min_count`),
sending the structure so far with every task, and builds the model from the leaves' noisy counts."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import Aggregate, CoordinatorAlgorithm, JobSpec, Task
from dpfed.algorithms.decision_tree.model import choose_splits, min_count, tree_model
from dpfed.algorithms.decision_tree.plan import LEVEL, job_grid, job_options, schedule
from dpfed.algorithms.decision_tree.release import plan_release
from dpfed.algorithms.one_release import check_contributors, integer_total

__all__ = ["TreeCoordinator"]


class TreeCoordinator(CoordinatorAlgorithm):
    """Issues rounds 0 .. D (the levels, then the leaves) and grows the tree from their noisy sums."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec, self.parties = spec, list(parties)
        if not self.parties:
            raise ValueError("a decision tree job needs at least one party")
        self.options, self.grid, self.plan = job_options(spec), job_grid(spec), plan_release(spec)
        self.k = max(1, spec.schema.n_classes)
        self.secure = sn.is_secure(spec.params)
        self.min_survivors = sn.secure_params(spec.params).min_survivors if self.secure else len(self.parties)
        internal = (1 << self.options.depth) - 1
        self.feature = np.full(internal, -1, np.int64)
        self.left = np.zeros((internal, self.grid.widest), np.uint8)
        self.round, self.skipped = 0, 0
        self._model: dict[str, np.ndarray] | None = None

    def next_task(self) -> Task | None:
        kinds = schedule(self.options.depth)
        if self.round >= len(kinds):
            return None
        return Task(self.spec.job_id, self.round, kinds[self.round],
                    arrays={"feature": self.feature.copy(), "left": self.left.copy()})

    def absorb(self, task: Task, combined: Aggregate) -> None:
        if task.round != self.round or self._model is not None:
            raise ValueError(f"answers for round {task.round}, expected round {self.round}")
        if self.secure and not combined.parties and task.kind == LEVEL:
            self.round += 1   # an aborted level: nothing was unmasked, its open nodes become leaves
            self.skipped += 1
            return
        survivors = check_contributors(self.parties, combined, secure=self.secure, min_survivors=self.min_survivors,
                                       learner="decision tree")
        rnd = self.plan.rounds[self.round]
        total = integer_total(combined, "counts", rnd.dimension)
        sigma = math.sqrt(survivors) * rnd.noise   # the sum's noise std per entry (a full share per party)
        if task.kind == LEVEL:
            self._grow(total, sigma)
        else:
            self._model = tree_model(self.feature, self.left, total.reshape(-1, self.k), self.grid,
                                     self.options.alpha, self.plan.mechanism)
        self.round += 1

    def _grow(self, total: np.ndarray, sigma: float) -> None:
        """Split the open nodes of the current level whose noisy count passes the stopping rule."""
        r, first = self.round, (1 << self.round) - 1
        hist = total.reshape(1 << r, self.grid.total, self.k).astype(np.float64)
        nodes = first + np.arange(1 << r)
        reached = np.ones(len(nodes), bool) if r == 0 else self.feature[(nodes - 1) // 2] >= 0
        n_hat = hist.sum(axis=(1, 2)) / self.grid.features
        feat, left = choose_splits(hist, self.grid, self.k)
        split = reached & (n_hat >= min_count(sigma, self.grid, self.k)) & (feat >= 0)
        self.feature[nodes[split]] = feat[split]
        self.left[nodes[split]] = left[split]

    @property
    def progress(self) -> float:
        return self.round / (self.options.depth + 1)

    def model(self) -> dict[str, np.ndarray]:
        if self._model is None:
            raise RuntimeError("the decision tree job has not finished")
        return dict(self._model)

    def summary(self) -> dict[str, Any]:
        return {"mechanism": self.plan.mechanism, "depth": self.options.depth, "bins": self.options.bins,
                "splits": int((self.feature >= 0).sum()), "levels_skipped": self.skipped,
                "noise_multipliers": [r.multiplier for r in self.plan.rounds]}
