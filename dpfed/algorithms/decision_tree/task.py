"""A private decision tree round as the party sees it: the check of the coordinator's task against the public
plan (it never trusts the structure it is sent) and the party's exact count vector for it.

A task of round r carries the structure so far, arrays ``feature`` (2^D - 1,) int64 and ``left``
(2^D - 1, widest cells) uint8 (:mod:`.model`), and nothing else. The party checks: the kind is the one the
schedule fixes for round r (:func:`.plan.schedule`); the shapes are exactly those of the planned depth (so
nothing deeper than D and nothing larger than planned); every ``feature`` is -1 or a grid feature; only nodes
above level r split (for the leaves' round: any level < D) and only below a split parent; ``left`` is 0/1 and
0 beyond a node's feature's cells. The sensitivity does not depend on the structure (each record reaches one
node per level whatever the splits); these checks bound the work and refuse a malformed or out-of-plan task.
"""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.decision_tree.grid import cells
from dpfed.algorithms.decision_tree.model import leaf_counts, level_counts
from dpfed.algorithms.decision_tree.plan import LEVEL, job_grid, job_options, schedule
from dpfed.algorithms.random_forest.records import party_records as forest_records

__all__ = ["round_of", "check_task", "structure", "party_vector", "party_records"]


def round_of(spec: JobSpec, task: Task) -> int | None:
    """``task.round`` when it is a round of the job's schedule with the kind fixed for it, else None."""
    kinds = schedule(job_options(spec).depth)
    r = task.round
    if not isinstance(r, (int, np.integer)) or isinstance(r, bool) or not 0 <= int(r) < len(kinds):
        return None
    return int(r) if kinds[int(r)] == task.kind else None


def structure(spec: JobSpec, task: Task) -> tuple[np.ndarray, np.ndarray]:
    """The task's (feature, left) arrays, checked (module docstring); :class:`TaskRejected` with a reason."""
    if task.job_id != spec.job_id:
        raise TaskRejected(f"task is for job {task.job_id!r}, not {spec.job_id!r}")
    r = round_of(spec, task)
    o, grid = job_options(spec), job_grid(spec)
    if r is None:
        raise TaskRejected(f"round {task.round} of this decision tree job is not a {task.kind!r} task (schedule: "
                           f"{o.depth} x {LEVEL!r}, then the leaves)")
    internal = (1 << o.depth) - 1
    if task.params or set(task.arrays) != {"feature", "left"}:
        raise TaskRejected("a decision tree task carries exactly the arrays 'feature' and 'left'")
    feature, left = np.asarray(task.arrays["feature"]), np.asarray(task.arrays["left"])
    if (feature.shape != (internal,) or left.shape != (internal, grid.widest) or feature.dtype.kind not in "iu"
            or left.dtype.kind not in "iub"):
        raise TaskRejected(f"'feature' must be {internal} integers and 'left' {internal} x {grid.widest} 0/1 "
                           "values (the planned depth and grid)")
    feature, left = feature.astype(np.int64), left.astype(np.int64)
    level = np.floor(np.log2(np.arange(internal) + 1)).astype(np.int64)
    split = feature >= 0
    parent_split = np.concatenate([[True], split[(np.arange(1, internal) - 1) // 2]])
    if np.any(feature < -1) or np.any(feature >= grid.features):
        raise TaskRejected(f"'feature' entries must be -1 or a grid feature 0 .. {grid.features - 1}")
    if np.any(split & (level >= r)) or np.any(split & ~parent_split):
        raise TaskRejected(f"round {r} may carry splits only above level {r}, each below a split parent")
    width = np.where(split, grid.sizes[np.maximum(feature, 0)], 0)
    if np.any((left != 0) & (left != 1)) or np.any(left[np.arange(grid.widest)[None, :] >= width[:, None]]):
        raise TaskRejected("'left' must be 0/1, and 0 beyond the cells of the node's feature")
    return feature, left.astype(np.uint8)


check_task = structure


def party_records(spec: JobSpec, X: np.ndarray, y: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The records' grid cells and int64 labels in 0 .. k-1, checked as the forest checks them
    (DataValidationError naming the problem, never a value)."""
    X, labels = forest_records(spec, X, y)
    return cells(X, job_grid(spec)), labels


def party_vector(spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None) -> np.ndarray:
    """The party's exact integer vector of the (checked) task: a level's counts or the leaves' counts."""
    feature, left = structure(spec, task)
    C, labels = party_records(spec, X, y)
    k, r = spec.schema.n_classes, int(task.round)
    if task.kind == LEVEL:
        return level_counts(C, labels, feature, left, r, job_grid(spec), k)
    return leaf_counts(C, labels, feature, left, job_options(spec).depth, k)
