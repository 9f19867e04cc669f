"""Naive Bayes under distributed noise and secure aggregation: the plan of the one release (the
:class:`~dpfed.algorithms.naive_bayes.plan.NBPlan` and the :class:`~dpfed.algorithms.secure_plan.SecurePlan`),
the party's integer vector, and its decode (the plan's integer :meth:`SecurePlan.decode`).

Distributed noise under secure aggregation (``noise = "distributed"``, ``secure_aggregation``;
:mod:`dpfed.algorithms.secure_noise`, KLS21). Every party sends its integer statistics vector plus
one share N_Z(0, sigma_share^2) of discrete Gaussian noise, mod 2^B, masked by SecAgg; the
coordinator learns only the survivors' sum. Encoding is per party, and this is exact, not an
approximation of per-record encoding: (i) the party's vector is the sum over its records of each
record's integer vector (counts and histogram cells w_g, S entries round(w x~) in [-w, w], Q entries
round(w x~^2) in [0, w]: integers before any sum, so nothing is rounded after summing and no rotation
is applied); (ii) hence adding or removing one record anywhere moves the SecAgg sum by exactly that
record's integer vector v, with ||v||_2 <= ||w||_2 = Delta_2 and ||v||_1 <= sum_g w_g = Delta_1;
(iii) the released sum is (sum of records' vectors) + (sum of >= P_min - c honest shares unknown to
the coordinator and colluders), which is KLS21 Thm. 1 / Prop. 14's distributed discrete Gaussian
on Z^L (L the vector length) with those sensitivities: the event is
``DistributedDiscreteGaussianDpEvent(sigma_share, P_min - c, Delta_2, Delta_1, L)``, accounted by
RDP, sigma_share the smallest meeting (epsilon, delta). Weights are the Gaussian's (w ∝ a^(1/4)).
The modulus: every entry of the sum lies in [-records w_max, records w_max] when ``records`` bounds
the total, so B is the fewest bits >= ``bits`` that also hold the noise of all P shares up to a
union-bounded tail probability of 1e-9 over the L entries (a wrong ``records`` costs accuracy
through wrap-around, never privacy). The plan is :func:`secure_release`.
"""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.naive_bayes.plan import (MAX_SIGMA_UNITS, MIN_GRID, GRID, TASK_KIND, Layout, NBPlan,
                                               gaussian_multiplier, importance, job_options, optimal_weights)
from dpfed.algorithms.naive_bayes.statistics import party_records, sufficient_statistics
from dpfed.algorithms.one_release import one_task_plan
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.core import distributed_noise as dn
from dpfed.core.memo import shared_cache
from dpfed.data.schema import Schema

__all__ = ["WRAP_PROBABILITY", "secure_release", "integer_secure_plan", "secure_plan", "secure_rows"]

#: Union-bounded probability that the noise of all P shares wraps some entry mod 2^B.
WRAP_PROBABILITY = sn.WRAP_PROBABILITY


def secure_release(spec: JobSpec) -> tuple[NBPlan, SecurePlan]:
    """The distributed-noise plan of a secure job (module docstring): the :class:`NBPlan` (mechanism
    ``ddgauss``, ``noise`` = sigma_share, ``noise_var`` = the variance of ONE share) and the
    :class:`~dpfed.algorithms.secure_noise.SecurePlan` both sides use (integer rows, no rotation)."""
    mech, _, _ = job_options(spec)
    if mech == "laplace":
        raise ValueError("under secure aggregation naive Bayes uses distributed discrete Gaussian shares; "
                         "mechanism must be 'auto' or 'gaussian'")
    if spec.delta <= 0:
        raise ValueError("distributed noise needs delta > 0 (discrete Gaussian shares)")
    sp = sn.secure_params(spec.params)
    return integer_secure_plan(spec.schema.to_json(), spec.epsilon, spec.delta, sp.honest, sp.parties, sp.records, sp.bits,
                   spec.job_id)


@shared_cache(maxsize=64)
def integer_secure_plan(schema_json: str, eps: float, delta: float, honest: int, parties: int, records: int, floor_bits: int,
            job_id: str) -> tuple[NBPlan, SecurePlan]:
    layout = Layout.from_schema(Schema.from_json(schema_json))
    w = optimal_weights(importance(layout), "l2")
    z = gaussian_multiplier(eps, delta)  # the central Gaussian's multiplier: sets the grid only
    grid = min(GRID, int(MAX_SIGMA_UNITS * math.sqrt(honest) / (2 * z * np.sqrt(np.sum(w ** 2)))))
    if grid < MIN_GRID:
        raise ValueError(f"epsilon {eps:g} is too small for a distributed integer release of {layout.n_groups} "
                         "statistic groups")
    weights = np.maximum(np.rint(w * grid), 1).astype(np.int64)
    l2, l1, dim = float(np.sqrt(np.sum(weights.astype(float) ** 2))), float(weights.sum()), int(layout.length)
    sigma, event = sn.integer_release_event(eps, delta, honest=honest, l2=l2, l1=l1, dimension=dim)
    bits = sn.integer_bits(floor_bits, records * float(weights.max()), sigma, parties, dim)
    noise = dn.DistributedNoisePlan(dimension=dim, clip=l2, gamma=1.0, bits=bits, sigma_share=float(sigma),
                                    honest_parties=honest, parties=parties, vectors=records)
    plan = NBPlan("ddgauss", weights, int(l1), l2, float(sigma), float(sigma) ** 2, event)
    return plan, SecurePlan(noise, (("stats", (dim,)),), sn.rotation_seed(job_id, 0), integer=True, l1=l1)


def secure_plan(spec: JobSpec, task: Task) -> SecurePlan | None:
    """The :class:`SecurePlan` of ``task`` (None unless the job is secure and ``task`` is its one task)."""
    return one_task_plan(spec, task, TASK_KIND, secure_release)


def secure_rows(spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None) -> Iterator[np.ndarray]:
    """The party's integer statistics vector as one row: the exact sum of its records' integer
    vectors (per-party encoding is exact here, module docstring)."""
    if secure_plan(spec, task) is None:
        raise TaskRejected("not a secure naive Bayes task")
    layout, X, y = party_records(spec, X, y)
    yield sufficient_statistics(X, y, layout, secure_release(spec)[0].weights)[None, :]
