"""Statistics under distributed noise and secure aggregation: the plan of the one release (a
:class:`~.plan.StatsPlan` with mechanism ``ddgauss`` or ``ddlaplace`` and the integer
:class:`~dpfed.algorithms.secure_plan.SecurePlan`), the party's integer vector as its one row.

As for naive Bayes (:mod:`dpfed.algorithms.naive_bayes.secure`, Kairouz, Liu & Steinke ICML 2021): each party
sends its integer statistics vector (:func:`.encode.party_statistics`, exact integers per record, so the
per-party sum is exact) plus one discrete Gaussian share N_Z(0, sigma_share^2), masked by SecAgg; one record
moves the survivors' sum by at most the plan's L2 and L1 (:func:`.plan.sensitivities`: a quantile tree counts
once per level), so the event is
``DistributedDiscreteGaussianDpEvent(sigma_share, P_min - c, L2, L1, L)`` accounted by RDP, sigma_share the
smallest meeting (epsilon, delta). The modulus holds ``records`` x the largest weight plus the noise tail
(:func:`dpfed.algorithms.secure_noise.integer_bits`).

Or the distributed discrete Laplace (:mod:`dpfed.core.distributed_laplace`, mechanism ``ddlaplace``): the local
Laplace's block weights (:mod:`.plan`: whole counts for count blocks, the 2^16 grid for moments) and per-block
scales t_b at e / m per level; each party adds to block b one Polya share NB(1/k, p_b) - NB(1/k, p_b),
p_b = exp(-1 / t_b), k = P_min - c, so the k honest shares alone sum to block b's discrete Laplace (pure
sum_b h_b W_b / t_b <= e, charged ``DiscreteLaplaceDpEvent(e, 1)`` as the local Laplace; e <= epsilon the largest
whose RDP conversion, the secure ledger's, meets (epsilon, delta)); more shares only add independent noise.
``mechanism``: ``laplace`` and ``gaussian`` force one; ``auto`` takes the smaller per-entry noise variance in
records^2 of the first block (m shares: 2 p / (1 - p)^2 / W^2 against m sigma_share^2 / W_g^2: roughly
2 (h / epsilon)^2 against z^2 h for h block levels, so Laplace for jobs of a few statistics, the Gaussian for
many); delta = 0 means Laplace. The modulus holds records x the largest weight plus the tail of all P shares at
the largest scale (:func:`dpfed.core.distributed_laplace.polya_bits`).
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
from dpfed.algorithms.statistics.plan import (GRID, MAX_SIGMA_UNITS, MIN_GRID, TASK_KIND, StatsPlan, block_weights,
                                              job_layout, laplace_scales, level_epsilon, sensitivities)
from dpfed.core import accounting
from dpfed.core import distributed_noise as dn
from dpfed.core.distributed_laplace import PolyaNoisePlan
from dpfed.core.events import DistributedDiscreteGaussianDpEvent
from dpfed.core.polya import polya_share_variance
from dpfed.core.memo import shared_cache

__all__ = ["secure_release", "integer_plan", "gaussian_plan", "laplace_plan", "smallest_sigma", "share_sigma",
           "secure_plan", "secure_rows"]


def secure_release(spec: JobSpec) -> tuple[StatsPlan, SecurePlan]:
    """The distributed-noise plan of a secure statistics job (module docstring)."""
    mech = str(spec.params.get("mechanism", "auto"))
    if mech == "gaussian" and spec.delta <= 0:
        raise ValueError("distributed discrete Gaussian shares need delta > 0; use mechanism 'laplace' or 'auto'")
    layout = job_layout(spec)
    sp = sn.secure_params(spec.params)
    return integer_plan(layout.levels, layout.counts, layout.sizes, spec.epsilon, spec.delta, sp.honest, sp.parties,
                        sp.records, sp.bits, spec.job_id, mech)


@shared_cache(maxsize=64)
def integer_plan(levels: tuple[int, ...], counts: tuple[bool, ...], sizes: tuple[int, ...], eps: float, delta: float,
                 honest: int, parties: int, records: int, floor_bits: int, job_id: str, mech: str = "gaussian"
                 ) -> tuple[StatsPlan, SecurePlan]:
    """The plan of ``mech`` (``auto``: the smaller per-entry variance of the two that fit; module docstring) for
    blocks of ``levels``, ``sizes`` entries and ``counts`` (whole counts: :attr:`.queries.Layout.counts`)."""
    args = (levels, sum(sizes), eps, honest, parties, records, floor_bits, job_id)
    if mech == "laplace" or delta <= 0:
        return laplace_plan(*args, delta, counts, sizes)
    if mech == "gaussian":
        return gaussian_plan(*args, delta)
    lap = laplace_plan(*args, delta, counts, sizes)
    try:
        gauss = gaussian_plan(*args, delta)
    except ValueError:  # epsilon too small for the Gaussian's grid: Laplace is far less noisy there anyway
        return lap
    return lap if lap[0].entry_variance(0) <= gauss[0].entry_variance(0) else gauss


def laplace_plan(levels: tuple[int, ...], dim: int, eps: float, honest: int, parties: int, records: int,
                 floor_bits: int, job_id: str, delta: float, counts: tuple[bool, ...], sizes: tuple[int, ...]
                 ) -> tuple[StatsPlan, SecurePlan]:
    """The distributed discrete Laplace plan: the local Laplace's block weights and per-block scales
    (:mod:`.plan`) at e, ``honest`` Polya shares per block, charged ``DiscreteLaplaceDpEvent(e, 1)``
    (:func:`dpfed.algorithms.secure_noise.integer_laplace_release`)."""
    weights = block_weights(counts)
    l1, l2 = sensitivities(weights, levels)

    def per_block(e: float) -> PolyaNoisePlan:
        scales = laplace_scales(weights, level_epsilon(e, int(sum(levels))))
        return PolyaNoisePlan(max(scales), int(honest), tuple(
            (int(n), t, int(h) * int(w)) for n, t, h, w in zip(sizes, scales, levels, weights, strict=True)))

    polya, noise, event = sn.integer_laplace_release(eps, delta, honest=honest, parties=parties, floor_bits=floor_bits,
                                                     vectors=records, l1=l1, l2=l2, dimension=dim,
                                                     entry_max=records * float(np.max(weights)), polya=per_block)
    scales = tuple(t for _, t, _ in polya.blocks)
    plan = StatsPlan("ddlaplace", weights, int(l1), l2, np.array([float(t) for t in scales]),
                     np.array([polya_share_variance(t, polya.shares) for t in scales]), event, scales)
    return plan, SecurePlan(noise, (("stats", (dim,)),), sn.rotation_seed(job_id, 0), integer=True, l1=float(l1),
                            laplace=polya)


def gaussian_plan(levels: tuple[int, ...], dim: int, eps: float, honest: int, parties: int, records: int,
                  floor_bits: int, job_id: str, delta: float) -> tuple[StatsPlan, SecurePlan]:
    """The distributed discrete Gaussian plan (module docstring)."""
    z = accounting.gaussian_noise_multiplier(eps, delta, rtol=1e-5)  # sets the grid only
    m = int(sum(levels))
    grid = min(GRID, int(MAX_SIGMA_UNITS * math.sqrt(honest) / (2 * z * math.sqrt(m))))
    if grid < MIN_GRID:
        raise ValueError(f"epsilon {eps:g} is too small for a distributed integer release of {m} block levels")
    weights = np.full(len(levels), grid, np.int64)
    l1i, l2 = sensitivities(weights, levels)
    l1 = float(l1i)
    sigma = share_sigma(eps, delta, int(honest), l2, l1, dim)
    event = DistributedDiscreteGaussianDpEvent(float(sigma), int(honest), l2, l1, dim)
    bits = sn.integer_bits(floor_bits, records * float(grid), sigma, parties, dim)
    noise = dn.DistributedNoisePlan(dimension=dim, clip=l2, gamma=1.0, bits=bits, sigma_share=float(sigma),
                                    honest_parties=honest, parties=parties, vectors=records)
    plan = StatsPlan("ddgauss", weights, int(l1), l2, np.full(len(levels), float(sigma)),
                     np.full(len(levels), float(sigma) ** 2), event)
    return plan, SecurePlan(noise, (("stats", (dim,)),), sn.rotation_seed(job_id, 0), integer=True, l1=l1)


@shared_cache(maxsize=64)
def share_sigma(eps: float, delta: float, honest: int, l2: float, l1: float, dim: int) -> float:
    """The smallest share sigma whose ``DistributedDiscreteGaussianDpEvent`` meets (eps, delta) by RDP: the DDGauss
    calibration refined by :func:`smallest_sigma`. A function of public sizes only, not of the job id, so jobs of
    one shape (a daemon's repeated queries, a benchmark's seeds) calibrate once instead of per job."""
    sigma = dn.calibrate_sigma_share(eps, delta, honest_parties=honest, l2_sensitivity=l2, l1_sensitivity=l1,
                                     dimension=dim)
    return smallest_sigma(lambda s: DistributedDiscreteGaussianDpEvent(float(s), honest, l2, l1, dim),
                          float(sigma), eps, delta)


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
