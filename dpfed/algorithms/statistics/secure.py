"""Statistics under distributed noise and secure aggregation: the plan of the one release (a
:class:`~.plan.StatsPlan` with mechanism ``ddgauss`` and the integer
:class:`~dpfed.algorithms.secure_plan.SecurePlan`), the party's integer vector as its one row.

As for naive Bayes (:mod:`dpfed.algorithms.naive_bayes.secure`, Kairouz, Liu & Steinke ICML 2021): each party
sends its integer statistics vector (:func:`.encode.party_statistics`, exact integers per record, so the
per-party sum is exact) plus one discrete Gaussian share N_Z(0, sigma_share^2), masked by SecAgg; one record
moves the survivors' sum by at most the plan's L2 and L1 (:func:`.plan.sensitivities`: a quantile tree counts
once per level), so the event is
``DistributedDiscreteGaussianDpEvent(sigma_share, P_min - c, L2, L1, L)`` accounted by RDP, sigma_share the
smallest meeting (epsilon, delta). The modulus holds ``records`` x the largest weight plus the noise tail
(:func:`dpfed.algorithms.secure_noise.integer_bits`).
"""
from __future__ import annotations

import math
from typing import Callable, Iterator

import numpy as np
from dp_accounting import DpEvent

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.algorithms.statistics.encode import party_statistics
from dpfed.algorithms.statistics.plan import (GRID, MAX_SIGMA_UNITS, MIN_GRID, TASK_KIND, StatsPlan, job_layout,
                                              sensitivities)
from dpfed.core import accounting
from dpfed.core import distributed_noise as dn
from dpfed.core.events import DistributedDiscreteGaussianDpEvent
from dpfed.core.memo import shared_cache

__all__ = ["secure_release", "integer_plan", "smallest_sigma", "secure_plan", "secure_rows"]


def secure_release(spec: JobSpec) -> tuple[StatsPlan, SecurePlan]:
    """The distributed-noise plan of a secure statistics job (module docstring)."""
    if spec.delta <= 0:
        raise ValueError("distributed noise needs delta > 0 (discrete Gaussian shares)")
    if spec.params.get("mechanism", "auto") == "laplace":
        raise ValueError("under secure aggregation statistics use distributed discrete Gaussian shares; "
                         "mechanism must be 'auto' or 'gaussian'")
    layout = job_layout(spec)
    sp = sn.secure_params(spec.params)
    return integer_plan(layout.levels, layout.length, spec.epsilon, spec.delta, sp.honest, sp.parties, sp.records,
                        sp.bits, spec.job_id)


@shared_cache(maxsize=64)
def integer_plan(levels: tuple[int, ...], dim: int, eps: float, delta: float, honest: int, parties: int, records: int,
                 floor_bits: int, job_id: str) -> tuple[StatsPlan, SecurePlan]:
    z = accounting.gaussian_noise_multiplier(eps, delta, rtol=1e-5)  # sets the grid only
    m = int(sum(levels))
    grid = min(GRID, int(MAX_SIGMA_UNITS * math.sqrt(honest) / (2 * z * math.sqrt(m))))
    if grid < MIN_GRID:
        raise ValueError(f"epsilon {eps:g} is too small for a distributed integer release of {m} block levels")
    weights = np.full(len(levels), grid, np.int64)
    l1i, l2 = sensitivities(weights, levels)
    l1 = float(l1i)
    sigma = dn.calibrate_sigma_share(eps, delta, honest_parties=honest, l2_sensitivity=l2, l1_sensitivity=l1,
                                     dimension=dim)
    sigma = smallest_sigma(lambda s: DistributedDiscreteGaussianDpEvent(float(s), int(honest), l2, l1, dim),
                           float(sigma), eps, delta)
    event = DistributedDiscreteGaussianDpEvent(float(sigma), int(honest), l2, l1, dim)
    bits = sn.integer_bits(floor_bits, records * float(grid), sigma, parties, dim)
    noise = dn.DistributedNoisePlan(dimension=dim, clip=l2, gamma=1.0, bits=bits, sigma_share=float(sigma),
                                    honest_parties=honest, parties=parties, vectors=records)
    plan = StatsPlan("ddgauss", weights, int(l1), l2, float(sigma), float(sigma) ** 2, event)
    return plan, SecurePlan(noise, (("stats", (dim,)),), sn.rotation_seed(job_id, 0), integer=True, l1=l1)


def smallest_sigma(event: Callable[[float], DpEvent], start: float, eps: float, delta: float) -> float:
    """The smallest sigma >= ``start`` (to 1e-6 relative) whose ``event(sigma)`` meets (eps, delta) by the RDP
    conversion the ledger uses (``start``, from the DDGauss calibration, may miss it by a few per cent)."""
    def ok(s: float) -> bool:
        return accounting.epsilon(event(s), delta, accountant="rdp") <= eps

    lo, hi = start, start
    while not ok(hi):
        lo, hi = hi, hi * 1.01
    while hi - lo > 1e-6 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def secure_plan(spec: JobSpec, task: Task) -> SecurePlan | None:
    """The :class:`SecurePlan` of ``task`` (None unless the job is secure and ``task`` is its one task)."""
    if not sn.is_secure(spec.params) or task.kind != TASK_KIND or task.round != 0:
        return None
    return secure_release(spec)[1]


def secure_rows(spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None) -> Iterator[np.ndarray]:
    """The party's integer statistics vector as one row (exact: module docstring)."""
    if secure_plan(spec, task) is None:
        raise TaskRejected("not a secure statistics task")
    yield party_statistics(X, y, job_layout(spec), secure_release(spec)[0].weights, spec.schema)[None, :]
