"""A logistic-regression / linear-SVM job under secure aggregation: its plan, its per-record rows.

``noise = "distributed"`` with ``secure_aggregation`` (:mod:`dpfed.algorithms.secure_noise`): every
record's clipped vector is encoded with the distributed discrete Gaussian (Kairouz, Liu & Steinke 2021)
and masked by SecAgg; the noise is planned for P_min survivors and accounted by RDP.

* count (round 0): per record the row ``[1]`` (norm 1), the sum is the number of records; it meets
  ``count_fraction * epsilon`` alone;
* steps: per sampled record its clipped gradient (:class:`dpfed.algorithms.linear_models.gradient.LinearGradient`
  through the DP-SGD engine), or with ``secure_rounding = "party"`` the party's ghost-clipped sum;
  calibrated so that the whole job meets epsilon (:func:`dpfed.algorithms.dpsgd.secure_step_release`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator

import numpy as np
from dp_accounting import DpEvent

from dpfed.algorithms import dpsgd
from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec, Task
from dpfed.algorithms.linear_models.defaults import DEFAULTS
from dpfed.algorithms.linear_models.layout import layout
from dpfed.algorithms.linear_models.plan import PLAN_KEYS
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.core import accounting
from dpfed.core import distributed_noise as dn
from dpfed.core.memo import per_object, shared_cache

__all__ = ["SecureLinearPlan", "secure_linear_plan", "task_plan", "count_rows"]


@dataclass(frozen=True)
class SecureLinearPlan:
    """A secure job's releases: the count and the T steps, and the whole job's event (RDP)."""

    count: dn.DistributedNoisePlan
    step: dn.DistributedNoisePlan
    event: DpEvent


@per_object()
def secure_linear_plan(spec: JobSpec) -> SecureLinearPlan:
    """The secure job's plan from its public params (cached per spec object, and by content)."""
    p = {**DEFAULTS, **spec.params}
    _, _, k, dp1 = layout(spec)
    keys = (*PLAN_KEYS, "clip", "roster", "bits", "min_survivors", "colluders", "records", "secure_rounding")
    return _secure_plan_cached(json.dumps({key: p[key] for key in keys if key in p}, sort_keys=True), k * dp1)


@shared_cache(maxsize=32)
def _secure_plan_cached(key: str, step_dim: int) -> SecureLinearPlan:
    p = {**DEFAULTS, **json.loads(key)}
    sp = sn.secure_params(p)
    eps, delta, cf = float(p["epsilon"]), float(p["delta"]), float(p["count_fraction"])
    q = float(p["sampling_rate"])
    steps = dpsgd.steps_for(float(p["epochs"]), q)
    if not (0 < cf < 1 and steps >= 1):
        raise ValueError("need 0 < count_fraction < 1 and epochs / sampling_rate >= 1")
    sp = dpsgd.secure_step_params(sp, step_dim)  # one encoding for the whole job
    count = sn.calibrate_release(sp, epsilon=cf * eps, delta=delta, clip=1.0, dimension=1, vectors=sp.records)
    step = dpsgd.secure_step_release(sp, epsilon=eps, delta=delta, clip=float(p["clip"]), dimension=step_dim,
                                     sampling_rate=q, steps=steps, prior=count.event())
    return SecureLinearPlan(count, step, accounting.compose([count.event(), step.event()]))


def task_plan(spec: JobSpec, task: Task) -> SecurePlan | None:
    """The public plan of ``task``'s secure release; None when the job is not secure or the task is not one
    of its rounds."""
    if not sn.is_secure({**DEFAULTS, **spec.params}) or task.kind not in ("count", "step"):
        return None
    plan = secure_linear_plan(spec)
    if task.kind == "count":
        return SecurePlan(plan.count, (("count", (1,)),), sn.rotation_seed(spec.job_id, task.round))
    _, _, k, dp1 = layout(spec)
    return SecurePlan(plan.step, (("grad", (k, dp1)),), sn.rotation_seed(spec.job_id, task.round))


def count_rows(n: int, chunk: int) -> Iterator[np.ndarray]:
    """The count's per-record rows ``[1]``, ``chunk`` records at a time."""
    for a in range(0, n, chunk):
        yield np.ones((min(chunk, n - a), 1))
