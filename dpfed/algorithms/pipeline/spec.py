"""A PCA pipeline job (``pca+LEARNER``) split into its two public jobs: the PCA job over the original schema
and the learner's job over the K-dimensional projection, with the budget split between them.

Parameters: the learner's own, plus the PCA step's with the prefix ``pca_`` (``pca_k`` required; ``pca_clip``,
``pca_mean_clip``, ``pca_origin``, ``pca_mean_weight``, ``pca_mean_share``) and ``pca_share`` f (default 0.25):
PCA gets (f epsilon, f delta), the learner ((1 - f) epsilon, (1 - f) delta), so their composition is
(epsilon, delta)-DP by basic composition; the party charges the composition of the two job events (PLD or
RDP, as tight or tighter), which the ledger and the coordinator's offer check verify against the stated
target. The noise mode and the secure-aggregation keys are shared by both steps.

Projection: a record x becomes y = V u, u = (x - m) / s clipped to ||u|| <= C (PCA's round-1 geometry: m the
released mean, s the largest public range, C = ``pca_clip``), V the released k x d components. With V's
rows orthonormal |y_i| <= ||u|| <= C, so the learner's schema is the public box [-C, C]^k (same classes);
the party clamps y into it whatever V it receives (any V is public: the box alone bounds every record).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.pca.plan import geometries
from dpfed.algorithms.pca.statistics import clipped_records
from dpfed.data.schema import Schema

__all__ = ["PREFIX", "PCA_KEYS", "SHARED_KEYS", "DEFAULT_SHARE", "split_params", "pca_spec", "learner_spec",
           "projected_schema", "learner_task", "wrap_task", "check_arrays", "project", "ARRAYS", "ROUNDS"]

PREFIX = "pca+"
PCA_KEYS = ("k", "clip", "mean_clip", "origin", "mean_weight", "mean_share")
SHARED_KEYS = ("noise", "secure_aggregation", "bits", "min_survivors", "colluders", "records", "roster")
DEFAULT_SHARE = 0.25
#: The arrays that carry the PCA model to the parties in every learner task.
ARRAYS = ("pca_center", "pca_components")
#: PCA's rounds come first; the learner's round r is the pipeline's round r + ROUNDS.
ROUNDS = 2


def split_params(params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(PCA params, learner params) of a pipeline job's params (module docstring)."""
    f = float(params.get("pca_share", DEFAULT_SHARE))
    if not 0.0 < f < 1.0:
        raise TaskRejected(f"pipeline parameter 'pca_share' must lie in (0, 1), got {f!r}")
    eps, delta = float(params["epsilon"]), float(params.get("delta", 0.0))
    pca = {k: params[f"pca_{k}"] for k in PCA_KEYS if f"pca_{k}" in params}
    pca.update({k: params[k] for k in SHARED_KEYS if k in params})
    pca.update(epsilon=f * eps, delta=f * delta)
    learner = {k: v for k, v in params.items() if not k.startswith("pca_")}
    learner.update(epsilon=(1.0 - f) * eps, delta=(1.0 - f) * delta)
    return pca, learner


def projected_schema(schema: Schema, pca_params: Mapping[str, Any]) -> Schema:
    """The learner's public schema: the box [-C, C]^k in the PCA's clip units, the same classes."""
    _, g = geometries(schema, pca_params)
    k = int(pca_params.get("k", 2))
    box = Schema.numeric_box(k, -g.clip, g.clip, n_classes=schema.n_classes, prefix="pc")
    return box if schema.target is None else Schema(box.features, target=schema.target)  # a regression target stays


def pca_spec(spec: JobSpec) -> JobSpec:
    return JobSpec(spec.job_id, "pca", split_params(spec.params)[0], spec.schema)


def learner_spec(spec: JobSpec, learner: str) -> JobSpec:
    pca, params = split_params(spec.params)
    return JobSpec(spec.job_id, learner, params, projected_schema(spec.schema, pca))


def learner_task(task: Task) -> Task:
    """The learner's own task inside pipeline round ``task.round`` >= ROUNDS (the PCA arrays removed)."""
    arrays = {k: v for k, v in task.arrays.items() if k not in ARRAYS}
    return Task(task.job_id, task.round - ROUNDS, task.kind, task.params, arrays)


def wrap_task(task: Task, pca_model: Mapping[str, np.ndarray]) -> Task:
    """The pipeline's round for the learner's ``task``: shifted by ROUNDS, carrying the PCA model."""
    arrays = {**task.arrays, "pca_center": np.asarray(pca_model["mean"]),
              "pca_components": np.asarray(pca_model["components"])}
    return Task(task.job_id, task.round + ROUNDS, task.kind, task.params, arrays)


def check_arrays(spec: JobSpec, task: Task) -> tuple[np.ndarray, np.ndarray]:
    """The PCA centre (clamped into the public box) and components of learner round ``task``; TaskRejected
    for arrays of the wrong shape or with non-finite values (nothing else about them matters for privacy)."""
    k, d = int(split_params(spec.params)[0].get("k", 2)), spec.schema.n_features
    center = np.asarray(task.arrays.get("pca_center", np.zeros(0)))
    comps = np.asarray(task.arrays.get("pca_components", np.zeros(0)))
    if center.shape != (d,) or comps.shape != (k, d) or center.dtype.kind not in "iuf" \
            or comps.dtype.kind not in "iuf" or not (np.all(np.isfinite(center)) and np.all(np.isfinite(comps))):
        raise TaskRejected(f"a pipeline learner round needs a finite pca_center ({d}) and pca_components ({k} x {d})")
    return np.clip(center.astype(np.float64), spec.schema.lower, spec.schema.upper), comps.astype(np.float64)


def project(spec: JobSpec, task: Task, X: np.ndarray) -> np.ndarray:
    """The records projected as the learner's round ``task`` says (module docstring), clamped into the box."""
    center, comps = check_arrays(spec, task)
    _, g = geometries(spec.schema, split_params(spec.params)[0])
    U = clipped_records(X, g.at(center))
    return np.clip(U @ comps.T, -g.clip, g.clip)
