"""Differentially private GLVQ / GMLVQ across parties (Brinkrolf, Berger & Hammer, ESANN 2018).

A job is one initialisation round and T = epochs / q DP-SGD rounds.

* Round 0 (``init``, budget epsilon_1 = ``init_fraction`` * epsilon): each party releases noised
  per-class counts (sensitivity 1: exact rounded Gaussian round(sigma Z), charged exactly as the
  Gaussian -- discrete Gaussian shares under distributed noise -- or exact discrete Laplace) and
  per-class coordinate sums of its records rescaled by the public bounds into [-1, 1]^d (rounded to a
  public grid, exact integer noise: :func:`dpfed.core.mechanisms.gaussian` / ``laplace``). ``gaussian``: L2
  sensitivity sqrt(d), one Gaussian mechanism split between counts and sums (the two noise
  multipliers compose to exactly the one calibrated for epsilon_1). ``laplace``: the paper's
  mechanism, L1 sensitivity d, pure epsilon split. ``zero``: only counts are released (for the
  expected batch size); prototypes start at the centre of the box, no budget spent on sums.
  The coordinator sets each class's prototypes to centre + sum / count. The sums may be taken
  around a public centre (``init_center``: box centre, or the lower corner for sparse data such as
  pixels) with each centred record L2-clipped to ``init_clip`` (clip, then noise): the sensitivity
  drops from sqrt(d) to ``init_clip``, which on MNIST cuts the initialisation noise ~1.75x.
* Rounds 1..T (``step``): the coordinator broadcasts the model; each party Poisson-samples (rate q),
  clips every record's joint gradient (prototypes and Omega) to L2 norm C with ghost norms
  (:mod:`dpfed.algorithms.lvq_model`), adds Gaussian noise and returns the sum. The noise is a float Gaussian
  from the ChaCha20 keystream (ziggurat), as in Opacus and TF Privacy; ``exact_noise`` puts the sum
  on a public grid with exact rounded-Gaussian noise instead (floating-point safe, slower). The
  coordinator adds the sums, divides by the expected batch size q * n (n from the noisy counts) and steps (SGD with rate
  ``lr / (1 + lr_decay * t / T)``, or Adam). Omega is renormalised to Frobenius norm ``omega_scale``
  after each step (post-processing).
* sigma (``noise_multiplier``) is the smallest one for which the PLD composition of the
  initialisation and the T subsampled Gaussian steps meets (epsilon, delta)
  (:func:`dpfed.core.accounting.calibrate_noise_multiplier`); it is computed once when the job is
  created, stored in the job's public params, and re-checked by every party before it charges.

Noise placement (``noise``):

* ``local``: every party adds the full N(0, sigma^2 C^2) to its sum (and the full initialisation
  noise): each party's answers alone are (epsilon, delta)-DP, even against the coordinator. The
  aggregate's noise grows with sqrt(parties).
* ``distributed`` with ``secure_aggregation`` (:mod:`dpfed.algorithms.secure_noise`): every record's
  clipped vector (initialisation: [sqrt(cf) e_y, sqrt(1 - cf) s / l2], norm <= 1, the Gaussian
  mechanism's count/sum split; steps: its clipped gradient) is encoded with the distributed discrete
  Gaussian (KLS21), masked by SecAgg; noise planned for P_min survivors, accounted by RDP. The
  coordinator normalises each step by the initialisation's noisy count times the survivors' share
  of the parties (parties of equal size assumed; post-processing).
* ``distributed`` without secure aggregation: each party adds 1/P of the noise variance (counts:
  discrete Gaussian with sigma^2 / P), so the *sum* carries the central noise; it protects a party
  against the coordinator only under secure aggregation: **simulation only**. (A sum of P discrete
  Gaussians of variance sigma^2 / P is not exactly a discrete Gaussian; with the count noise used
  here, sigma / sqrt(P) > 10, the difference is far below delta, Canonne, Kamath & Steinke 2020,
  Sec. 4.) The Laplace initialisation cannot be split and is added in full at every party in both
  placements.

Each party charges the whole job (initialisation + T steps) before its first answer and then
answers each round at most once, only with the planned shapes and parameters.
"""
from __future__ import annotations

import argparse
import json
import math
import uuid
import zlib
from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping, Sequence

import dp_accounting
import numpy as np
from dp_accounting import DpEvent, dp_event

from dpfed.core import accounting
from dpfed.algorithms.driver import run_local as drive_local
from dpfed.algorithms.estimator import ClassifierScore, EstimatorParams
from dpfed.algorithms.contract import Aggregate, Algorithm, Answer, CoordinatorAlgorithm, JobSpec, PartyAlgorithm, Released, Task, TaskRejected
from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.lvq_model import GradientSum, clipped_gradient_rows, clipped_gradient_sum, predict, rescale
from dpfed.algorithms.params import EPSILON, MEMORY_CAP_BYTES, Param, ParamTable, arg_type, delta_param
from dpfed.core import distributed_noise as dn
from dpfed.core.clipping import clamp, clip_rows_l2, sum_sensitivity
from dpfed.core.rng import SecureRNG
from dpfed.core.mechanisms import discrete_laplace, float_gaussian, gaussian, laplace, rounded_gaussian
from dpfed.data.schema import DataValidationError, Schema
from dpfed.core.memo import per_object, shared_cache

__all__ = ["PrivacyPlan", "privacy_plan", "prepare_params", "LVQParty", "LVQCoordinator", "evaluate",
           "noisy_gradient_sum", "gradient_release", "DPGLVQ", "DPGMLVQ", "ALGORITHMS", "DEFAULTS"]

#: Defaults of the job parameters (the paper's q, C, E, epsilon_1 share; our initialisation and optimiser).
DEFAULTS: dict[str, Any] = {
    "epochs": 50, "sampling_rate": 0.01, "clip": 0.5, "noise": "local", "parties": 1,
    "init": "gaussian", "init_fraction": 0.2, "count_fraction": 0.05, "init_center": "mid", "init_clip": 0.0,
    "optimizer": "sgd", "lr": 0.05, "lr_decay": 9.0, "adam_betas": [0.9, 0.999],
    "prototypes_per_class": 1, "omega_rank": 0, "omega_scale": 1.0,
    "phi": "identity", "beta": 1.0, "private": True, "allow_missing_classes": False, "exact_noise": False,
}
#: Public bound on a broadcast prototype's coordinates, in rescaled units (the data box is [-1, 1]^d). The
#: coordinator keeps its prototypes inside (post-processing); a party refuses a broadcast outside.
PROTOTYPE_BOUND = 2.0
_PLAN_KEYS = ("epsilon", "delta", "epochs", "sampling_rate", "init", "init_fraction", "count_fraction")


# ----------------------------------------------------------------------------------- privacy plan

@dataclass(frozen=True)
class PrivacyPlan:
    """Noise parameters and DP events of a job, derived from public params only."""

    steps: int
    noise_multiplier: float          # DP-SGD sigma (noise std = sigma * clip)
    count_noise: float               # count noise: discrete Gaussian sigma, or discrete Laplace scale
    sum_noise: float                 # sum noise multiplier: Gaussian std / sqrt(d), or Laplace scale / d
    init_event: DpEvent
    event: DpEvent                   # whole job: init + T steps
    count_epsilon: float = 0.0       # Laplace initialisation: the counts' and the sums' epsilon
    sum_epsilon: float = 0.0

    def init_counts_only(self) -> bool:
        return self.sum_noise == 0.0


def _gaussian_multiplier(eps: float, delta: float) -> float:
    """Smallest Gaussian noise multiplier z with PLD epsilon(Gaussian(z), delta) <= eps (to 1e-5):
    the one calibration, :func:`dpfed.core.accounting.gaussian_noise_multiplier`."""
    return accounting.gaussian_noise_multiplier(eps, delta, rtol=1e-5)


def _init_noise(init: str, eps1: float, delta: float, count_fraction: float) -> tuple[float, float, DpEvent]:
    if init == "gaussian":
        z = _gaussian_multiplier(eps1, delta)
        zc, zs = z / math.sqrt(count_fraction), z / math.sqrt(1.0 - count_fraction)
        return zc, zs, accounting.compose([dp_accounting.GaussianDpEvent(zc), dp_accounting.GaussianDpEvent(zs)])
    if init == "laplace":
        ec, es = count_fraction * eps1, (1.0 - count_fraction) * eps1  # as PrivacyPlan.count/sum_epsilon
        # The sums go through the floating-point-safe dpfed.core.mechanisms.laplace (es-DP); it is charged as
        # the worst es-DP mechanism (Kairouz, Oh & Viswanath 2015), valid whatever its grid.
        return 1.0 / ec, 1.0 / es, accounting.compose([dp_event.DiscreteLaplaceDpEvent(ec, 1),
                                                       accounting.EpsilonDeltaBoundDpEvent(es, 0.0)])
    if init == "zero":
        z = _gaussian_multiplier(eps1, delta)
        return z, 0.0, dp_accounting.GaussianDpEvent(z)
    raise ValueError(f"init must be 'gaussian', 'laplace' or 'zero', got {init!r}")


@shared_cache(maxsize=64)
def _plan_cached(key: str, noise_multiplier: float | None) -> PrivacyPlan:
    p = json.loads(key)
    eps, delta = float(p["epsilon"]), float(p["delta"])
    q, epochs = float(p["sampling_rate"]), float(p["epochs"])
    steps = int(round(epochs / q))
    frac, cf = float(p["init_fraction"]), float(p["count_fraction"])
    if not 0.0 < frac < 1.0:
        raise ValueError(f"init_fraction must lie in (0, 1), got {frac}")
    if not 0.0 < cf < 1.0:
        raise ValueError(f"count_fraction must lie in (0, 1), got {cf}")
    if steps < 1:
        raise ValueError("epochs / sampling_rate must give at least one step")
    zc, zs, init_event = _init_noise(str(p["init"]), frac * eps, delta, cf)
    if noise_multiplier is None:
        noise_multiplier = accounting.calibrate_noise_multiplier(eps, delta, q, steps, extra_event=init_event)
    event = accounting.compose([init_event, accounting.dp_sgd_event(noise_multiplier, q, steps)])
    lap = (frac * eps * cf, frac * eps * (1.0 - cf)) if p["init"] == "laplace" else (0.0, 0.0)
    return PrivacyPlan(steps, float(noise_multiplier), zc, zs, init_event, event, *lap)


def privacy_plan(params: Mapping[str, Any]) -> PrivacyPlan:
    """The job's plan; calibrates sigma (PLD, a few seconds, cached) unless params carry it."""
    full = {**DEFAULTS, **params}
    key = json.dumps({k: full[k] for k in _PLAN_KEYS}, sort_keys=True)
    nm = params.get("noise_multiplier")
    return _plan_cached(key, None if nm is None else float(nm))


def prepare_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Fill in defaults and the calibrated ``noise_multiplier`` (so parties need not calibrate)."""
    out = {**DEFAULTS, **params}
    if out.get("private", True) and not sn.is_secure(out):  # secure jobs: secure_lvq_plan
        out["noise_multiplier"] = privacy_plan(out).noise_multiplier
    return out


@dataclass(frozen=True)
class SecureLVQPlan:
    """A secure job's releases: the initialisation and the T steps, each one distributed discrete
    Gaussian release (module notes), and the whole job's event (RDP)."""

    init: dn.DistributedNoisePlan
    step: dn.DistributedNoisePlan
    count_weight: float      # initialisation rows: [sqrt(cf) e_y, sqrt(1 - cf) s / l2] (norm <= 1)
    sum_weight: float
    event: DpEvent


@per_object()
def secure_lvq_plan(spec: JobSpec) -> SecureLVQPlan:
    """The secure job's plan from its public params (cached per spec object, and by content): the
    initialisation meets init_fraction * epsilon alone, the steps are calibrated so that the whole job
    meets epsilon."""
    p = {**DEFAULTS, **spec.params}
    c, d, ppc, rank, learn = _layout(spec)
    return _secure_plan_cached(json.dumps({k: p[k] for k in (*_PLAN_KEYS, "clip", "init_center", "init_clip",
                                                             "roster", "bits", "min_survivors", "colluders",
                                                             "records", "secure_rounding") if k in p},
                                          sort_keys=True),
                               c, d, ppc, rank, learn)


@shared_cache(maxsize=32)
def _secure_plan_cached(key: str, c: int, d: int, ppc: int, rank: int, learn: bool) -> SecureLVQPlan:
    p = {**DEFAULTS, **json.loads(key)}
    sp = sn.secure_params(p)
    eps, delta = float(p["epsilon"]), float(p["delta"])
    q, steps = float(p["sampling_rate"]), int(round(float(p["epochs"]) / float(p["sampling_rate"])))
    frac, cf = float(p["init_fraction"]), float(p["count_fraction"])
    if not (0 < frac < 1 and 0 < cf < 1 and steps >= 1):
        raise ValueError("need 0 < init_fraction, count_fraction < 1 and epochs / sampling_rate >= 1")
    if p["init"] == "gaussian":
        init_dim, l2 = c + c * d, _init_rows(p, np.zeros((1, d)))[1]
        cw, sw = math.sqrt(cf), math.sqrt(1.0 - cf) / l2
    elif p["init"] == "zero":
        init_dim, cw, sw = c, 1.0, 0.0
    else:
        raise ValueError("under secure aggregation init must be 'gaussian' or 'zero' (Laplace noise does not split)")
    step_dim = c * ppc * d + (rank * d if rank and learn else 0)
    # one encoding for the whole job, chosen by the size of its DP-SGD release
    sp = replace(sp, rounding=sn.resolve_rounding(sp.rounding, step_dim))
    init = sn.calibrate_release(sp, epsilon=frac * eps, delta=delta, clip=1.0, dimension=init_dim, vectors=sp.records)
    step = sn.calibrate_release(sp, epsilon=eps, delta=delta, clip=float(p["clip"]), dimension=step_dim,
                                vectors=sn.batch_bound(sp.records, q), sampling_rate=q, steps=steps,
                                prior=init.event())
    return SecureLVQPlan(init, step, cw, sw, accounting.compose([init.event(), step.event()]))


# ----------------------------------------------------------------------------------- shapes

@per_object()
def _layout(spec: JobSpec) -> tuple[int, int, int, int, bool]:
    """(classes, d, prototypes per class, Omega rank (0 = GLVQ), learn Omega) from the public spec
    (cached per spec object: asked several times per task)."""
    schema = spec.schema
    if schema.categorical.any():
        raise TaskRejected("LVQ needs numeric features with public bounds; the schema has categorical columns")
    if schema.n_classes < 2:
        raise TaskRejected("LVQ needs a schema with at least 2 classes")
    p = {**DEFAULTS, **spec.params}
    d = schema.n_features
    ppc = int(p["prototypes_per_class"])
    if ppc < 1:
        raise TaskRejected("prototypes_per_class must be >= 1")
    rank = 0
    if spec.algorithm == "gmlvq":
        rank = int(p["omega_rank"]) or d
        if not 1 <= rank <= d:
            raise TaskRejected(f"omega_rank must lie in 1..{d}")
    return schema.n_classes, d, ppc, rank, spec.algorithm == "gmlvq"


def _prototype_labels(n_classes: int, ppc: int) -> np.ndarray:
    return np.repeat(np.arange(n_classes, dtype=np.int64), ppc)


def _init_center(p: Mapping[str, Any], d: int) -> np.ndarray:
    """Public centre of the initialisation sums in [-1, 1]^d: the box centre or its lower corner."""
    if p["init_center"] == "mid":
        return np.zeros(d)
    if p["init_center"] == "lower":  # sparse data (e.g. pixels, background at the lower bound)
        return -np.ones(d)
    raise ValueError("init_center must be 'mid' or 'lower'")


def _init_rows(p: Mapping[str, Any], Z: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Records shifted by the public centre and L2-clipped to ``init_clip`` (0: no clipping),
    with the L2 and L1 sensitivities of one record's contribution to the class sums."""
    d = Z.shape[1]
    centre = _init_center(p, d)
    S = Z - centre
    lo, hi = -1.0 - centre, 1.0 - centre  # the box of a shifted record (Z lies in [-1, 1]^d)
    l2, l1 = sum_sensitivity(lo, hi, norm=2), sum_sensitivity(lo, hi, norm=1)
    clip = float(p["init_clip"])
    if clip > 0:
        if p["init"] == "laplace":
            raise ValueError("init_clip applies to the Gaussian initialisation only")
        S = clip_rows_l2(S, clip)[0]
        return S, min(clip, l2), l1
    return S, l2, l1


# ----------------------------------------------------------------------------------- party half

class LVQParty(PartyAlgorithm):
    """Answers ``init`` and ``step`` tasks with clipped, noised sums; each round at most once."""

    def __init__(self) -> None:
        self._last_round: dict[str, int] = {}
        self._jobs: dict[str, tuple[JobSpec, dict[str, Any], PrivacyPlan, tuple[int, int, int, int, bool]]] = {}
        self._scaled: dict[str, tuple[int, np.ndarray]] = {}

    def _job(self, spec: JobSpec) -> tuple[dict[str, Any], PrivacyPlan, tuple[int, int, int, int, bool]]:
        """Params, plan and layout of ``spec`` (cached per job id while the spec is unchanged)."""
        hit = self._jobs.get(spec.job_id)
        if hit is None or hit[0] != spec:
            hit = (spec, {**DEFAULTS, **spec.params}, privacy_plan(spec.params), _layout(spec))
            self._jobs[spec.job_id] = hit
        return hit[1], hit[2], hit[3]

    def _rescaled(self, spec: JobSpec, X: np.ndarray) -> np.ndarray:
        """Records rescaled into [-1, 1]^d, computed once per job for the same array."""
        hit = self._scaled.get(spec.job_id)
        if hit is None or hit[0] != id(X) or hit[1].shape != X.shape:
            hit = (id(X), rescale(X, spec.schema.lower, spec.schema.upper))
            self._scaled[spec.job_id] = hit
        return hit[1]

    def needs_secure_aggregation(self, spec: JobSpec) -> bool:
        """Distributed noise: each answer carries only 1/P of the noise variance."""
        return spec.params.get("noise", DEFAULTS["noise"]) == "distributed"

    def job_event(self, spec: JobSpec) -> DpEvent:
        p = {**DEFAULTS, **spec.params}
        if not p["private"]:
            raise TaskRejected("a non-private LVQ job can only run inside a local estimator, never at a party")
        if p["noise"] not in ("local", "distributed"):
            raise TaskRejected("noise must be 'local' or 'distributed'")
        if not (isinstance(p["clip"], (int, float)) and p["clip"] > 0 and math.isfinite(p["clip"])):
            raise TaskRejected("clip must be a finite number > 0")
        if int(p["parties"]) < 1:
            raise TaskRejected("parties must be >= 1")
        _layout(spec)
        if p["init_center"] not in ("mid", "lower") or not (float(p["init_clip"]) >= 0.0):
            raise TaskRejected("init_center must be 'mid' or 'lower' and init_clip >= 0")
        if p["init"] == "laplace" and float(p["init_clip"]) > 0:
            raise TaskRejected("init_clip applies to the Gaussian initialisation only")
        if sn.is_secure(p):
            try:
                event = secure_lvq_plan(spec).event
                spent = accounting.epsilon(event, spec.delta, accountant="rdp")
            except ValueError as exc:
                raise TaskRejected(f"invalid secure LVQ parameters: {exc}") from None
            if spent > spec.epsilon * (1.0 + 1e-9):
                raise TaskRejected(f"the job's noise gives epsilon {spent:.6g} > its stated epsilon {spec.epsilon:.6g}")
            return event
        try:
            plan = privacy_plan(spec.params)
            spent = accounting.epsilon(plan.event, spec.delta, pld_discretization=accounting.pld_grid(spec.epsilon))
        except ValueError as exc:
            raise TaskRejected(f"invalid LVQ privacy parameters: {exc}") from None
        if spent > spec.epsilon * (1.0 + 1e-9):
            raise TaskRejected(f"the job's noise gives epsilon {spent:.6g} > its stated epsilon {spec.epsilon:.6g}")
        return plan.event

    def task_event(self, spec: JobSpec, task: Task) -> DpEvent | None:
        """Round 0: the initialisation; round t >= 1: one Poisson-subsampled Gaussian step. None for a
        secure-aggregation job, whose rounds the secure session answers (never :meth:`answer`)."""
        if sn.is_secure({**DEFAULTS, **spec.params}):
            return None
        _, plan, _ = self._job(spec)
        if task.round == 0:
            return plan.init_event
        return dp_event.PoissonSampledDpEvent(float({**DEFAULTS, **spec.params}["sampling_rate"]),
                                              dp_event.GaussianDpEvent(plan.noise_multiplier))

    def check_task(self, spec: JobSpec, task: Task) -> None:
        if task.job_id != spec.job_id:
            raise TaskRejected("task belongs to another job")
        p, plan, (c, d, ppc, rank, _) = self._job(spec)
        last = self._last_round.get(spec.job_id, -1)
        if task.round <= last:
            raise TaskRejected(f"round {task.round} was already answered (a repeat would spend budget twice)")
        if task.round > plan.steps:
            raise TaskRejected(f"round {task.round} lies beyond the charged plan of {plan.steps} steps")
        if task.params:
            raise TaskRejected("LVQ tasks take no per-task parameters (everything is fixed by the job)")
        expected_kind = "init" if task.round == 0 else "step"
        if task.kind != expected_kind:
            raise TaskRejected(f"round {task.round} must be a {expected_kind!r} task, got {task.kind!r}")
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
        p, plan, (c, d, ppc, rank, learn_omega) = self._job(spec)
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
        Z = self._rescaled(spec, X)
        self._last_round[spec.job_id] = task.round  # from here on the round counts as answered
        # A class absent here is answered like any other (a count of 0 plus noise): refusing would
        # reveal its absence by the failure itself.
        return Z, y

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        if sn.is_secure({**DEFAULTS, **spec.params}):
            raise TaskRejected("a secure-aggregation job answers only through secure aggregation")
        Z, y = self._checked(spec, task, X, y)
        p, plan, (c, d, ppc, rank, learn_omega) = self._job(spec)
        share = int(p["parties"]) if p["noise"] == "distributed" else 1  # noise shares (1: local noise)
        if task.kind == "init":
            # A class absent here is answered like any other (a count of 0 plus noise): refusing would
            # reveal its absence by the failure itself.
            counts = np.bincount(y, minlength=c).astype(np.int64)
            return self._init_answer(p, plan, Z, y, counts, c, d, share, rng)
        W = np.asarray(task.arrays["prototypes"], dtype=np.float64)
        omega = np.asarray(task.arrays["omega"], dtype=np.float64) if rank else None
        q = float(p["sampling_rate"])
        mask = rng.poisson_mask(len(Z), q)
        g, event = gradient_release(Z[mask], y[mask], W, _prototype_labels(c, ppc), omega, float(p["clip"]),
                                    plan.noise_multiplier, rng, phi=str(p["phi"]), beta=float(p["beta"]),
                                    learn_omega=learn_omega, exact=bool(p["exact_noise"]), parties=share)
        out = {"grad_prototypes": g.prototypes}
        if rank:
            out["grad_omega"] = g.omega
        # the party Poisson-samples its records: the step's release is the subsampled Gaussian
        return Released(out, (dp_event.PoissonSampledDpEvent(q, event),))

    def secure_plan(self, spec: JobSpec, task: Task) -> sn.SecurePlan | None:
        p = {**DEFAULTS, **spec.params}
        if not sn.is_secure(p) or task.kind not in ("init", "step"):
            return None
        plan = secure_lvq_plan(spec)
        c, d, ppc, rank, learn = _layout(spec)
        if task.kind == "init":
            layout = (("counts", (c,)),) + ((("sums", (c, d)),) if p["init"] == "gaussian" else ())
            return sn.SecurePlan(plan.init, layout, sn.rotation_seed(spec.job_id, task.round))
        layout = (("grad_prototypes", (c * ppc, d)),) + ((("grad_omega", (rank, d)),) if rank and learn else ())
        return sn.SecurePlan(plan.step, layout, sn.rotation_seed(spec.job_id, task.round))

    def secure_rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
                    rng: SecureRNG) -> Iterator[np.ndarray]:
        """Initialisation: per record [sqrt(cf) e_y, sqrt(1 - cf) s / l2] (norm <= 1, the Gaussian
        mechanism's count/sum split); steps: per sampled record its clipped joint gradient."""
        if self.secure_plan(spec, task) is None:
            raise TaskRejected("not a secure LVQ task")
        Z, y = self._checked(spec, task, X, y)
        p, _, (c, d, ppc, rank, learn) = self._job(spec)
        plan = secure_lvq_plan(spec)
        chunk = max(1, (1 << 22) // max(1, plan.step.padded_dimension if task.kind == "step" else plan.init.padded_dimension))
        if task.kind == "init":
            S = _init_rows(p, Z)[0] if p["init"] == "gaussian" else None

            def init_rows() -> Iterator[np.ndarray]:
                for a in range(0, len(Z), chunk):
                    yb = y[a:a + chunk]
                    rows = np.zeros((len(yb), c + (c * d if S is not None else 0)))
                    rows[np.arange(len(yb)), yb] = plan.count_weight
                    if S is not None:
                        rows[:, c:].reshape(len(yb), c, d)[np.arange(len(yb)), yb] = S[a:a + chunk] * plan.sum_weight
                    yield rows
            return init_rows()
        W = np.asarray(task.arrays["prototypes"], dtype=np.float64)
        omega = np.asarray(task.arrays["omega"], dtype=np.float64) if rank else None
        mask = rng.poisson_mask(len(Z), float(p["sampling_rate"]))
        Zb, yb = Z[mask], y[mask]

        def step_rows() -> Iterator[np.ndarray]:
            for a in range(0, len(Zb), chunk):
                yield clipped_gradient_rows(Zb[a:a + chunk], yb[a:a + chunk], W, _prototype_labels(c, ppc), omega,
                                            float(p["clip"]), phi=str(p["phi"]), beta=float(p["beta"]),
                                            learn_omega=learn)
        return step_rows()

    def secure_row_sum(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
                       rng: SecureRNG) -> np.ndarray | None:
        """A step's sum of per-record clipped joint gradients for "party" rounding, by ghost clipping
        (:func:`clipped_gradient_sum`, the plain DP-SGD path: no per-record rows), in :meth:`secure_rows`'
        layout; the sampled records are drawn as there. None for the initialisation (its rows are summed)."""
        if self.secure_plan(spec, task) is None:
            raise TaskRejected("not a secure LVQ task")
        if task.kind != "step":
            return None
        Z, y = self._checked(spec, task, X, y)
        p, _, (c, d, ppc, rank, learn) = self._job(spec)
        W = np.asarray(task.arrays["prototypes"], dtype=np.float64)
        omega = np.asarray(task.arrays["omega"], dtype=np.float64) if rank else None
        mask = rng.poisson_mask(len(Z), float(p["sampling_rate"]))
        g = clipped_gradient_sum(Z[mask], y[mask], W, _prototype_labels(c, ppc), omega, float(p["clip"]),
                                 phi=str(p["phi"]), beta=float(p["beta"]), learn_omega=learn)
        parts = [g.prototypes.ravel()] + ([g.omega.ravel()] if rank and learn and g.omega is not None else [])
        return np.concatenate(parts).astype(np.float64, copy=False)

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
        S, l2, l1 = _init_rows(p, Z)
        sums = np.zeros((c, d))
        np.add.at(sums, y, S)
        if init == "gaussian":  # floating-point safe: public grid + exact rounded-Gaussian noise
            rel = gaussian(sums, sensitivity=l2, noise_multiplier=plan.sum_noise, parties=share, rng=rng)
        else:
            # One Laplace mechanism over the whole (c x d) table: a record changes one row by at most l1 in L1.
            rel = laplace(sums, sensitivity=l1, epsilon=plan.sum_epsilon, rng=rng)
        out["sums"] = np.asarray(rel.value)
        return Released(out, (cnt.event, rel.event))


def noisy_gradient_sum(X: np.ndarray, y: np.ndarray, W: np.ndarray, wl: np.ndarray, omega: np.ndarray | None,
                       clip: float, std: float, rng: SecureRNG, *, phi: str = "identity", beta: float = 1.0,
                       learn_omega: bool = True, exact: bool = False) -> GradientSum:
    """:func:`gradient_release` with the noise given as its standard deviation ``std`` (= z C)."""
    return gradient_release(X, y, W, wl, omega, clip, std / clip, rng, phi=phi, beta=beta,
                            learn_omega=learn_omega, exact=exact)[0]


def gradient_release(X: np.ndarray, y: np.ndarray, W: np.ndarray, wl: np.ndarray, omega: np.ndarray | None,
                     clip: float, noise_multiplier: float, rng: SecureRNG, *, phi: str = "identity",
                     beta: float = 1.0, learn_omega: bool = True, exact: bool = False, parties: int = 1
                     ) -> tuple[GradientSum, DpEvent]:
    """One party's DP-SGD release: the clipped gradient sum plus N(0, (z C)^2) on every learned entry
    (1/``parties`` of that variance under distributed noise), and the release's event.

    The noise is one Gaussian mechanism over the concatenated (prototypes, Omega) vector (Omega only
    when it is learned): :func:`dpfed.core.mechanisms.float_gaussian` (ziggurat draws from the
    ChaCha20 keystream), or with ``exact`` :func:`dpfed.core.mechanisms.gaussian` on a public grid.
    """
    g = clipped_gradient_sum(X, y, W, wl, omega, clip, phi=phi, beta=beta, learn_omega=learn_omega)
    k = g.prototypes.size
    with_omega = g.omega is not None and learn_omega
    flat = np.concatenate([g.prototypes.ravel()] + ([g.omega.ravel()] if with_omega else []))
    mech = gaussian if exact else float_gaussian
    rel = mech(flat, sensitivity=clip, noise_multiplier=noise_multiplier, parties=parties, rng=rng)
    noisy = np.asarray(rel.value)
    g.prototypes[...] = noisy[:k].reshape(g.prototypes.shape)
    if with_omega:
        g.omega[...] = noisy[k:].reshape(g.omega.shape)
    return g, rel.event


# ----------------------------------------------------------------------------------- coordinator half

class LVQCoordinator(CoordinatorAlgorithm):
    """Issues the init and T step tasks, aggregates the parties' noisy sums and steps the model."""

    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec = spec
        self.parties = list(parties)
        self.p = {**DEFAULTS, **spec.params}
        self.private = bool(self.p["private"])
        self.c, self.d, self.ppc, self.rank, self.learn_omega = _layout(spec)
        self.secure = sn.is_secure(self.p)
        self.min_survivors = sn.secure_params(self.p).min_survivors if self.secure else len(self.parties)
        self.plan = privacy_plan(spec.params) if self.private and not self.secure else None
        self.init_parties = len(self.parties)
        self.steps = self.plan.steps if self.plan else int(round(float(self.p["epochs"]) / float(self.p["sampling_rate"])))
        self.labels = _prototype_labels(self.c, self.ppc)
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
        if self.secure:  # the survivors of the round (at least min_survivors: SecureGather aborts below)
            if not set(combined.parties) <= set(self.parties) or len(combined.parties) < self.min_survivors:
                raise ValueError(f"a secure round needs at least {self.min_survivors} of the job's parties")
        elif set(combined.parties) != set(self.parties):
            raise ValueError("answers must come from every party of the job")
        a = dict(combined.arrays)
        if task.kind == "init" and self.secure:  # the rows' weights (secure_rows) taken off the decoded sums
            sp = secure_lvq_plan(self.spec)
            a["counts"] = np.asarray(a["counts"]) / sp.count_weight
            if "sums" in a:
                a["sums"] = np.asarray(a["sums"]) / sp.sum_weight
        if task.kind == "init":
            counts = np.asarray(a["counts"], dtype=np.float64)
            self.n_hat = max(float(counts.sum()), 1.0)
            self.init_parties = len(combined.parties)
            if "sums" in a:
                sums = np.asarray(a["sums"], dtype=np.float64)
                means = np.clip(_init_center(self.p, self.d) + sums / np.maximum(counts, 1.0)[:, None], -1.0, 1.0)
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
        lr = float(self.p["lr"]) / (1.0 + float(self.p["lr_decay"]) * (t - 1) / self.steps)
        if self.p["optimizer"] == "adam":
            b1, b2 = (float(b) for b in self.p["adam_betas"])
            if self._m is None:
                self._m, self._v = np.zeros_like(g), np.zeros_like(g)
            self._m = b1 * self._m + (1 - b1) * g
            self._v = b2 * self._v + (1 - b2) * g * g
            upd = (self._m / (1 - b1 ** t)) / (np.sqrt(self._v / (1 - b2 ** t)) + 1e-8)
        elif self.p["optimizer"] == "sgd":
            upd = g
        else:
            raise ValueError("optimizer must be 'sgd' or 'adam'")
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
                               "noise_placement": self.p["noise"] + (
                                   " (secure aggregation)" if self.secure else
                                   " (simulation only: needs secure aggregation)" if self.p["noise"] == "distributed"
                                   else "")}
        if self.secure:
            sp = secure_lvq_plan(self.spec)
            # the central noise of a step's sum from the P_min - c honest shares, in units of the clip norm
            # (comparable with local/float noise's multiplier; the survivors beyond P_min add more)
            z = sp.step.gamma * sp.step.sigma_share * math.sqrt(sp.step.honest_parties) / sp.step.clip
            out.update(sigma_share=sp.step.sigma_share, gamma=sp.step.gamma, init_sigma_share=sp.init.sigma_share,
                       noise_multiplier=z, expected_batch_size=float(self.p["sampling_rate"]) * self.n_hat,
                       init_aborted=self.init_aborted)
        elif self.plan is not None:
            out.update(noise_multiplier=self.plan.noise_multiplier, init_count_noise=self.plan.count_noise,
                       init_sum_noise=self.plan.sum_noise, expected_batch_size=float(self.p["sampling_rate"]) * self.n_hat)
        else:
            out["noise_multiplier"] = 0.0
        return out


def evaluate(model: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray | None, schema: Schema) -> dict[str, float]:
    """Test error and accuracy of a trained LVQ model on labelled records."""
    if y is None:
        raise ValueError("LVQ evaluation needs labels")
    Z = rescale(schema.validate(X, clip_numeric=True), np.asarray(model["lower"]), np.asarray(model["upper"]))
    pred = predict(Z, np.asarray(model["prototypes"]), np.asarray(model["prototype_labels"]),
                   np.asarray(model["omega"]) if "omega" in model else None)
    acc = float(np.mean(pred == np.asarray(y)))
    return {"test_error": 1.0 - acc, "test_accuracy": acc}


# ----------------------------------------------------------------------------------- local driver

def run_local(spec: JobSpec, X: np.ndarray, y: np.ndarray, rng: SecureRNG) -> LVQCoordinator:
    """Drive the same two halves with one party and no ledger (private, or the non-private baseline)."""
    X = spec.schema.validate(X, y)
    private = bool({**DEFAULTS, **spec.params}["private"])
    answer = None
    if not private:
        gen = rng.numpy()
        Z = rescale(X, spec.schema.lower, spec.schema.upper)
        answer = lambda task: _nonprivate_answer(spec, task, Z, y, gen)  # noqa: E731
    coord = drive_local(ALGORITHMS[spec.algorithm], spec, X, y, rng, answer=answer, private=private).coordinator
    assert isinstance(coord, LVQCoordinator)
    return coord


def _nonprivate_answer(spec: JobSpec, task: Task, Z: np.ndarray, y: np.ndarray, gen: np.random.Generator) -> Answer:
    """The party's computation on rescaled records ``Z`` without clipping or noise (baselines only)."""
    p = {**DEFAULTS, **spec.params}
    c, d, ppc, rank, learn_omega = _layout(spec)
    if task.kind == "init":
        sums = np.zeros((c, d))
        np.add.at(sums, y, Z - _init_center(p, d))
        ans: Answer = {"counts": np.bincount(y, minlength=c).astype(np.int64)}
        if p["init"] != "zero":
            ans["sums"] = sums
        return ans
    mask = gen.random(len(Z)) < float(p["sampling_rate"])
    g = clipped_gradient_sum(Z[mask], y[mask], np.asarray(task.arrays["prototypes"]), _prototype_labels(c, ppc),
                             np.asarray(task.arrays["omega"]) if rank else None, None, phi=str(p["phi"]),
                             beta=float(p["beta"]), learn_omega=learn_omega)
    out = {"grad_prototypes": g.prototypes}
    if rank:
        out["grad_omega"] = g.omega
    return out


# ----------------------------------------------------------------------------------- estimators

class _DPLVQBase(EstimatorParams, ClassifierScore):
    """Scikit-learn estimator around the federated halves (one party, same code path)."""

    _algorithm = "glvq"

    def __init__(self, *, epsilon: float | None = 1.0, delta: float = 1e-5, bounds: tuple[Any, Any] | None = None,
                 classes: Sequence[Any] | None = None, epochs: float = 50, sampling_rate: float = 0.01,
                 clip: float = 0.5, init: str = "gaussian", init_fraction: float = 0.2, count_fraction: float = 0.05,
                 init_center: str = "mid", init_clip: float = 0.0,
                 optimizer: str = "sgd", lr: float = 0.05, lr_decay: float = 9.0, prototypes_per_class: int = 1,
                 omega_rank: int = 0, omega_scale: float = 1.0, phi: str = "identity", beta: float = 1.0,
                 private: bool = True, exact_noise: bool = False, random_state: int | None = None) -> None:
        self.epsilon, self.delta, self.bounds, self.classes = epsilon, delta, bounds, classes
        self.epochs, self.sampling_rate, self.clip, self.init = epochs, sampling_rate, clip, init
        self.init_fraction, self.count_fraction, self.optimizer, self.lr = init_fraction, count_fraction, optimizer, lr
        self.init_center, self.init_clip = init_center, init_clip
        self.lr_decay, self.prototypes_per_class, self.omega_rank = lr_decay, prototypes_per_class, omega_rank
        self.omega_scale, self.phi, self.beta, self.private = omega_scale, phi, beta, private
        self.exact_noise, self.random_state = exact_noise, random_state

    def fit(self, X: Any, y: Any) -> "_DPLVQBase":
        """Train on (X, y). Private training needs public ``bounds`` and, ideally, public ``classes``."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-d, got {X.ndim} dimension(s)")
        if len(y) != len(X):
            raise ValueError(f"X has {len(X)} rows but y has {len(y)} labels")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains NaN or infinite values")
        private = bool(self.private) and self.epsilon is not None
        classes = np.unique(y) if self.classes is None else np.asarray(self.classes)
        if len(classes) < 2:
            raise ValueError("need at least 2 classes")
        idx = np.searchsorted(classes, y)
        if np.any(idx >= len(classes)) or np.any(classes[np.minimum(idx, len(classes) - 1)] != y):
            raise ValueError("y contains labels outside `classes`")
        if self.bounds is None:
            if private:
                raise ValueError("private training needs public `bounds=(lower, upper)`; bounds from the data "
                                 "would leak it")
            lo, hi = X.min(0), X.max(0)
            hi = np.where(hi > lo, hi, lo + 1.0)
        else:
            lo = np.broadcast_to(np.asarray(self.bounds[0], dtype=float), (X.shape[1],))
            hi = np.broadcast_to(np.asarray(self.bounds[1], dtype=float), (X.shape[1],))
        schema = Schema.numeric_box(X.shape[1], lo, hi, n_classes=len(classes))
        X = clamp(X, lo, hi)
        params = {k: v for k, v in self.get_params().items()
                  if k not in ("bounds", "classes", "random_state", "epsilon", "delta")}
        params.update(epsilon=float(self.epsilon) if private else 1.0, delta=float(self.delta), private=private,
                      parties=1, noise="local", allow_missing_classes=not private or self.classes is None)
        if private:
            params = prepare_params(params)
        spec = JobSpec(f"estimator-{uuid.uuid4().hex[:12]}", self._algorithm, params, schema)
        rng = SecureRNG() if self.random_state is None else SecureRNG.from_seed(int(self.random_state))
        run = drive_local(ALGORITHMS[self._algorithm], spec, X, idx, rng, private=private, answer=None if private else (
            lambda task, Z=rescale(X, lo, hi), gen=rng.numpy(): _nonprivate_answer(spec, task, Z, idx, gen)))
        model, self.summary_ = run.coordinator.model(), run.coordinator.summary()
        grid = accounting.pld_grid(float(self.epsilon))
        self.epsilon_spent_ = accounting.epsilon(run.event, float(self.delta), pld_discretization=grid) \
            if private else math.inf
        self.classes_ = classes
        self.model_ = model
        scale = 2.0 / (hi - lo)  # z = scale * (x - lo) - 1
        self.prototypes_ = lo + (np.asarray(model["prototypes"]) + 1.0) / scale
        self.prototype_labels_ = classes[np.asarray(model["prototype_labels"])]
        om = np.asarray(model["omega"]) if "omega" in model else None
        self.omega_ = None if om is None else om * scale[None, :]  # acts on original units
        self.n_features_in_ = X.shape[1]
        return self

    def _check_fitted(self, X: Any) -> np.ndarray:
        if not hasattr(self, "model_"):
            raise ValueError(f"this {type(self).__name__} is not fitted yet; call fit first")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(f"X must have {self.n_features_in_} columns")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains NaN or infinite values")
        return X

    def predict(self, X: Any) -> np.ndarray:
        X = self._check_fitted(X)
        return self.prototype_labels_[np.searchsorted(self.classes_, self.prototype_labels_)][
            predict(X, self.prototypes_, np.arange(len(self.prototypes_)), self.omega_)]


class DPGLVQ(_DPLVQBase):
    """Differentially private GLVQ (Euclidean distance), trained by DP-SGD."""

    _algorithm = "glvq"


class DPGMLVQ(_DPLVQBase):
    """Differentially private GMLVQ: learns Omega with relevance matrix Lambda = Omega^T Omega."""

    _algorithm = "gmlvq"

    @property
    def relevance_matrix_(self) -> np.ndarray:
        if getattr(self, "omega_", None) is None:
            raise AttributeError("not fitted")
        return self.omega_.T @ self.omega_


# ----------------------------------------------------------------------------------- registry

#: DP-SGD steps T = epochs / sampling_rate at most (the paper's settings: 5,000).
MAX_STEPS = 100_000
#: Memory estimate of one party's training state: MEMORY_FACTOR copies (model, gradient sums, optimiser
#: moments, per-chunk gradients) of the model's floats, prototypes k*ppc*d plus Omega rank*d.
MEMORY_FACTOR = 16

PARAMS = ParamTable((
    EPSILON, delta_param(1e-5, positive=True),
    Param("epochs", float, DEFAULTS["epochs"], lo=0.0, lo_open=True, hi=10_000.0,
          help="DP-SGD epochs E; T = E / q steps (default 50)"),
    Param("sampling_rate", float, DEFAULTS["sampling_rate"], lo=0.0, lo_open=True, hi=1.0,
          help="Poisson sampling rate q (default 0.01)"),
    Param("clip", float, DEFAULTS["clip"], lo=0.0, lo_open=True, hi=1e6,
          help="per-record gradient clipping norm C (paper: 0.5)"),
    Param("noise", str, DEFAULTS["noise"], choices=("local", "distributed"),
          help="local: full noise per party; distributed: noise shares whose sum carries the central noise "
               "(under secure aggregation, or simulation only without it)"),
    Param("parties", int, DEFAULTS["parties"], lo=1, hi=100_000, help="number of parties (distributed noise)"),
    Param("lr", float, DEFAULTS["lr"], lo=0.0, lo_open=True, hi=100.0, help="learning rate (default 0.05)"),
    Param("lr_decay", float, DEFAULTS["lr_decay"], lo=0.0, hi=1e6,
          help="SGD rate lr / (1 + decay * t / T) (default 9)"),
    Param("optimizer", str, DEFAULTS["optimizer"], choices=("sgd", "adam"), help="optimiser"),
    Param("adam_betas", list, DEFAULTS["adam_betas"], help="Adam's (beta1, beta2), each in [0, 1)"),
    Param("init", str, DEFAULTS["init"], choices=("gaussian", "laplace", "zero"),
          help="prototype initialisation mechanism (paper: laplace)"),
    Param("init_fraction", float, DEFAULTS["init_fraction"], lo=0.0, lo_open=True, hi=1.0, hi_open=True,
          help="epsilon_1 / epsilon (paper: 0.2)"),
    Param("count_fraction", float, DEFAULTS["count_fraction"], lo=0.0, lo_open=True, hi=1.0, hi_open=True,
          help="share of the initialisation budget spent on the class counts"),
    Param("init_center", str, DEFAULTS["init_center"], choices=("mid", "lower"),
          help="public centre of the initialisation sums: box centre, or lower corner (sparse data)"),
    Param("init_clip", float, DEFAULTS["init_clip"], lo=0.0, hi=1e6,
          help="L2-clip the centred records to this norm for the Gaussian initialisation (0: none)"),
    Param("prototypes_per_class", int, DEFAULTS["prototypes_per_class"], lo=1, cap=100,
          help="prototypes per class"),
    Param("omega_rank", int, DEFAULTS["omega_rank"], lo=0, cap=100_000, help="GMLVQ: rows of Omega (0 = full, d)"),
    Param("omega_scale", float, DEFAULTS["omega_scale"], lo=0.0, lo_open=True, hi=1e3,
          help="GMLVQ: Frobenius norm of Omega (sets the clip budget split prototypes/Omega)"),
    Param("phi", str, DEFAULTS["phi"], choices=("identity", "logistic"), help="the GLVQ cost's phi"),
    Param("beta", float, DEFAULTS["beta"], lo=0.0, lo_open=True, hi=1e3, help="slope of the logistic phi"),
    Param("private", bool, DEFAULTS["private"], help="False only inside a local estimator, never at a party"),
    Param("allow_missing_classes", bool, DEFAULTS["allow_missing_classes"],
          help="accepted for compatibility: a party lacking a class always answers (a count of 0 plus noise), "
               "since a refusal would reveal the absence"),
    Param("exact_noise", bool, DEFAULTS["exact_noise"],
          help="DP-SGD noise on a public grid with exact rounded-Gaussian noise (floating-point safe; slower per "
               "step for a full Omega). Initialisation noise is always exact"),
    Param("noise_multiplier", float, None, lo=0.05, hi=1e4, optional=True,
          help="DP-SGD noise multiplier (calibrated from epsilon when absent)"),
    *sn.SECURE_PARAMS,
    sn.SECURE_ROUNDING_PARAM,
), check=lambda p, schema: _check_params(p, schema))


def _check_params(p: dict[str, Any], schema: Schema | None) -> None:
    """Cross-checks: steps and memory caps, Adam's betas, the Laplace initialisation without clipping."""
    steps = int(round(p["epochs"] / p["sampling_rate"]))
    if steps < 1 or steps > MAX_STEPS:
        raise TaskRejected(f"LVQ steps = epochs / sampling_rate = {p['epochs']:g} / {p['sampling_rate']:g} = {steps} "
                           f"must lie in [1, {MAX_STEPS}]")
    betas = p["adam_betas"]
    if not (len(betas) == 2 and all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1
                                    for b in betas)):
        raise TaskRejected("LVQ parameter 'adam_betas' must be two numbers in [0, 1)")
    if p["init"] == "laplace" and p["init_clip"] > 0:
        raise TaskRejected("LVQ parameter 'init_clip' must be 0 with init laplace (it applies to the Gaussian "
                           "initialisation only)")
    if schema is not None and schema.n_features > 0:
        d, k = schema.n_features, max(schema.n_classes, 1)
        rank = min(p["omega_rank"] or d, d)
        floats = k * p["prototypes_per_class"] * d + rank * d
        need = 8 * MEMORY_FACTOR * floats
        if need > MEMORY_CAP_BYTES:
            raise TaskRejected(f"LVQ model of {floats} floats (classes {k} x prototypes_per_class "
                               f"{p['prototypes_per_class']} x d {d} + omega_rank {rank} x d) needs about "
                               f"{need / 2**30:.1f} GiB, more than the cap {MEMORY_CAP_BYTES / 2**30:.0f} GiB")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Command-line options of glvq / gmlvq (shared), typed and ranged from :data:`PARAMS`."""
    def num(flag: str, key: str, **kw: Any) -> None:
        p.add_argument(flag, type=arg_type(PARAMS, key), default=DEFAULTS[key], help=PARAMS.get(key).help, **kw)

    def choice(flag: str, key: str) -> None:
        p.add_argument(flag, choices=PARAMS.get(key).choices, default=DEFAULTS[key], help=PARAMS.get(key).help)

    num("--epochs", "epochs")
    num("--sampling-rate", "sampling_rate")
    num("--clip", "clip")
    choice("--noise", "noise")
    num("--lr", "lr")
    num("--lr-decay", "lr_decay")
    choice("--optimizer", "optimizer")
    choice("--init", "init")
    num("--init-fraction", "init_fraction")
    num("--count-fraction", "count_fraction")
    choice("--init-center", "init_center")
    num("--init-clip", "init_clip")
    num("--prototypes-per-class", "prototypes_per_class")
    num("--omega-rank", "omega_rank")
    num("--omega-scale", "omega_scale")
    choice("--phi", "phi")
    num("--beta", "beta")
    p.add_argument("--allow-missing-classes", action="store_true", help=PARAMS.get("allow_missing_classes").help)
    p.add_argument("--exact-noise", action="store_true", help=PARAMS.get("exact_noise").help)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Job params from the parsed options, with the calibrated noise multiplier."""
    params = {"epochs": args.epochs, "sampling_rate": args.sampling_rate, "clip": args.clip, "noise": args.noise,
              "lr": args.lr, "lr_decay": args.lr_decay, "optimizer": args.optimizer, "init": args.init,
              "init_fraction": args.init_fraction, "count_fraction": args.count_fraction,
              "init_center": args.init_center, "init_clip": args.init_clip,
              "prototypes_per_class": args.prototypes_per_class, "omega_rank": args.omega_rank,
              "omega_scale": args.omega_scale, "phi": args.phi, "beta": args.beta,
              "allow_missing_classes": bool(args.allow_missing_classes), "parties": _n_parties(getattr(args, "parties", 1)),
              "exact_noise": bool(getattr(args, "exact_noise", False))}
    delta = getattr(args, "delta", None)
    PARAMS.validate({**params, "epsilon": args.epsilon, "delta": 1e-5 if delta is None else delta},
                    name=getattr(args, "algorithm", "lvq"))
    full = prepare_params({**params, "epsilon": args.epsilon, "delta": 1e-5 if delta is None else delta})
    return {k: v for k, v in full.items() if k not in ("epsilon", "delta")}


def _n_parties(parties: Any) -> int:
    """``--parties`` is a count in ``dpfed simulate`` and a list of names in ``dpfed job submit``."""
    if isinstance(parties, (list, tuple)):
        return max(len(parties), 1)
    return int(parties or 1)


def _algorithm(name: str) -> Algorithm:
    return Algorithm(name=name, party=LVQParty, coordinator=LVQCoordinator, evaluate=evaluate,
                     add_arguments=add_arguments, params_from_args=params_from_args, default_delta=1e-5)


ALGORITHMS = {"glvq": _algorithm("glvq"), "gmlvq": _algorithm("gmlvq")}
