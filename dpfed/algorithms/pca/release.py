"""A PCA job's one release, chosen once from its public parameters: the local plan (:mod:`.plan`: every
party adds the full noise) or the distributed-noise plan under secure aggregation (:mod:`.secure`)."""
from __future__ import annotations

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.pca.plan import PCAPlan, local_plan
from dpfed.algorithms.pca.secure import secure_release

__all__ = ["plan_release"]


def plan_release(spec: JobSpec) -> PCAPlan:
    """The plan for ``spec``, computed from its public parameters and schema alone (never data)."""
    if sn.is_secure(spec.params):
        return secure_release(spec)[0]
    return local_plan(spec)
