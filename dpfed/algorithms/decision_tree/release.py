"""A decision tree job's plan, chosen once from its public parameters: the local plan (:mod:`.plan`) or the
distributed-noise plan under secure aggregation (:mod:`.secure`)."""
from __future__ import annotations

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.decision_tree.plan import TreePlan, local_plan
from dpfed.algorithms.decision_tree.secure import secure_tree_plan

__all__ = ["plan_release"]


def plan_release(spec: JobSpec) -> TreePlan:
    """The plan for ``spec``, from its public parameters and schema alone (never data)."""
    return secure_tree_plan(spec) if sn.is_secure(spec.params) else local_plan(spec)
