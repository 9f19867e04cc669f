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
rows orthonormal |y_i| <= ||u|| <= C, so the learner's schema is the public box [-C, C]^k (same classes).

Bounds of the projected features: [-C, C] holds every record but is loose by far: C defaults to the box's
diameter (6 on satimage) while the components' standard deviations are 0.03 to 0.11 there, so a learner that
scales its noise (and its variance floor) to the public bounds, as Gaussian naive Bayes does, sees records in
1/20 of its range (pca+naive-bayes 0.36 on satimage at epsilon 4 against 0.70 without PCA). So component i
is clamped to b_i = ``pca_bound`` sqrt(lambda_i) (default 3 standard deviations; lambda_i its variance as the
PCA step released it, public, so b_i costs nothing) and rescaled to fill the box: y'_i = C clip(y_i, +-b_i) /
b_i. The coordinator sends b with every learner task (``pca_bounds``); the party takes any finite b (b_i > C
or b_i <= 0 means C, no rescale), so the box still bounds every record whatever it receives.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.pca.plan import geometries
from dpfed.algorithms.pca.statistics import clipped_records
from dpfed.data.schema import Schema

__all__ = ["PREFIX", "PCA_KEYS", "SHARED_KEYS", "DEFAULT_SHARE", "DEFAULT_BOUND", "split_params", "component_bounds", "pca_spec", "learner_spec",
           "projected_schema", "learner_task", "wrap_task", "check_arrays", "project", "ARRAYS", "ROUNDS"]

PREFIX = "pca+"
PCA_KEYS = ("k", "clip", "mean_clip", "origin", "mean_weight", "mean_share")
SHARED_KEYS = ("noise", "secure_aggregation", "bits", "min_survivors", "colluders", "records", "roster")
DEFAULT_SHARE = 0.25
#: Standard deviations of a projected component inside its public bound (``pca_bound``).
DEFAULT_BOUND = 3.0
#: The arrays that carry the PCA model (and the projected features' bounds) to the parties in every learner task.
ARRAYS = ("pca_center", "pca_components", "pca_bounds")
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


def component_bounds(pca_model: Mapping[str, np.ndarray], bound: float) -> np.ndarray:
    """b_i = ``bound`` sqrt(lambda_i) in the projection's units (module docstring), lambda_i the released
    variance of component i (``explained_variance`` / scale^2); C where that is not a positive number (the
    noise can push a small eigenvalue below 0) or exceeds C."""
    clip = float(np.asarray(pca_model["clip"]))
    lam = np.asarray(pca_model["explained_variance"], dtype=np.float64) / float(np.asarray(pca_model["scale"])) ** 2
    b = bound * np.sqrt(np.maximum(lam, 0.0))
    return np.where(np.isfinite(b) & (b > 0) & (b < clip), b, clip)


def wrap_task(task: Task, pca_model: Mapping[str, np.ndarray], bounds: np.ndarray) -> Task:
    """The pipeline's round for the learner's ``task``: shifted by ROUNDS, carrying the PCA model and the
    projected features' ``bounds``."""
    arrays = {**task.arrays, "pca_center": np.asarray(pca_model["mean"]),
              "pca_components": np.asarray(pca_model["components"]), "pca_bounds": np.asarray(bounds)}
    return Task(task.job_id, task.round + ROUNDS, task.kind, task.params, arrays)


def _finite(a: np.ndarray, shape: tuple[int, ...]) -> bool:
    return a.shape == shape and a.dtype.kind in "iuf" and bool(np.all(np.isfinite(a)))


def check_arrays(spec: JobSpec, task: Task) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The PCA centre (clamped into the public box), components and the projected features' bounds (None
    when the task carries none: the box) of learner round ``task``; TaskRejected for arrays of the wrong
    shape or with non-finite values (nothing else about them matters for privacy)."""
    k, d = int(split_params(spec.params)[0].get("k", 2)), spec.schema.n_features
    center = np.asarray(task.arrays.get("pca_center", np.zeros(0)))
    comps = np.asarray(task.arrays.get("pca_components", np.zeros(0)))
    bounds = task.arrays.get("pca_bounds")
    if not (_finite(center, (d,)) and _finite(comps, (k, d))):
        raise TaskRejected(f"a pipeline learner round needs a finite pca_center ({d}) and pca_components ({k} x {d})")
    if bounds is not None and not _finite(np.asarray(bounds), (k,)):
        raise TaskRejected(f"a pipeline learner round's pca_bounds must be {k} finite numbers")
    return (np.clip(center.astype(np.float64), spec.schema.lower, spec.schema.upper), comps.astype(np.float64),
            None if bounds is None else np.asarray(bounds, dtype=np.float64))


def project(spec: JobSpec, task: Task, X: np.ndarray) -> np.ndarray:
    """The records projected as the learner's round ``task`` says (module docstring), each component clamped
    to its bound b_i and rescaled into the box [-C, C] (b_i outside (0, C) means C: no rescale)."""
    center, comps, bounds = check_arrays(spec, task)
    _, g = geometries(spec.schema, split_params(spec.params)[0])
    U = clipped_records(X, g.at(center))
    b = np.full(len(comps), g.clip) if bounds is None else np.where((bounds > 0) & (bounds < g.clip), bounds, g.clip)
    return np.clip(np.clip(U @ comps.T, -b, b) * (g.clip / b), -g.clip, g.clip)
