"""The fitted estimator of a PCA pipeline's model file (``pca+LEARNER``, issue 29 item 3): the released PCA
step projects raw records exactly as the job's evaluation (:func:`.algorithm.project_released`), then the
learner's own estimator, built from the learner's arrays and the projected box schema, predicts and scores.

Not imported by the package's ``__init__`` (this module imports the registry, which imports the package)."""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from dpfed.algorithms.pipeline.algorithm import project_released, released_learner
from dpfed.algorithms.pipeline.spec import PREFIX, split_params
from dpfed.algorithms.registry import get_algorithm
from dpfed.data.schema import Schema

__all__ = ["DPPCAPipeline"]


class DPPCAPipeline:
    """A released ``pca+LEARNER`` model: ``predict`` / ``score`` project first, then ask ``learner_``."""

    @classmethod
    def from_model(cls, model: Mapping[str, np.ndarray], schema: Schema, params: Mapping[str, Any]) -> "DPPCAPipeline":
        """The fitted pipeline of a released model (a model file, :mod:`dpfed.algorithms.model_file`)."""
        name = str(np.asarray(model["pipeline"]))
        if not name.startswith(PREFIX):
            raise ValueError(f"not a PCA pipeline model: {name!r}")
        learner = get_algorithm(name[len(PREFIX):])
        if not learner.estimator:
            raise ValueError(f"the learner {learner.name!r} has no estimator to load its model into")
        module, _, cls_name = learner.estimator.partition(":")
        own, box = released_learner(model, schema)
        est = cls()
        est.model_ = {k: np.asarray(v) for k, v in model.items()}
        est.schema_, est.n_features_in_ = schema, schema.n_features
        est.learner_ = getattr(importlib.import_module(module), cls_name).from_model(
            own, box, split_params(dict(params))[1])
        if hasattr(est.learner_, "classes_"):
            est.classes_ = est.learner_.classes_
        return est

    def transform(self, X: Any) -> np.ndarray:
        """Raw records projected by the released PCA step (clamped to the schema, clipped into the box)."""
        return project_released(self.model_, np.asarray(X, dtype=np.float64), self.schema_)

    def predict(self, X: Any) -> np.ndarray:
        return np.asarray(self.learner_.predict(self.transform(X)))

    def score(self, X: Any, y: Any = None) -> float:
        """The learner's score on the projected records (accuracy, R^2, or minus the k-means inertia)."""
        Xp = self.transform(X)
        return float(self.learner_.score(Xp) if y is None else self.learner_.score(Xp, y))
