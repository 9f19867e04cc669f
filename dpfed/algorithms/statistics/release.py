"""A statistics job's one release, chosen once from its public parameters: the local plan (:mod:`.plan`:
every party adds the full noise) or the distributed-noise plan under secure aggregation (:mod:`.secure`)."""
from __future__ import annotations

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.statistics.plan import MECHANISMS, StatsPlan, job_layout, local_plan
from dpfed.algorithms.statistics.secure import secure_release

__all__ = ["plan_release"]


def plan_release(spec: JobSpec) -> StatsPlan:
    """The plan for ``spec``, computed from its public parameters and schema alone (never data)."""
    mech = str(spec.params.get("mechanism", "auto"))
    if mech not in MECHANISMS:
        raise ValueError(f"statistics mechanism must be one of {', '.join(MECHANISMS)}, got {mech!r}")
    if sn.is_secure(spec.params):
        return secure_release(spec)[0]
    layout = job_layout(spec)
    return local_plan(layout.levels, layout.counts, spec.epsilon, spec.delta, mech)
