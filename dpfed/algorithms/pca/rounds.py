"""The two rounds of a PCA job as a party checks them (:func:`check_round`) and the geometry of each
(:func:`round_geometry`: round 1 is centred at the noisy mean the coordinator sends)."""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.pca.plan import KINDS, Geometry, RoundPlan

__all__ = ["check_round", "round_geometry"]



def check_round(spec: JobSpec, task: Task) -> None:
    """Refuse (:class:`TaskRejected`) anything but round 0 (the mean, no arrays) and round 1 (the second
    moment, one finite centre of d numbers); the centre is public and any value is safe (the clip bounds
    every record around it)."""
    if task.job_id != spec.job_id:
        raise TaskRejected(f"task is for job {task.job_id!r}, not {spec.job_id!r}")
    if task.round not in (0, 1) or task.kind != KINDS[task.round]:
        raise TaskRejected(f"PCA answers two tasks ({KINDS[0]!r} round 0, {KINDS[1]!r} round 1); got "
                           f"{task.kind!r} round {task.round}")
    want = set() if task.round == 0 else {"center"}
    if task.params or set(task.arrays) != want:
        raise TaskRejected(f"PCA round {task.round} carries {'no arrays' if not want else 'one array, center'} "
                           "and no parameters")
    if task.round == 1:
        c = np.asarray(task.arrays["center"])
        if c.shape != (spec.schema.n_features,) or c.dtype.kind not in "iuf" or not np.all(np.isfinite(c)):
            raise TaskRejected(f"PCA round 1 needs a finite center of {spec.schema.n_features} numbers")


def round_geometry(spec: JobSpec, rp: RoundPlan, task: Task) -> Geometry:
    """Round ``task``'s geometry: round 1's origin is the task's centre clamped into the public box."""
    if task.round == 0:
        return rp.geometry
    c = np.clip(np.asarray(task.arrays["center"], dtype=np.float64), spec.schema.lower, spec.schema.upper)
    return rp.geometry.at(c)
