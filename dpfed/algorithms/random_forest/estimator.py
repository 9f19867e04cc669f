"""The scikit-learn-style DP random forest (:class:`DPRandomForestClassifier`): both halves on one party."""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.driver import run_local
from dpfed.algorithms.estimator import ClassifierScore, EstimatorParams, SchemaModel, model_arrays
from dpfed.algorithms.random_forest.algorithm import ALGORITHMS
from dpfed.algorithms.random_forest.model import predict_proba
from dpfed.algorithms.random_forest.plan import DEFAULT_ALPHA
from dpfed.algorithms.random_forest.records import party_records
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import DataValidationError, Feature, Schema

__all__ = ["DPRandomForestClassifier", "DataDerivedSchemaWarning"]


class DataDerivedSchemaWarning(UserWarning):
    """The estimator derived bounds and classes from the data: the release is then NOT private."""


class DPRandomForestClassifier(SchemaModel, EstimatorParams, ClassifierScore):
    """Scikit-learn-style DP random decision forest (Jagannathan, Pillaipakkamnatt & Wright 2012) for one array.

    ``schema`` gives the public domains and bounds the trees are drawn from; without one, ``fit`` derives
    all-numeric bounds and the class count from the data and warns (:class:`DataDerivedSchemaWarning`): that
    leaks. ``random_state`` (int) fixes the trees and makes the noise reproducible (simulation only; it warns);
    None draws a fresh public tree seed and uses the secure generator. ``delta`` > 0 allows the Gaussian
    (sensitivity sqrt(T) instead of T for Laplace); ``delta=0`` is pure epsilon-DP. ``records`` is a PUBLIC
    bound on the number of records (a number you may publish, e.g. a registry's size; never counted from ``X``
    here, since the true count of private records is not public); with it and ``max_depth=None`` the automatic
    shape of ``random_forest/depth.py`` applies, as in a federated job: ``n_estimators=None`` (the default) and
    ``max_depth=None`` choose both the trees and the depth, an explicit ``n_estimators`` keeps its trees and
    chooses the depth. Without ``records`` the library defaults (30 trees, depth 8) apply. ``trees_`` and
    ``depth_`` after ``fit`` give the shape used.
    """

    def __init__(self, epsilon: float = 1.0, delta: float = 1e-6, n_estimators: int | None = None,
                 max_depth: int | None = None, schema: Schema | None = None, random_state: int | None = None,
                 mechanism: str = "auto", alpha: float = DEFAULT_ALPHA, features: Sequence[str] | None = None,
                 records: int | None = None) -> None:
        self.epsilon, self.delta, self.n_estimators, self.max_depth = epsilon, delta, n_estimators, max_depth
        self.schema, self.random_state, self.mechanism, self.alpha = schema, random_state, mechanism, alpha
        self.features, self.records = features, records

    def _schema_for(self, X: np.ndarray, y: np.ndarray) -> Schema:
        if self.schema is not None:
            return self.schema
        warnings.warn("DPRandomForestClassifier without a schema: bounds and classes are taken from the data, "
                      "which is NOT differentially private; pass a public schema", DataDerivedSchemaWarning,
                      stacklevel=3)
        Xf = np.asarray(X, dtype=np.float64)
        if Xf.ndim != 2 or not np.isfinite(Xf).all():
            raise DataValidationError("records must be a finite 2-d array")
        lo, hi = Xf.min(axis=0), Xf.max(axis=0)
        return Schema(tuple(Feature(f"x{j}", "numeric", lower=float(lo[j]), upper=float(max(hi[j], lo[j] + 1.0)))
                            for j in range(Xf.shape[1])), n_classes=int(np.max(y)) + 1)

    def fit(self, X: np.ndarray, y: np.ndarray) -> "DPRandomForestClassifier":
        from dpfed.algorithms.params import validate

        schema = self._schema_for(X, y)
        rng = SecureRNG() if self.random_state is None else SecureRNG.from_seed(int(self.random_state))
        seed = int(self.random_state) if self.random_state is not None else int(SecureRNG().integers(1 << 62))
        params = {"epsilon": float(self.epsilon), "delta": float(self.delta), "tree_seed": seed,
                  "mechanism": self.mechanism, "alpha": float(self.alpha)}
        if self.n_estimators is not None:
            params["trees"] = int(self.n_estimators)
        if self.max_depth is not None:
            params["depth"] = int(self.max_depth)
        if self.features is not None:
            params["features"] = list(self.features)
        if self.records is not None:
            params["records"] = int(self.records)
        algo = ALGORITHMS["random-forest"]
        spec = JobSpec("estimator", "random-forest", validate(algo, params, schema), schema)
        Xv = schema.validate(X, y)
        Xv, yv = party_records(spec, Xv, y)
        run = run_local(algo, spec, Xv, yv, rng)
        self._adopt_model(run.coordinator.model(), schema, run.event)
        self.tree_seed_ = seed
        self.depth_ = run.coordinator.forest.depth   # the explicit, automatic (``records``) or default depth
        self.trees_ = run.coordinator.forest.trees   # likewise the number of trees
        return self

    @classmethod
    def from_model(cls, model: Mapping[str, np.ndarray], schema: Schema,
                   params: Mapping[str, Any]) -> "DPRandomForestClassifier":
        """The fitted estimator of a released model (a model file, :mod:`dpfed.algorithms.model_file`): the
        released trees and noisy leaf counts, predicting exactly as :func:`~.model.evaluate` does."""
        depth, features, records = params.get("depth"), params.get("features"), params.get("records")
        trees = params.get("trees")
        est = cls(epsilon=float(params.get("epsilon", 1.0)), delta=float(params.get("delta", 1e-6)),
                  n_estimators=None if trees is None else int(trees), schema=schema,
                  max_depth=None if depth is None else int(depth), mechanism=str(params.get("mechanism", "auto")),
                  alpha=float(params.get("alpha", DEFAULT_ALPHA)), features=None if features is None else list(features),
                  records=None if records is None else int(records))
        est._adopt_model(model_arrays(model), schema)
        est.tree_seed_ = params.get("tree_seed")
        shape = est.model_["leaf_proba"].shape                  # (trees, 2^depth, classes): the shape released
        est.trees_, est.depth_ = int(shape[0]), int(shape[1]).bit_length() - 1
        return est

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return predict_proba(self.model_, self._fitted_records(X))

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.argmax(self.predict_proba(X), axis=1)
