"""A linear-regression job's one release, chosen once from its public parameters: the local plan
(:mod:`.plan`: every party adds the full noise) or the distributed-noise plan under secure aggregation
(:mod:`.secure`)."""
from __future__ import annotations

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.linear_regression.plan import LRPlan, job_method, local_plan
from dpfed.algorithms.linear_regression.secure import secure_release

__all__ = ["plan_release"]


def plan_release(spec: JobSpec) -> LRPlan:
    """The plan for ``spec``, computed from its public parameters and schema alone (never data)."""
    method = job_method(spec)
    if sn.is_secure(spec.params):
        return secure_release(spec)[0]
    return local_plan(spec.schema.to_json(), spec.epsilon, spec.delta, method)
