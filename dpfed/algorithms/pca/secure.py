"""PCA under distributed noise and secure aggregation: the plan of the two releases, the party's integer
vector of each round as one row, and their decode (the plan's integer :meth:`SecurePlan.decode`).

Every party sends its exact integer vector of the round (:mod:`.plan`) plus one share N_Z(0, sigma_share^2)
of discrete Gaussian noise, mod 2^B, masked by SecAgg; the coordinator learns only the survivors' sum. As
for naive Bayes the per-party encoding is exact: the party's vector is the sum of its records' integer
vectors (each record is rounded to the grid before any product), so adding or removing one record moves the
SecAgg sum by exactly that record's vector v, ||v||_2 <= Delta_2, ||v||_1 <= Delta_1
(:func:`.plan.sensitivities`), and the released sum is KLS21's distributed discrete Gaussian on Z^L with
those sensitivities and >= P_min - c honest shares: ``DistributedDiscreteGaussianDpEvent(sigma_share,
P_min - c, Delta_2, Delta_1, L)``, accounted by RDP. The budget split: round r's share is
sigma_r = c Delta_2,r / sqrt(f_r) (f_0 = ``mean_share``, f_1 = 1 - f_0), c the smallest (to 1e-4) whose
composition of the two events meets (epsilon, delta) by the ledger's RDP accountant.
The modulus: every entry of a round's sum lies in [-records GRID^2, records GRID^2] (``records`` bounds the
total), so B is the fewest bits >= ``bits`` that also hold every share's noise up to a union-bounded tail of
1e-9 over the L entries (a wrong ``records`` costs accuracy through wrap-around, never privacy).
"""
from __future__ import annotations

import json
import math
from typing import Iterator

import numpy as np

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.pca.plan import (ARRAYS, GRID, KINDS, PCAPlan, RoundPlan, geometries, job_options, plan_key,
                                       sensitivities)
from dpfed.algorithms.pca.rounds import check_round, round_geometry
from dpfed.algorithms.pca.statistics import round_vector
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.core import accounting
from dpfed.core.events import DistributedDiscreteGaussianDpEvent
from dpfed.core.memo import shared_cache
from dpfed.data.schema import Schema

__all__ = ["secure_release", "secure_plan", "secure_rows"]


def _events(c: float, sens: list[tuple[float, float, int]], shares: tuple[float, float], honest: int
            ) -> list[DistributedDiscreteGaussianDpEvent]:
    return [DistributedDiscreteGaussianDpEvent(float(c * l2 / math.sqrt(f)), int(honest), l2, l1, dim)
            for (l2, l1, dim), f in zip(sens, shares)]


def _meets(events: list[DistributedDiscreteGaussianDpEvent], eps: float, delta: float) -> bool:
    return accounting.epsilon(accounting.compose(list(events)), delta, accountant="rdp") <= eps


@shared_cache(maxsize=64)
def _secure(schema_json: str, params_json: str, eps: float, delta: float, sp: sn.SecureParams,
            job_id: str) -> tuple[PCAPlan, tuple[SecurePlan, SecurePlan]]:
    params = json.loads(params_json)
    geoms = geometries(Schema.from_json(schema_json), params)
    if delta <= 0:
        raise ValueError("distributed noise needs delta > 0 (discrete Gaussian shares)")
    f = job_options(params).mean_share
    sens = [sensitivities(g, kind) for g, kind in zip(geoms, KINDS)]
    shares = (f, 1.0 - f)
    lo, hi = 0.1, 1.0
    while not _meets(_events(hi, sens, shares, sp.honest), eps, delta):
        lo, hi = hi, 2.0 * hi
        if hi > 2.0 ** 40:
            raise ValueError("no noise meets the target epsilon")
    while hi - lo > 1e-4 * hi:  # the smallest c (to 1e-4) that the ledger's RDP accountant accepts
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if _meets(_events(mid, sens, shares, sp.honest), eps, delta) else (mid, hi)
    events = _events(hi, sens, shares, sp.honest)
    rounds, plans = [], []
    for r, (g, kind, (l2, l1, dim), ev) in enumerate(zip(geoms, KINDS, sens, events)):
        sigma = float(ev.sigma_share)
        bits = sn.integer_bits(sp.bits, sp.records * float(GRID) ** 2, sigma, sp.parties, dim)
        noise = sn.integer_noise_plan(sp, sigma_share=sigma, l2=l2, dimension=dim, bits=bits)
        rounds.append(RoundPlan(kind, g, l2, l1, dim, sigma, ev))
        plans.append(SecurePlan(noise, ((ARRAYS[r], (dim,)),), sn.rotation_seed(job_id, r), integer=True, l1=l1))
    return PCAPlan("ddgauss", (rounds[0], rounds[1]), job_options(params).k), (plans[0], plans[1])


def secure_release(spec: JobSpec) -> tuple[PCAPlan, tuple[SecurePlan, SecurePlan]]:
    """The distributed-noise plan of a secure job (module docstring): the :class:`PCAPlan` (``sigma`` = one
    share) and the integer :class:`SecurePlan` of each round, which both sides use."""
    sp = sn.secure_params(spec.params)
    return _secure(spec.schema.to_json(), plan_key(spec), spec.epsilon, spec.delta, sp, spec.job_id)


def secure_plan(spec: JobSpec, task: Task) -> SecurePlan | None:
    """The :class:`SecurePlan` of ``task`` (None unless the job is secure and ``task`` is one of its rounds)."""
    if not sn.is_secure(spec.params) or task.round not in (0, 1) or task.kind != KINDS[task.round]:
        return None
    return secure_release(spec)[1][task.round]


def secure_rows(spec: JobSpec, task: Task, X: np.ndarray) -> Iterator[np.ndarray]:
    """The party's integer vector of the round as one row (exact: module docstring)."""
    if secure_plan(spec, task) is None:
        raise TaskRejected("not a secure PCA task")
    check_round(spec, task)
    rp = secure_release(spec)[0].rounds[task.round]
    yield round_vector(rp.kind, X, round_geometry(spec, rp, task))[None, :]
