"""A GLVQ / GMLVQ job under secure aggregation: its plan, its per-record rows, and the decode.

``noise = "distributed"`` with ``secure_aggregation`` (:mod:`dpfed.algorithms.secure_noise`): every
record's clipped vector is encoded with the distributed discrete Gaussian (Kairouz, Liu & Steinke 2021)
and masked by SecAgg; the noise is planned for P_min survivors and accounted by RDP.

* initialisation: per record ``[sqrt(cf) e_y, sqrt(1 - cf) s / l2]`` (norm <= 1: the Gaussian
  mechanism's count/sum split, ``s`` the centred, clipped record of :func:`dpfed.algorithms.lvq.model.init_rows`);
  the coordinator divides the decoded sums by the two weights (:func:`decode_init`);
* steps: per sampled record its clipped joint gradient (:class:`dpfed.algorithms.lvq.gradient.LVQGradient`
  through the DP-SGD engine, :mod:`dpfed.algorithms.dpsgd`), or with ``secure_rounding = "party"`` the
  party's ghost-clipped sum.

The initialisation meets init_fraction * epsilon alone; the steps are calibrated so that the whole job
meets epsilon. One encoding for the whole job, chosen by the size of its DP-SGD release.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import numpy as np
from dp_accounting import DpEvent

from dpfed.algorithms import dpsgd
from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec, Task
from dpfed.algorithms.lvq.defaults import DEFAULTS
from dpfed.algorithms.lvq.layout import layout
from dpfed.algorithms.lvq.model import init_rows
from dpfed.algorithms.lvq.plan import PLAN_KEYS
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.core import accounting
from dpfed.core import distributed_noise as dn
from dpfed.core.memo import per_object, shared_cache

__all__ = ["SecureLVQPlan", "secure_lvq_plan", "task_plan", "secure_init_rows", "decode_init"]


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
    """The secure job's plan from its public params (cached per spec object, and by content)."""
    p = {**DEFAULTS, **spec.params}
    c, d, ppc, rank, learn = layout(spec)
    return _secure_plan_cached(json.dumps({k: p[k] for k in (*PLAN_KEYS, "clip", "init_center", "init_clip",
                                                             "roster", "bits", "min_survivors", "colluders",
                                                             "records", "secure_rounding") if k in p},
                                          sort_keys=True),
                               c, d, ppc, rank, learn)


@shared_cache(maxsize=32)
def _secure_plan_cached(key: str, c: int, d: int, ppc: int, rank: int, learn: bool) -> SecureLVQPlan:
    p = {**DEFAULTS, **json.loads(key)}
    sp = sn.secure_params(p)
    eps, delta = float(p["epsilon"]), float(p["delta"])
    q, steps = float(p["sampling_rate"]), dpsgd.steps_for(float(p["epochs"]), float(p["sampling_rate"]))
    frac, cf = float(p["init_fraction"]), float(p["count_fraction"])
    if not (0 < frac < 1 and 0 < cf < 1 and steps >= 1):
        raise ValueError("need 0 < init_fraction, count_fraction < 1 and epochs / sampling_rate >= 1")
    if p["init"] == "gaussian":
        init_dim, l2 = c + c * d, init_rows(p, np.zeros((1, d)))[1]
        cw, sw = math.sqrt(cf), math.sqrt(1.0 - cf) / l2
    elif p["init"] == "zero":
        init_dim, cw, sw = c, 1.0, 0.0
    else:
        raise ValueError("under secure aggregation init must be 'gaussian' or 'zero' (Laplace noise does not split)")
    step_dim = c * ppc * d + (rank * d if rank and learn else 0)
    sp = dpsgd.secure_step_params(sp, step_dim)  # one encoding for the whole job
    init = sn.calibrate_release(sp, epsilon=frac * eps, delta=delta, clip=1.0, dimension=init_dim, vectors=sp.records)
    step = dpsgd.secure_step_release(sp, epsilon=eps, delta=delta, clip=float(p["clip"]), dimension=step_dim,
                                     sampling_rate=q, steps=steps, prior=init.event())
    return SecureLVQPlan(init, step, cw, sw, accounting.compose([init.event(), step.event()]))


def task_plan(spec: JobSpec, task: Task) -> SecurePlan | None:
    """The public plan of ``task``'s secure release (noise plan, layout, rotation seed); None when the job
    is not secure or the task is not one of its rounds."""
    p = {**DEFAULTS, **spec.params}
    if not sn.is_secure(p) or task.kind not in ("init", "step"):
        return None
    plan = secure_lvq_plan(spec)
    c, d, ppc, rank, learn = layout(spec)
    if task.kind == "init":
        shapes = (("counts", (c,)),) + ((("sums", (c, d)),) if p["init"] == "gaussian" else ())
        return SecurePlan(plan.init, shapes, sn.rotation_seed(spec.job_id, task.round))
    shapes = (("grad_prototypes", (c * ppc, d)),) + ((("grad_omega", (rank, d)),) if rank and learn else ())
    return SecurePlan(plan.step, shapes, sn.rotation_seed(spec.job_id, task.round))


def secure_init_rows(spec: JobSpec, Z: np.ndarray, y: np.ndarray) -> Iterator[np.ndarray]:
    """The initialisation's per-record rows ``[sqrt(cf) e_y, sqrt(1 - cf) s / l2]`` (norm <= 1), in chunks
    (``[e_y]`` alone for ``init = "zero"``)."""
    p = {**DEFAULTS, **spec.params}
    c, d = layout(spec)[:2]
    plan = secure_lvq_plan(spec)
    S = init_rows(p, Z)[0] if p["init"] == "gaussian" else None
    return _init_row_chunks(plan, S, y, c, d, dpsgd.rows_per_chunk(plan.init.padded_dimension))


def _init_row_chunks(plan: SecureLVQPlan, S: np.ndarray | None, y: np.ndarray, c: int, d: int,
                     chunk: int) -> Iterator[np.ndarray]:
    for a in range(0, len(y), chunk):
        yb = y[a:a + chunk]
        rows = np.zeros((len(yb), c + (c * d if S is not None else 0)))
        rows[np.arange(len(yb)), yb] = plan.count_weight
        if S is not None:
            rows[:, c:].reshape(len(yb), c, d)[np.arange(len(yb)), yb] = S[a:a + chunk] * plan.sum_weight
        yield rows


def decode_init(spec: JobSpec, arrays: Mapping[str, Any]) -> dict[str, Any]:
    """The decoded initialisation sums with the rows' weights taken off (post-processing)."""
    sp = secure_lvq_plan(spec)
    a = dict(arrays)
    a["counts"] = np.asarray(a["counts"]) / sp.count_weight
    if "sums" in a:
        a["sums"] = np.asarray(a["sums"]) / sp.sum_weight
    return a
