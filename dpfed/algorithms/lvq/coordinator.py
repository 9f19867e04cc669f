"""The coordinator half of GLVQ / GMLVQ: issue the init and T step tasks, aggregate, step the model.

The coordinator sets each class's prototypes to centre + sum / count after the initialisation, then
adds the parties' noisy gradient sums each step, divides by the expected batch size q * n (n from the
noisy counts) and steps (SGD with rate ``lr / (1 + lr_decay * t / T)``, or Adam). Omega is renormalised
to Frobenius norm ``omega_scale`` after each step and the prototypes are kept inside the public bound
(post-processing). Under secure aggregation each step is normalised by the initialisation's noisy count
times the survivors' share of the parties (parties of equal size assumed; post-processing).
"""
from __future__ import annotations

import zlib
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms import dpsgd
from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import Aggregate, CoordinatorAlgorithm, JobSpec, Task
from dpfed.algorithms.dpsgd.coordinator import central_noise_multiplier, check_round_parties, noise_placement
from dpfed.algorithms.lvq.defaults import DEFAULTS, PROTOTYPE_BOUND
from dpfed.algorithms.lvq.layout import layout, prototype_labels
from dpfed.algorithms.lvq.model import init_center
from dpfed.algorithms.lvq.plan import privacy_plan
from dpfed.algorithms.lvq.secure import decode_init, secure_lvq_plan

__all__ = ["LVQCoordinator"]


class LVQCoordinator(CoordinatorAlgorithm):
    """Issues the init and T step tasks, aggregates the parties' noisy sums and steps the model."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec = spec
        self.parties = list(parties)
        self.p = {**DEFAULTS, **spec.params}
        self.private = bool(self.p["private"])
        self.c, self.d, self.ppc, self.rank, self.learn_omega = layout(spec)
        self.secure = sn.is_secure(self.p)
        self.min_survivors = sn.secure_params(self.p).min_survivors if self.secure else len(self.parties)
        self.plan = privacy_plan(spec.params) if self.private and not self.secure else None
        self.init_parties = len(self.parties)
        self.steps = self.plan.steps if self.plan else dpsgd.steps_for(self.p["epochs"], self.p["sampling_rate"])
        self.labels = prototype_labels(self.c, self.ppc)
        # public, data-independent start: box centre plus a tiny offset to break ties between prototypes
        # (keyed by a stable digest of the job id: Python's str hash is salted per process)
        pub = np.random.default_rng(zlib.crc32(spec.job_id.encode()))
        self.W = pub.normal(0.0, 1e-3, (len(self.labels), self.d))
        self.omega = None
        if self.rank:
            if self.rank == self.d:
                self.omega = np.eye(self.d)
            else:
                self.omega = np.linalg.qr(pub.normal(size=(self.d, self.rank)))[0].T
            self._normalise_omega()
        self.round = 0
        self.n_hat = 0.0
        self.init_aborted = False
        self.trace: list[float] = []
        self._m: np.ndarray | None = None
        self._v: np.ndarray | None = None

    def _normalise_omega(self) -> None:
        if self.omega is not None:
            norm = np.linalg.norm(self.omega)
            if norm > 0:
                self.omega *= float(self.p["omega_scale"]) / norm

    def next_task(self) -> Task | None:
        if self.round > self.steps:
            return None
        if self.round == 0:
            return Task(self.spec.job_id, 0, "init")
        arrays = {"prototypes": self.W.copy()}
        if self.rank:
            arrays["omega"] = self.omega.copy()
        return Task(self.spec.job_id, self.round, "step", arrays=arrays)

    def absorb(self, task: Task, combined: Aggregate) -> None:
        if task.round != self.round:
            raise ValueError(f"answers for round {task.round}, expected round {self.round}")
        if self.secure and not combined.parties and task.kind == "step":  # an aborted secure round: no step
            self.round += 1
            return
        if self.secure and not combined.parties and task.kind == "init":
            # an aborted initialisation (fewer than P_min survivors, nothing unmasked): the prototypes keep the
            # public start (box centre plus the tiny offset) and the batch size comes from the public bound on
            # the records; its share of the budget is spent without a release (conservative)
            self.n_hat = float(sn.secure_params(self.p).records)
            self.init_parties = len(self.parties)
            self.init_aborted = True
            self.round += 1
            return
        check_round_parties(self.parties, combined, secure=self.secure, min_survivors=self.min_survivors)
        a = dict(combined.arrays)
        if task.kind == "init" and self.secure:  # the rows' weights (secure_rows) taken off the decoded sums
            a = decode_init(self.spec, a)
        if task.kind == "init":
            counts = np.asarray(a["counts"], dtype=np.float64)
            self.n_hat = max(float(counts.sum()), 1.0)
            self.init_parties = len(combined.parties)
            if "sums" in a:
                sums = np.asarray(a["sums"], dtype=np.float64)
                means = np.clip(init_center(self.p, self.d) + sums / np.maximum(counts, 1.0)[:, None], -1.0, 1.0)
                self.W = means[self.labels] + self.W
        else:
            parts = [np.asarray(a["grad_prototypes"], dtype=np.float64).ravel()]
            if self.rank:
                parts.append(np.asarray(a["grad_omega"], dtype=np.float64).ravel())
            # the expected batch of this round's contributors; under dropouts, the survivors' share of the
            # initialisation's noisy count (parties of equal size assumed: post-processing only)
            n = self.n_hat * len(combined.parties) / max(self.init_parties, 1)
            g = np.concatenate(parts) / (float(self.p["sampling_rate"]) * max(n, 1.0))
            self._step(g)
        self.round += 1

    def _step(self, g: np.ndarray) -> None:
        t = self.round  # 1..T
        lr = dpsgd.decayed_rate(float(self.p["lr"]), float(self.p["lr_decay"]), t, self.steps)
        upd, self._m, self._v = dpsgd.direction(str(self.p["optimizer"]), g, self._m, self._v, t, self.p["adam_betas"])
        k = self.W.size
        self.W = np.clip(self.W - lr * upd[:k].reshape(self.W.shape), -PROTOTYPE_BOUND, PROTOTYPE_BOUND)
        if self.rank and self.learn_omega:
            self.omega = self.omega - lr * upd[k:].reshape(self.omega.shape)
            self._normalise_omega()

    @property
    def progress(self) -> float:
        return min(1.0, self.round / (self.steps + 1))

    def model(self) -> dict[str, np.ndarray]:
        out = {"algorithm": np.array(self.spec.algorithm), "prototypes": self.W.copy(),
               "prototype_labels": self.labels.copy(), "lower": self.spec.schema.lower,
               "upper": self.spec.schema.upper}
        if self.rank:
            out["omega"] = self.omega.copy()
        return out

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"steps": self.steps, "clip": float(self.p["clip"]), "init": self.p["init"],
                               "optimizer": self.p["optimizer"], "lr": float(self.p["lr"]),
                               "noise_placement": noise_placement(self.p["noise"], self.secure)}
        if self.secure:
            sp = secure_lvq_plan(self.spec)
            z = central_noise_multiplier(sp.step)
            out.update(sigma_share=sp.step.sigma_share, gamma=sp.step.gamma, init_sigma_share=sp.init.sigma_share,
                       noise_multiplier=z, expected_batch_size=float(self.p["sampling_rate"]) * self.n_hat,
                       init_aborted=self.init_aborted)
        elif self.plan is not None:
            out.update(noise_multiplier=self.plan.noise_multiplier, init_count_noise=self.plan.count_noise,
                       init_sum_noise=self.plan.sum_noise, expected_batch_size=float(self.p["sampling_rate"]) * self.n_hat)
        else:
            out["noise_multiplier"] = 0.0
        return out
