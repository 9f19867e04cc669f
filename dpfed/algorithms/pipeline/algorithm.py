"""The registry entry of a PCA pipeline ``pca+LEARNER`` (:func:`compose`), built from the two steps' entries:
its parameter table validates each step's parameters with the step's own table, and its evaluation projects
the held-out records before the learner's own evaluation."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from functools import partial
from typing import Any, Mapping, Sequence

import numpy as np

from dpfed.algorithms.contract import Algorithm, JobSpec, Task, TaskRejected
from dpfed.algorithms.params import Param, ParamTable, table_for
from dpfed.algorithms.pca.options import pca_args
from dpfed.algorithms.pipeline import spec as ps
from dpfed.algorithms.pipeline.coordinator import PipelineCoordinator, pipeline_combine
from dpfed.algorithms.pipeline.party import PipelineParty, SecurePipelineParty
from dpfed.data.schema import Schema

__all__ = ["compose", "PipelineTable", "SHARE", "BOUND", "project_released", "released_learner"]

SHARE = Param("pca_share", float, ps.DEFAULT_SHARE, lo=0.0, lo_open=True, hi=1.0, hi_open=True,
              help=f"share of epsilon and delta for the PCA step of a pipeline (default {ps.DEFAULT_SHARE:g})")
BOUND = Param("pca_bound", float, ps.DEFAULT_BOUND, lo=0.0, lo_open=True, hi=1e6,
              help="a projected component's public bound in its released standard deviations; larger than "
                   f"pca_clip means none (default {ps.DEFAULT_BOUND:g})")


@dataclass(frozen=True)
class PipelineTable(ParamTable):
    """The pipeline's parameters: each step's validated by its own table (the learner's against the
    projected schema), merged back into one flat set."""

    pca: Any = None
    learner: Any = None

    def validate(self, params: Mapping[str, Any], schema: Any = None, name: str = "job") -> dict[str, Any]:
        if not isinstance(params, Mapping):
            raise TaskRejected(f"{name} parameters must be a JSON object")
        if "pca_k" not in params:
            raise TaskRejected(f"{name} needs 'pca_k', the number of principal components")
        share = SHARE.check(params.get("pca_share", ps.DEFAULT_SHARE), name)
        bound = BOUND.check(params.get("pca_bound", ps.DEFAULT_BOUND), name)
        p = {**params, "pca_share": share}
        if "epsilon" not in p:
            raise TaskRejected(f"{name} parameter 'epsilon' is required")
        table_for(self.learner).get("delta").check(p.get("delta", 0.0), name)  # the whole job's delta: its cap too
        pca, learner = ps.split_params(p)
        pca = table_for(self.pca).validate(pca, schema, f"{name} (PCA step)")
        sub = ps.projected_schema(schema, pca) if schema is not None else None
        learner = table_for(self.learner).validate(learner, sub, f"{name} ({self.learner.name} step)")
        out = {**learner, "epsilon": p["epsilon"], "delta": p.get("delta", 0.0), "pca_share": share, "pca_bound": bound}
        out.update({f"pca_{k}": pca[k] for k in ps.PCA_KEYS if k in pca})
        return out


def project_released(model: Mapping[str, np.ndarray], X: np.ndarray, schema: Schema) -> np.ndarray:
    """Held-out records projected with the released PCA step (``pca_center``, ``pca_components``, ``pca_clip``,
    ``pca_bounds``), as a party projects its own."""
    k = np.asarray(model["pca_components"]).shape[0]
    params = {"epsilon": 1.0, "delta": 0.5, "pca_k": k, "pca_clip": float(np.asarray(model["pca_clip"]))}
    spec = JobSpec("evaluate", str(np.asarray(model.get("pipeline", ps.PREFIX))), params, schema)
    arrays = {key: np.asarray(model[key]) for key in ps.ARRAYS if key in model}  # no pca_bounds: an older model
    task = Task("evaluate", ps.ROUNDS, "evaluate", arrays=arrays)
    return ps.project(spec, task, schema.validate(X, clip_numeric=True))


def released_learner(model: Mapping[str, np.ndarray], schema: Schema) -> tuple[dict[str, np.ndarray], Schema]:
    """The learner's own arrays of a released pipeline model and its public schema (the projected box)."""
    k = np.asarray(model["pca_components"]).shape[0]
    clip = float(np.asarray(model["pca_clip"]))
    own = {key: v for key, v in model.items() if not key.startswith("pca_") and key != "pipeline"}
    box = Schema.numeric_box(k, -clip, clip, n_classes=schema.n_classes, prefix="pc")
    return own, box if schema.target is None else Schema(box.features, target=schema.target)


def _evaluate(learner: Algorithm, model: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray | None,
              schema: Schema) -> dict[str, float]:
    """Project the held-out records with the released PCA (as a party does) and evaluate the learner."""
    own, box = released_learner(model, schema)
    return learner.evaluate(own, project_released(model, X, schema), y, box)


def _params_from_args(learner: Algorithm, args: argparse.Namespace) -> dict[str, Any]:
    """The learner's options (calibrated for its share of the budget) plus the PCA step's ``pca_*``."""
    share = getattr(args, "pca_share", None) or ps.DEFAULT_SHARE
    out: dict[str, Any] = {"pca_share": share}
    if getattr(args, "pca_bound", None) is not None:
        out["pca_bound"] = args.pca_bound
    if learner.params_from_args is not None:
        ns = vars(args).copy()
        if getattr(args, "epsilon", None) is not None:
            ns["epsilon"] = (1.0 - share) * args.epsilon
        if getattr(args, "delta", None) is not None:
            ns["delta"] = (1.0 - share) * args.delta
        elif getattr(args, "epsilon", None) is not None:
            ns["delta"] = (1.0 - share) * learner.default_delta
        out.update(learner.params_from_args(argparse.Namespace(**ns)))
    out.update({f"pca_{k}": v for k, v in pca_args(args).items()})
    return out


def _coordinator(pca: Algorithm, learner: Algorithm, spec: JobSpec, parties: Sequence[str]) -> PipelineCoordinator:
    return PipelineCoordinator(pca, learner, spec, parties)


def compose(pca: Algorithm, learner: Algorithm) -> Algorithm:
    """The entry ``pca+LEARNER`` (module docstring); ValueError for a learner that cannot follow PCA."""
    if learner.name == "pca" or learner.name.startswith(ps.PREFIX):
        raise ValueError("a PCA pipeline takes one learner other than pca")
    secure = partial(SecurePipelineParty, pca, learner) if pca.secure is not None and learner.secure is not None \
        else None
    return Algorithm(name=ps.PREFIX + learner.name, party=partial(PipelineParty, pca, learner),
                     coordinator=partial(_coordinator, pca, learner), evaluate=partial(_evaluate, learner),
                     params_from_args=partial(_params_from_args, learner), default_delta=learner.default_delta,
                     needs_labels=learner.needs_labels, label_kind=learner.label_kind, combine=partial(pipeline_combine, pca, learner),
                     params=PipelineTable((SHARE, BOUND), pca=pca, learner=learner), secure=secure,
                     estimator="dpfed.algorithms.pipeline.estimator:DPPCAPipeline" if learner.estimator else None)
