"""The coordinator half of logistic regression / linear SVM: the count, then T DP-SGD steps (post-processing).

Round 0 asks every party for its noisy number of records (n-hat: the expected batch is q n-hat). Each
step broadcasts W; the parties' noisy clipped gradient sums are added, divided by the expected batch,
the L2 regulariser's gradient ``l2 W`` (bias column excluded; public, no data) is added, and W moves
by SGD with rate ``lr / (1 + lr_decay (t - 1) / T)`` or Adam (:mod:`dpfed.algorithms.dpsgd.optimizer`),
then is clamped to the public bound the parties check.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dpfed.algorithms import dpsgd
from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import Aggregate, CoordinatorAlgorithm, JobSpec, Task
from dpfed.algorithms.dpsgd.coordinator import central_noise_multiplier, check_round_parties, noise_placement
from dpfed.algorithms.linear_models.defaults import DEFAULTS, WEIGHT_BOUND
from dpfed.algorithms.linear_models.layout import layout
from dpfed.algorithms.linear_models.plan import privacy_plan
from dpfed.algorithms.linear_models.secure import secure_linear_plan

__all__ = ["LinearCoordinator"]


class LinearCoordinator(CoordinatorAlgorithm):
    """Issues the count and the T step tasks, aggregates the parties' noisy sums and steps W."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec = spec
        self.parties = list(parties)
        self.p = {**DEFAULTS, **spec.params}
        self.loss, self.c, k, dp1 = layout(spec)
        self.secure = sn.is_secure(self.p)
        self.private = bool(self.p["private"])
        self.min_survivors = sn.secure_params(self.p).min_survivors if self.secure else len(self.parties)
        self.plan = privacy_plan(spec.params) if self.private and not self.secure else None
        self.steps = dpsgd.steps_for(float(self.p["epochs"]), float(self.p["sampling_rate"]))
        self.W = np.zeros((k, dp1))
        self.round = 0
        self.n_hat = 0.0
        self.count_parties = len(self.parties)
        self._m: np.ndarray | None = None
        self._v: np.ndarray | None = None

    def next_task(self) -> Task | None:
        if self.round > self.steps:
            return None
        if self.round == 0:
            return Task(self.spec.job_id, 0, "count")
        return Task(self.spec.job_id, self.round, "step", arrays={"weights": self.W.copy()})

    def absorb(self, task: Task, combined: Aggregate) -> None:
        if task.round != self.round:
            raise ValueError(f"answers for round {task.round}, expected round {self.round}")
        if self.secure and not combined.parties:  # an aborted secure round: no step / the public record bound
            if task.kind == "count":
                self.n_hat = float(sn.secure_params(self.p).records)
            self.round += 1
            return
        check_round_parties(self.parties, combined, secure=self.secure, min_survivors=self.min_survivors)
        if task.kind == "count":
            self.n_hat = max(float(np.asarray(combined.arrays["count"], dtype=np.float64).sum()), 1.0)
            self.count_parties = len(combined.parties)
        else:
            # the expected batch of this round's contributors (parties of equal size assumed under dropouts)
            n = self.n_hat * len(combined.parties) / max(self.count_parties, 1)
            g = np.asarray(combined.arrays["grad"], dtype=np.float64).reshape(self.W.shape)
            g = g / (float(self.p["sampling_rate"]) * max(n, 1.0))
            g[:, :-1] += float(self.p["l2"]) * self.W[:, :-1]
            self._step(g)
        self.round += 1

    def _step(self, g: np.ndarray) -> None:
        t = self.round  # 1..T
        lr = dpsgd.decayed_rate(float(self.p["lr"]), float(self.p["lr_decay"]), t, self.steps)
        upd, self._m, self._v = dpsgd.direction(str(self.p["optimizer"]), g.ravel(), self._m, self._v, t,
                                                self.p["adam_betas"])
        self.W = np.clip(self.W - lr * upd.reshape(self.W.shape), -WEIGHT_BOUND, WEIGHT_BOUND)

    @property
    def progress(self) -> float:
        return min(1.0, self.round / (self.steps + 1))

    def model(self) -> dict[str, np.ndarray]:
        return {"algorithm": np.array(self.spec.algorithm), "weights": self.W.copy(),
                "n_classes": np.array(self.c, dtype=np.int64)}

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"steps": self.steps, "clip": float(self.p["clip"]), "loss": self.loss,
                               "optimizer": self.p["optimizer"], "lr": float(self.p["lr"]),
                               "sampling_rate": float(self.p["sampling_rate"]),
                               "expected_batch_size": float(self.p["sampling_rate"]) * self.n_hat,
                               "noise_placement": noise_placement(self.p["noise"], self.secure)}
        if self.secure:
            sp = secure_linear_plan(self.spec)
            out.update(sigma_share=sp.step.sigma_share, gamma=sp.step.gamma,
                       noise_multiplier=central_noise_multiplier(sp.step))
        elif self.plan is not None:
            out.update(noise_multiplier=self.plan.noise_multiplier, count_noise=self.plan.count_noise)
        else:
            out["noise_multiplier"] = 0.0
        return out
