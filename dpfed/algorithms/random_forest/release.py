"""A random forest job's one release, chosen once from its public parameters: the local plan (:mod:`.plan`)
or the distributed-noise plan under secure aggregation (:mod:`.secure`)."""
from __future__ import annotations

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.random_forest.plan import ForestPlan, job_forest, job_options, local_plan
from dpfed.algorithms.random_forest.secure import secure_release

__all__ = ["plan_release"]


def plan_release(spec: JobSpec) -> ForestPlan:
    """The plan for ``spec``, from its public parameters and schema alone (never data)."""
    o = job_options(spec)
    job_forest(spec)  # the structure must be drawable (a usable feature, a labelled schema)
    if sn.is_secure(spec.params):
        return secure_release(spec)[0]
    return local_plan(o.trees, spec.epsilon, spec.delta, o.mechanism)
