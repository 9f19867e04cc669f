"""The party halves of GLVQ / GMLVQ: charge the whole job, then answer each round once with noised sums.

The registry entry chooses the half once from the job's parameters
(:meth:`dpfed.algorithms.contract.Algorithm.party_for`): :class:`LVQParty`, or :class:`SecureLVQParty` for
distributed noise under secure aggregation.

Each party charges the whole job (initialisation + T steps, :mod:`dpfed.algorithms.lvq.plan`) before its
first answer and then answers each round at most once, only with the planned shapes and parameters.

Noise placement (``noise``):

* ``local``: every party adds the full N(0, sigma^2 C^2) to its sum (and the full initialisation
  noise): each party's answers alone are (epsilon, delta)-DP, even against the coordinator. The
  aggregate's noise grows with sqrt(parties).
* ``distributed`` with ``secure_aggregation`` (:class:`SecureLVQParty`): the rows of
  :mod:`dpfed.algorithms.lvq.secure`, encoded and masked by the secure session (never ``answer``).
* ``distributed`` without secure aggregation: each party adds 1/P of the noise variance (counts:
  discrete Gaussian with sigma^2 / P), so the *sum* carries the central noise; it protects a party
  against the coordinator only under secure aggregation: **simulation only**. (A sum of P discrete
  Gaussians of variance sigma^2 / P is not exactly a discrete Gaussian; with the count noise used
  here, sigma / sqrt(P) > 10, the difference is far below delta, Canonne, Kamath & Steinke 2020,
  Sec. 4.) The Laplace initialisation cannot be split and is added in full at every party in both
  placements.

A step (round t >= 1) is one DP-SGD release through :mod:`dpfed.algorithms.dpsgd`: the party
Poisson-samples (rate q), clips every record's joint gradient (prototypes and Omega) to L2 norm C with
ghost norms (:mod:`dpfed.algorithms.lvq.gradient`), adds Gaussian noise and returns the sum. The noise
is a float Gaussian from the ChaCha20 keystream (ziggurat), as in Opacus and TF Privacy; ``exact_noise``
puts the sum on a public grid with exact rounded-Gaussian noise instead (floating-point safe, slower).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterator, Mapping

import numpy as np
from dp_accounting import DpEvent

from dpfed.algorithms import dpsgd
from dpfed.algorithms.contract import Answer, JobSpec, PartyAlgorithm, Released, Task
from dpfed.algorithms.dpsgd.party import JobCache, RecordCache, charged_event, check_round
from dpfed.algorithms.lvq.defaults import DEFAULTS, PROTOTYPE_BOUND
from dpfed.algorithms.lvq.gradient import LVQGradient
from dpfed.algorithms.lvq.layout import Layout, layout, prototype_labels
from dpfed.algorithms.lvq.model import init_rows, rescale
from dpfed.algorithms.lvq.plan import PrivacyPlan, privacy_plan
from dpfed.algorithms.lvq.secure import secure_init_rows, secure_lvq_plan, task_plan
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.algorithms.secure_release import PlainAnswerRefused, SecureRelease
from dpfed.core.errors import TaskRejected
from dpfed.core.mechanisms import discrete_laplace, gaussian, laplace, rounded_gaussian
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import DataValidationError

__all__ = ["LVQParty", "SecureLVQParty"]


class LVQParty(PartyAlgorithm):
    """Answers ``init`` and ``step`` tasks with clipped, noised sums; each round at most once."""

    builtin = True

    def __init__(self) -> None:
        self._last_round: dict[str, int] = {}
        self._jobs: JobCache[Layout] = JobCache(DEFAULTS, layout)
        # records rescaled into [-1, 1]^d, computed once per job for the same array
        self._scaled = RecordCache(lambda spec, X: rescale(X, spec.schema.lower, spec.schema.upper))

    def _job(self, spec: JobSpec) -> tuple[dict[str, Any], Layout]:
        """Params and layout of ``spec`` (cached per job id while the spec is unchanged)."""
        return self._jobs.get(spec)

    def _steps(self, spec: JobSpec) -> int:
        """The number of charged steps T (the plain job's plan; :class:`SecureLVQParty`: its secure plan's, so
        that a secure party never calibrates the central sigma it does not use)."""
        return privacy_plan(spec.params).steps

    @staticmethod
    def _check_params(spec: JobSpec) -> None:
        """The job parameters both halves refuse (public parameters only)."""
        p = {**DEFAULTS, **spec.params}
        dpsgd.check_release(p, "LVQ")
        layout(spec)
        if p["init_center"] not in ("mid", "lower") or not (float(p["init_clip"]) >= 0.0):
            raise TaskRejected("init_center must be 'mid' or 'lower' and init_clip >= 0")
        if p["init"] == "laplace" and float(p["init_clip"]) > 0:
            raise TaskRejected("init_clip applies to the Gaussian initialisation only")

    def job_event(self, spec: JobSpec) -> DpEvent:
        self._check_params(spec)
        return charged_event(spec, lambda: privacy_plan(spec.params).event, "pld", "LVQ privacy parameters")

    def task_event(self, spec: JobSpec, task: Task) -> DpEvent | None:
        """Round 0: the initialisation; round t >= 1: one Poisson-subsampled Gaussian step."""
        plan = privacy_plan(spec.params)
        if task.round == 0:
            return plan.init_event
        return dpsgd.step_event(float({**DEFAULTS, **spec.params}["sampling_rate"]), plan.noise_multiplier)

    def check_task(self, spec: JobSpec, task: Task) -> None:
        if task.job_id != spec.job_id:
            raise TaskRejected("task belongs to another job")
        p, (c, d, ppc, rank, _) = self._job(spec)
        check_round(task, self._last_round.get(spec.job_id, -1), self._steps(spec), "LVQ", "init")
        if task.kind == "step":
            want = {"prototypes": (c * ppc, d)}
            if rank:
                want["omega"] = (rank, d)
            if set(task.arrays) != set(want):
                raise TaskRejected(f"a step task carries exactly the arrays {sorted(want)}")
            for k, shape in want.items():
                a = np.asarray(task.arrays[k])
                if a.shape != shape or a.dtype.kind not in "iuf" or not np.all(np.isfinite(a)):
                    raise TaskRejected(f"array {k!r} must be finite and real with shape {shape}")
            if np.abs(np.asarray(task.arrays["prototypes"], dtype=np.float64)).max(initial=0.0) > PROTOTYPE_BOUND:
                raise TaskRejected(f"prototypes must lie within [-{PROTOTYPE_BOUND:g}, {PROTOTYPE_BOUND:g}] "
                                   "(rescaled units; the data box is [-1, 1])")
            if rank:
                bound = float(p["omega_scale"]) * (1.0 + 1e-6)
                if not np.linalg.norm(np.asarray(task.arrays["omega"], dtype=np.float64)) <= bound:
                    raise TaskRejected(f"omega's Frobenius norm must be at most omega_scale = {p['omega_scale']:g}")
        elif task.arrays:
            raise TaskRejected("the init task carries no arrays")

    def _checked(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Check the task and the records; from here on the round counts as answered."""
        self.check_task(spec, task)
        c, d = self._job(spec)[1][:2]
        if y is None:
            raise DataValidationError("LVQ needs labelled records")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != d:
            raise DataValidationError(f"records have {X.shape[-1] if X.ndim == 2 else '?'} columns, the job expects {d}")
        y = np.asarray(y)
        if task.kind == "init":  # validate the records once per job (they are the same every round)
            if not np.all(np.isfinite(X)):
                raise DataValidationError("records contain NaN or infinite values")
            if y.shape != (len(X),) or (len(y) and (y.min() < 0 or y.max() >= c)):
                raise DataValidationError(f"labels must be one integer in 0..{c - 1} per record")
        elif y.shape != (len(X),):
            raise DataValidationError("one label per record")
        Z = self._scaled.get(spec, X)
        self._last_round[spec.job_id] = task.round  # from here on the round counts as answered
        # A class absent here is answered like any other (a count of 0 plus noise): refusing would
        # reveal its absence by the failure itself.
        return Z, y

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        Z, y = self._checked(spec, task, X, y)
        p, (c, d, ppc, rank, _) = self._job(spec)
        plan = privacy_plan(spec.params)
        share = int(p["parties"]) if p["noise"] == "distributed" else 1  # noise shares (1: local noise)
        if task.kind == "init":
            # A class absent here is answered like any other (a count of 0 plus noise): refusing would
            # reveal its absence by the failure itself.
            counts = np.bincount(y, minlength=c).astype(np.int64)
            return self._init_answer(p, plan, Z, y, counts, c, d, share, rng)
        grad, mask = self._step_gradient(spec, task, len(Z), rng)
        g, event = grad.release(Z[mask], y[mask], float(p["clip"]), plan.noise_multiplier, rng,
                                exact=bool(p["exact_noise"]), parties=share)
        out = {"grad_prototypes": g.prototypes}
        if rank:
            out["grad_omega"] = g.omega
        # the party Poisson-samples its records: the step's release is the subsampled Gaussian
        return Released(out, (dpsgd.subsampled(float(p["sampling_rate"]), event),))

    def _step_gradient(self, spec: JobSpec, task: Task, n: int, rng: SecureRNG) -> tuple[LVQGradient, np.ndarray]:
        """The gradient at the step's broadcast model, and the step's Poisson sample of the n records."""
        p, (c, d, ppc, rank, learn) = self._job(spec)
        W = np.asarray(task.arrays["prototypes"], dtype=np.float64)
        omega = np.asarray(task.arrays["omega"], dtype=np.float64) if rank else None
        grad = LVQGradient(W, prototype_labels(c, ppc), omega, phi=str(p["phi"]), beta=float(p["beta"]),
                           learn_omega=learn)
        return grad, dpsgd.poisson_sample(rng, n, float(p["sampling_rate"]))

    @staticmethod
    def _init_answer(p: Mapping[str, Any], plan: PrivacyPlan, Z: np.ndarray, y: np.ndarray, counts: np.ndarray,
                     c: int, d: int, share: int, rng: SecureRNG) -> Released:
        init = p["init"]
        if init == "laplace":  # the paper's mechanism; Laplace noise does not split, so always in full
            cnt = discrete_laplace(counts, sensitivity=1, epsilon=plan.count_epsilon, rng=rng)
        else:  # exact round(sigma Z), a post-processing of GaussianDpEvent(zc); shares when distributed
            cnt = rounded_gaussian(counts, sensitivity=1.0, sigma=plan.count_noise, parties=share, rng=rng)
        out: Answer = {"counts": np.asarray(cnt.value, dtype=np.int64)}
        if init == "zero":
            return Released(out, (cnt.event,))
        S, l2, l1 = init_rows(p, Z)
        sums = np.zeros((c, d))
        np.add.at(sums, y, S)
        if init == "gaussian":  # floating-point safe: public grid + exact rounded-Gaussian noise
            rel = gaussian(sums, sensitivity=l2, noise_multiplier=plan.sum_noise, parties=share, rng=rng)
        else:
            # One Laplace mechanism over the whole (c x d) table: a record changes one row by at most l1 in L1.
            rel = laplace(sums, sensitivity=l1, epsilon=plan.sum_epsilon, rng=rng)
        out["sums"] = np.asarray(rel.value)
        return Released(out, (cnt.event, rel.event))


class SecureLVQParty(PlainAnswerRefused, LVQParty, SecureRelease):
    """Distributed noise under secure aggregation: the initialisation and the T steps of
    :mod:`dpfed.algorithms.lvq.secure`, each one distributed discrete Gaussian release encoded and masked by
    the secure session (never :meth:`answer`)."""

    builtin = True

    def job_event(self, spec: JobSpec) -> DpEvent:
        self._check_params(spec)
        return charged_event(spec, lambda: secure_lvq_plan(spec).event, "rdp", "secure LVQ parameters")

    def _steps(self, spec: JobSpec) -> int:
        return secure_lvq_plan(spec).step.steps

    def task_event(self, spec: JobSpec, task: Task) -> DpEvent | None:
        """Round 0: the initialisation's release; round t >= 1: one of the T steps' (Poisson-subsampled)
        releases. Their composition is :meth:`job_event`."""
        plan = secure_lvq_plan(spec)
        return plan.init.event() if task.round == 0 else replace(plan.step, steps=1).event()

    def plan(self, spec: JobSpec, task: Task) -> SecurePlan | None:
        return task_plan(spec, task)

    def rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
             rng: SecureRNG) -> Iterator[np.ndarray]:
        """Initialisation: per record [sqrt(cf) e_y, sqrt(1 - cf) s / l2] (norm <= 1, the Gaussian
        mechanism's count/sum split); steps: per sampled record its clipped joint gradient."""
        plan = self.plan(spec, task)
        if plan is None:
            raise TaskRejected("not a secure LVQ task")
        Z, y = self._checked(spec, task, X, y)
        if task.kind == "init":
            return secure_init_rows(spec, Z, y)
        p = self._job(spec)[0]
        grad, mask = self._step_gradient(spec, task, len(Z), rng)
        return dpsgd.clipped_row_chunks(grad, Z[mask], y[mask], float(p["clip"]),
                                        dpsgd.rows_per_chunk(plan.noise.padded_dimension))

    def row_sum(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
                rng: SecureRNG) -> np.ndarray | None:
        """A step's sum of per-record clipped joint gradients for "party" rounding, by ghost clipping
        (:func:`dpfed.algorithms.dpsgd.clipped_sum`, the plain DP-SGD path: no per-record rows), in
        :meth:`rows`' layout; the sampled records are drawn as there. None for the initialisation
        (its rows are summed)."""
        if self.plan(spec, task) is None:
            raise TaskRejected("not a secure LVQ task")
        if task.kind != "step":
            return None
        Z, y = self._checked(spec, task, X, y)
        p = self._job(spec)[0]
        grad, mask = self._step_gradient(spec, task, len(Z), rng)
        return dpsgd.clipped_sum(grad, Z[mask], y[mask], float(p["clip"])).vector.astype(np.float64, copy=False)
