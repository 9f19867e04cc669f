"""The private decision tree under distributed noise with secure aggregation.

Each party's answer to round r is its exact integer count vector (:func:`.task.party_vector`) plus one
discrete Gaussian share N_Z(0, sigma_r^2) per entry (Kairouz, Liu & Steinke, ICML 2021, Alg. 1, no rotation or
rounding: the counts are integers already); the coordinator sees only the survivors' sum mod 2^B. Round r's
event is ``DistributedDiscreteGaussianDpEvent(sigma_r, P_min - c, Delta_2,r, Delta_1,r, L_r)`` with the
sensitivities and lengths of :mod:`.plan`; sigma_r = z_r Delta_2,r / sqrt(P_min - c) with z_r = s /
sqrt(share_r) (the same rho shares as the local plan) and the one scale s calibrated by RDP
(:func:`dpfed.core.accounting.calibrate`, the ledger's own conversion) so that the composition of the D + 1
rounds meets the job's (epsilon, delta). The modulus holds ``records`` plus the noise of all P shares.
"""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.decision_tree.plan import Round, TreePlan, job_grid, job_options, round_geometry, schedule, shares
from dpfed.algorithms.decision_tree.task import party_vector, round_of
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.core import accounting
from dpfed.core.events import DistributedDiscreteGaussianDpEvent
from dpfed.core.memo import shared_cache

__all__ = ["MAX_SIGMA_SHARE", "secure_tree_plan", "secure_plan", "secure_rows"]

#: Largest noise share the exact discrete Gaussian sampler is asked for.
MAX_SIGMA_SHARE = float(1 << 26)


def secure_tree_plan(spec: JobSpec) -> TreePlan:
    """The distributed-noise plan of a secure job (module docstring), from public parameters only."""
    o, grid = job_options(spec), job_grid(spec)
    sp = sn.secure_params(spec.params)
    return _calibrated(o.depth, o.leaf_share, grid.features, grid.total, max(1, spec.schema.n_classes),
                       spec.epsilon, spec.delta, sp.honest)


@shared_cache(maxsize=64)
def _calibrated(depth: int, leaf_share: float, features: int, cells: int, k: int, eps: float, delta: float,
                honest: int) -> TreePlan:
    w = shares(depth, leaf_share)
    geo = [round_geometry(r, depth, features, cells, k) for r in range(depth + 1)]

    def events(s: float) -> list[DistributedDiscreteGaussianDpEvent]:
        return [DistributedDiscreteGaussianDpEvent(max(0.5, s / math.sqrt(x) * l2 / math.sqrt(honest)), int(honest),
                                                   l2, l1, int(dim)) for x, (l1, l2, dim) in zip(w, geo)]

    guess = accounting.gaussian_noise_multiplier(eps, delta)
    s = accounting.calibrate(lambda v: accounting.compose(events(v)), eps, delta, accountant="rdp", lo=1e-3,
                             hi=1e6, guess=guess, rtol=1e-5)
    evs = events(s)
    if max(e.sigma_share for e in evs) > MAX_SIGMA_SHARE:
        raise ValueError(f"epsilon {eps:g} is too small for a distributed decision tree (a noise share would leave "
                         "the exact sampler's range)")
    rounds = tuple(Round(kind, l1, l2, dim, s / math.sqrt(x), float(e.sigma_share), e)
                   for kind, x, (l1, l2, dim), e in zip(schedule(depth), w, geo, evs))
    return TreePlan("ddgauss", rounds, accounting.compose(evs))


def secure_plan(spec: JobSpec, task: Task) -> SecurePlan | None:
    """The :class:`SecurePlan` of ``task`` (None unless the job is secure and ``task`` a round of its schedule)."""
    if not sn.is_secure(spec.params):
        return None
    r = round_of(spec, task)
    if r is None:
        return None
    rel = secure_tree_plan(spec).rounds[r]
    sp = sn.secure_params(spec.params)
    bits = sn.integer_bits(sp.bits, float(sp.records), rel.noise, sp.parties, rel.dimension)
    noise = sn.integer_noise_plan(sp, sigma_share=rel.noise, l2=rel.l2, dimension=rel.dimension, bits=bits)
    return SecurePlan(noise, (("counts", (rel.dimension,)),), sn.rotation_seed(spec.job_id, r), integer=True,
                      l1=rel.l1)


def secure_rows(spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None) -> Iterator[np.ndarray]:
    """The party's exact count vector of the round as one integer row."""
    if secure_plan(spec, task) is None:
        raise TaskRejected("not a round of this secure decision tree job")
    yield party_vector(spec, task, X, y)[None, :]
