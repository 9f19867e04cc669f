"""The random forest's release under distributed noise with secure aggregation.

Each party's answer is its exact integer leaf-count vector (:func:`.model.leaf_counts`) plus one discrete
Gaussian share N_Z(0, sigma_share^2) per entry (Kairouz, Liu & Steinke, ICML 2021, Alg. 1, no rotation or
rounding: the counts are integers already, as naive Bayes sums its statistics); the coordinator sees only the
survivors' sum mod 2^B. One record moves that sum by exactly its own 0/1 vector, T ones: L2 sensitivity
sqrt(T), L1 sensitivity T. The sum carries >= P_min - c honest shares, so the event is
``DistributedDiscreteGaussianDpEvent(sigma_share, P_min - c, sqrt(T), T, T 2^D k)`` (KLS21 Thm. 1 /
Prop. 14), accounted by RDP, sigma_share the smallest meeting (epsilon, delta) by the ledger's own RDP
conversion (:func:`dpfed.core.accounting.calibrate`). The modulus holds ``records`` (every entry of the
noiseless sum is a count <= records) plus the noise of all P shares (:func:`secure_noise.integer_bits`).
"""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.one_release import one_task_plan
from dpfed.algorithms.random_forest.model import leaf_counts
from dpfed.algorithms.random_forest.records import party_records
from dpfed.algorithms.random_forest.plan import TASK_KIND, ForestPlan, job_forest, job_options
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.core import accounting
from dpfed.core.events import DistributedDiscreteGaussianDpEvent
from dpfed.core.memo import shared_cache

__all__ = ["MAX_SIGMA_SHARE", "secure_release", "secure_plan", "secure_rows"]

#: Largest noise share the exact discrete Gaussian sampler is asked for.
MAX_SIGMA_SHARE = float(1 << 26)


def secure_release(spec: JobSpec) -> tuple[ForestPlan, SecurePlan]:
    """The distributed-noise plan of a secure job (module docstring): the :class:`ForestPlan` (mechanism
    ``ddgauss``, ``noise`` = sigma_share, ``noise_var`` the variance of ONE share) and the :class:`SecurePlan`."""
    o = job_options(spec)
    if o.mechanism == "laplace":
        raise ValueError("under secure aggregation the random forest adds discrete Gaussian shares; mechanism "
                         "must be 'auto' or 'gaussian'")
    if spec.delta <= 0:
        raise ValueError("distributed noise needs delta > 0 (discrete Gaussian shares)")
    sp = sn.secure_params(spec.params)
    dim = job_forest(spec).length
    return _calibrated(o.trees, dim, spec.epsilon, spec.delta, sp, spec.job_id)


@shared_cache(maxsize=64)
def _calibrated(trees: int, dim: int, eps: float, delta: float, sp: sn.SecureParams,
                job_id: str) -> tuple[ForestPlan, SecurePlan]:
    l2, l1, h = math.sqrt(trees), float(trees), sp.honest

    def event(sigma: float) -> DistributedDiscreteGaussianDpEvent:
        return DistributedDiscreteGaussianDpEvent(float(sigma), int(h), l2, l1, int(dim))

    sigma = accounting.calibrate(event, eps, delta, accountant="rdp", lo=0.5, hi=MAX_SIGMA_SHARE,
                                 guess=max(1.0, l2 / math.sqrt(h)), rtol=1e-5)
    bits = sn.integer_bits(sp.bits, float(sp.records), sigma, sp.parties, dim)
    noise = sn.integer_noise_plan(sp, sigma_share=sigma, l2=l2, dimension=dim, bits=bits)
    plan = ForestPlan("ddgauss", trees, l2, float(sigma), float(sigma) ** 2, event(sigma))
    return plan, SecurePlan(noise, (("counts", (dim,)),), sn.rotation_seed(job_id, 0), integer=True, l1=l1)


def secure_plan(spec: JobSpec, task: Task) -> SecurePlan | None:
    """The :class:`SecurePlan` of ``task`` (None unless the job is secure and ``task`` is its one task)."""
    return one_task_plan(spec, task, TASK_KIND, secure_release)


def secure_rows(spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None) -> Iterator[np.ndarray]:
    """The party's exact leaf-count vector as one integer row."""
    if secure_plan(spec, task) is None:
        raise TaskRejected("not a secure random forest task")
    X, y = party_records(spec, X, y)
    yield leaf_counts(X, y, job_forest(spec))[None, :]
