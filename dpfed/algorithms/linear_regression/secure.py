"""Linear regression under distributed noise and secure aggregation (AdaSSP only): the plan of the one
release, the party's integer vector as one row, and the decode (the integer :meth:`SecurePlan.decode`).

As naive Bayes' statistics vector (:mod:`dpfed.algorithms.naive_bayes.secure`, KLS21): every party sends its
integer vector (:func:`.statistics.sufficient_statistics`, no noise of its own) plus one share
N_Z(0, sigma_share^2) of discrete Gaussian noise, mod 2^B, masked by SecAgg; the coordinator learns only the
survivors' sum. One record moves only its own party's vector, by at most the plan's L2 and L1 sensitivities
(:func:`.plan.sensitivities`; lambda_min of the party's own matrix included: the sum of the parties'
lambda_min is a lower bound of the whole matrix's, by Weyl's inequality, which is all AdaSSP needs of it), so
the release is ``DistributedDiscreteGaussianDpEvent(sigma_share, P_min - c, Delta_2, Delta_1, L)``, sigma_share
the smallest meeting (epsilon, delta) by RDP. The modulus: every entry of the sum lies within
``records`` x max W_g (plus the lambda_min entry, as large), and B is the fewest bits >= ``bits`` that also
hold the noise of all shares (a wrong ``records`` costs accuracy through wrap-around, never privacy).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.linear_regression.plan import TASK_KIND, Layout, LRPlan, integer_weights, job_method, sensitivities
from dpfed.algorithms.linear_regression.statistics import party_records, sufficient_statistics
from dpfed.algorithms.one_release import one_task_plan
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.core import distributed_noise as dn
from dpfed.core.memo import shared_cache
from dpfed.data.schema import Schema

__all__ = ["secure_release", "integer_secure_plan", "secure_plan", "secure_rows"]


def secure_release(spec: JobSpec) -> tuple[LRPlan, SecurePlan]:
    """The distributed-noise plan of a secure job: the :class:`LRPlan` (``noise`` = sigma_share, ``noise_var``
    = ONE share's variance) and the integer :class:`SecurePlan` both sides use."""
    if job_method(spec) != "adassp":
        raise ValueError("under secure aggregation linear regression adds discrete Gaussian shares: method must be "
                         "adassp (the functional mechanism is Laplace noise)")
    sp = sn.secure_params(spec.params)
    return integer_secure_plan(spec.schema.to_json(), spec.epsilon, spec.delta, sp.honest, sp.parties, sp.records,
                               sp.bits, spec.job_id)


def integer_secure_plan(schema_json: str, eps: float, delta: float, honest: int, parties: int, records: int,
                        floor_bits: int, job_id: str) -> tuple[LRPlan, SecurePlan]:
    """The plan of :func:`secure_release` (the noise calibrated once per public setting, the job's seed added)."""
    plan, noise = _calibrated(schema_json, eps, delta, honest, parties, records, floor_bits)
    return plan, SecurePlan(noise, (("stats", (noise.dimension,)),), sn.rotation_seed(job_id, 0), integer=True,
                            l1=plan.l1)


@shared_cache(maxsize=64)
def _calibrated(schema_json: str, eps: float, delta: float, honest: int, parties: int, records: int,
                floor_bits: int) -> tuple[LRPlan, dn.DistributedNoisePlan]:
    layout = Layout.from_schema(Schema.from_json(schema_json), "adassp")
    weights = integer_weights(True)
    l2, l1 = sensitivities(layout, weights)
    dim = layout.length
    sigma, event = sn.integer_release_event(eps, delta, honest=honest, l2=l2, l1=l1, dimension=dim)
    bits = sn.integer_bits(floor_bits, records * float(max(weights.values())), sigma, parties, dim)
    noise = dn.DistributedNoisePlan(dimension=dim, clip=l2, gamma=1.0, bits=bits, sigma_share=float(sigma),
                                    honest_parties=honest, parties=parties, vectors=records)
    return LRPlan("ddgauss", weights, l2, l1, float(sigma), float(sigma) ** 2, event), noise


def secure_plan(spec: JobSpec, task: Task) -> SecurePlan | None:
    """The :class:`SecurePlan` of ``task`` (None unless the job is secure and ``task`` is its one task)."""
    return one_task_plan(spec, task, TASK_KIND, secure_release)


def secure_rows(spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None) -> Iterator[np.ndarray]:
    """The party's integer statistics vector as one row (exact: a sum of integers, no noise of its own)."""
    if secure_plan(spec, task) is None:
        raise TaskRejected("not a secure linear-regression task")
    X, yv = party_records(spec, X, y)
    plan = secure_release(spec)[0]
    yield sufficient_statistics(X, yv, Layout.from_schema(spec.schema, "adassp"), plan.weights)[None, :]
