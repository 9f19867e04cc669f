"""The party halves of logistic regression / linear SVM: charge the whole job, then answer each round once.

The registry entry chooses the half once from the job's parameters: :class:`LinearParty`, or
:class:`SecureLinearParty` for distributed noise under secure aggregation.

* Round 0 (``count``): the number of records plus exact rounded-Gaussian noise (sensitivity 1).
* Rounds 1..T (``step``): the coordinator broadcasts W; the party Poisson-samples its records (rate q,
  from its secure generator), computes every sampled record's gradient at W on its encoded record
  (:mod:`dpfed.data.encoding`: one-hot / [0, 1], so a record far outside the public bounds is clamped),
  clips each to L2 norm C by ghost clipping, adds N(0, (z C)^2) to every coordinate of the sum and returns
  it (:mod:`dpfed.algorithms.dpsgd`). Adding or removing one record moves the sum by at most C.

Noise placement (``noise``): ``local`` (the full noise at every party: private even against the
coordinator), ``distributed`` with ``secure_aggregation`` (:class:`SecureLinearParty`), or ``distributed``
without it (1/P of the variance per party, so only the sum carries the central noise: simulation only).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterator

import numpy as np
from dp_accounting import DpEvent

from dpfed.algorithms import dpsgd
from dpfed.algorithms.contract import JobSpec, PartyAlgorithm, Released, Task
from dpfed.algorithms.dpsgd.party import JobCache, RecordCache, charged_event, check_round
from dpfed.algorithms.linear_models.defaults import DEFAULTS, WEIGHT_BOUND
from dpfed.algorithms.linear_models.gradient import LinearGradient
from dpfed.algorithms.linear_models.layout import Layout, layout
from dpfed.algorithms.linear_models.plan import LinearPlan, privacy_plan
from dpfed.algorithms.linear_models.secure import count_rows, secure_linear_plan, task_plan
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.algorithms.secure_release import PlainAnswerRefused, SecureRelease
from dpfed.core.errors import TaskRejected
from dpfed.core.mechanisms import rounded_gaussian
from dpfed.core.rng import SecureRNG
from dpfed.data.encoding import encode
from dpfed.data.schema import DataValidationError

__all__ = ["LinearParty", "SecureLinearParty"]


class LinearParty(PartyAlgorithm):
    """Answers ``count`` and ``step`` tasks with clipped, noised sums; each round at most once."""

    builtin = True

    def __init__(self) -> None:
        self._last_round: dict[str, int] = {}
        self._jobs: JobCache[Layout] = JobCache(DEFAULTS, layout)
        # the encoded records (one-hot / [0, 1]), computed once per job for the same array
        self._encoded = RecordCache(lambda spec, X: encode(spec.schema, X))

    def _job(self, spec: JobSpec) -> tuple[dict[str, Any], Layout]:
        """Params and layout of ``spec`` (cached per job id while the spec is unchanged)."""
        return self._jobs.get(spec)

    def _plan(self, spec: JobSpec) -> LinearPlan:
        return privacy_plan(spec.params)

    @staticmethod
    def _check_params(spec: JobSpec) -> None:
        """The job parameters both halves refuse (public parameters only)."""
        p = {**DEFAULTS, **spec.params}
        dpsgd.check_release(p, "linear-model")
        if not float(p["huber"]) > 0:
            raise TaskRejected("huber must be > 0")
        layout(spec)

    def _charge(self, spec: JobSpec, event_of: Callable[[], DpEvent], accountant: str) -> DpEvent:
        self._check_params(spec)
        return charged_event(spec, event_of, accountant, f"{spec.algorithm} privacy parameters")

    def job_event(self, spec: JobSpec) -> DpEvent:
        return self._charge(spec, lambda: self._plan(spec).event, "pld")

    def task_event(self, spec: JobSpec, task: Task) -> DpEvent | None:
        """Round 0: the count; round t >= 1: one Poisson-subsampled Gaussian step."""
        plan = self._plan(spec)
        if task.round == 0:
            return plan.count_event
        return dpsgd.step_event(float(self._job(spec)[0]["sampling_rate"]), plan.noise_multiplier)

    def _steps(self, spec: JobSpec) -> int:
        p = self._job(spec)[0]
        return dpsgd.steps_for(float(p["epochs"]), float(p["sampling_rate"]))

    def check_task(self, spec: JobSpec, task: Task) -> None:
        if task.job_id != spec.job_id:
            raise TaskRejected("task belongs to another job")
        _, (_, _, k, dp1) = self._job(spec)
        check_round(task, self._last_round.get(spec.job_id, -1), self._steps(spec), "linear-model", "count")
        if task.kind == "count":
            if task.arrays:
                raise TaskRejected("the count task carries no arrays")
            return
        if set(task.arrays) != {"weights"}:
            raise TaskRejected("a step task carries exactly the array 'weights'")
        W = np.asarray(task.arrays["weights"])
        if W.shape != (k, dp1) or W.dtype.kind not in "iuf" or not np.all(np.isfinite(W)):
            raise TaskRejected(f"array 'weights' must be finite and real with shape {(k, dp1)}")
        if np.abs(W.astype(np.float64)).max(initial=0.0) > WEIGHT_BOUND:
            raise TaskRejected(f"weights must lie within [-{WEIGHT_BOUND:g}, {WEIGHT_BOUND:g}]")

    def _checked(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Check the task and the records; from here on the round counts as answered."""
        self.check_task(spec, task)
        _, (_, c, _, dp1) = self._job(spec)
        if y is None:
            raise DataValidationError(f"{spec.algorithm} needs labelled records")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != spec.schema.n_features:
            raise DataValidationError(f"records have {X.shape[-1] if X.ndim == 2 else '?'} columns, the job expects "
                                      f"{spec.schema.n_features}")
        y = np.asarray(y)
        if y.shape != (len(X),) or (len(y) and (y.min() < 0 or y.max() >= c)):
            raise DataValidationError(f"labels must be one integer in 0..{c - 1} per record")
        Z = self._encoded.get(spec, X)
        self._last_round[spec.job_id] = task.round
        return Z, y.astype(np.int64)

    def _gradient(self, spec: JobSpec, task: Task, n: int, rng: SecureRNG) -> tuple[LinearGradient, np.ndarray]:
        """The gradient at the step's broadcast weights, and the step's Poisson sample of the n records."""
        p, (loss, _, _, _) = self._job(spec)
        grad = LinearGradient(np.asarray(task.arrays["weights"], dtype=np.float64), loss, float(p["huber"]))
        return grad, dpsgd.poisson_sample(rng, n, float(p["sampling_rate"]))

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        Z, y = self._checked(spec, task, X, y)
        p, _ = self._job(spec)
        plan = self._plan(spec)
        share = int(p["parties"]) if p["noise"] == "distributed" else 1  # noise shares (1: local noise)
        if task.kind == "count":
            rel = rounded_gaussian(np.array([len(Z)], dtype=np.int64), sensitivity=1.0, sigma=plan.count_noise,
                                   parties=share, rng=rng)
            return Released({"count": np.asarray(rel.value, dtype=np.int64)}, (rel.event,))
        grad, mask = self._gradient(spec, task, len(Z), rng)
        g = dpsgd.clipped_sum(grad, Z[mask], y[mask], float(p["clip"]))
        noisy, event = dpsgd.noisy_sum(g.vector, float(p["clip"]), plan.noise_multiplier, rng,
                                       exact=bool(p["exact_noise"]), parties=share)
        return Released({"grad": noisy.reshape(grad.W.shape)}, (dpsgd.subsampled(float(p["sampling_rate"]), event),))


class SecureLinearParty(PlainAnswerRefused, LinearParty, SecureRelease):
    """Distributed noise under secure aggregation: the count and the T steps of
    :mod:`dpfed.algorithms.linear_models.secure`, encoded and masked by the secure session (never :meth:`answer`)."""

    builtin = True

    def job_event(self, spec: JobSpec) -> DpEvent:
        return self._charge(spec, lambda: secure_linear_plan(spec).event, "rdp")

    def task_event(self, spec: JobSpec, task: Task) -> DpEvent | None:
        """Round 0: the count's release; round t >= 1: one of the T steps' (Poisson-subsampled) releases."""
        plan = secure_linear_plan(spec)
        return plan.count.event() if task.round == 0 else replace(plan.step, steps=1).event()

    def plan(self, spec: JobSpec, task: Task) -> SecurePlan | None:
        return task_plan(spec, task)

    def rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
             rng: SecureRNG) -> Iterator[np.ndarray]:
        """Count: a row [1] per record; steps: per sampled record its clipped gradient."""
        plan = self.plan(spec, task)
        if plan is None:
            raise TaskRejected("not a secure linear-model task")
        Z, y = self._checked(spec, task, X, y)
        chunk = dpsgd.rows_per_chunk(plan.noise.padded_dimension)
        if task.kind == "count":
            return count_rows(len(Z), chunk)
        grad, mask = self._gradient(spec, task, len(Z), rng)
        return dpsgd.clipped_row_chunks(grad, Z[mask], y[mask], float(self._job(spec)[0]["clip"]), chunk)

    def row_sum(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
                rng: SecureRNG) -> np.ndarray | None:
        """A step's sum of per-record clipped gradients for "party" rounding, by ghost clipping; None for the
        count (its rows are summed)."""
        if self.plan(spec, task) is None:
            raise TaskRejected("not a secure linear-model task")
        if task.kind != "step":
            return None
        Z, y = self._checked(spec, task, X, y)
        grad, mask = self._gradient(spec, task, len(Z), rng)
        return dpsgd.clipped_sum(grad, Z[mask], y[mask], float(self._job(spec)[0]["clip"])).vector
