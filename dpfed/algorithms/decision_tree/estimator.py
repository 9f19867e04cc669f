"""The scikit-learn-style private decision tree (:class:`DPDecisionTreeClassifier`): both halves on one party."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.decision_tree.algorithm import ALGORITHMS
from dpfed.algorithms.decision_tree.model import predict_proba
from dpfed.algorithms.decision_tree.plan import DEFAULT_ALPHA, DEFAULT_BINS, DEFAULT_LEAF_SHARE
from dpfed.algorithms.driver import run_local
from dpfed.algorithms.estimator import ClassifierScore, EstimatorParams, SchemaModel, model_arrays
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import DataValidationError, Schema

__all__ = ["DPDecisionTreeClassifier"]


class DPDecisionTreeClassifier(SchemaModel, EstimatorParams, ClassifierScore):
    """Scikit-learn-style private decision tree (Friedman & Schuster 2010, noisy counts; :mod:`.plan`) for one
    array. ``schema`` (required) gives the public bounds and domains the candidate splits come from: splits
    from the data would leak. ``delta`` must be > 0 (Gaussian noise). ``random_state`` (int) makes the noise
    reproducible (simulation only; it warns); None uses the secure generator. ``records`` is a PUBLIC bound on
    the number of records (never counted from ``X``: the true count is not public); with it and
    ``max_depth=None`` the automatic depth of ``decision_tree/depth.py`` applies, as in a federated job;
    ``max_depth=None`` without ``records`` is the library default depth. ``depth_`` is the depth fitted."""

    def __init__(self, epsilon: float = 1.0, delta: float = 1e-6, max_depth: int | None = None,
                 bins: int = DEFAULT_BINS, leaf_share: float = DEFAULT_LEAF_SHARE, alpha: float = DEFAULT_ALPHA,
                 schema: Schema | None = None, random_state: int | None = None,
                 features: Sequence[str] | None = None, records: int | None = None) -> None:
        self.epsilon, self.delta, self.max_depth, self.bins = epsilon, delta, max_depth, bins
        self.leaf_share, self.alpha, self.schema, self.random_state = leaf_share, alpha, schema, random_state
        self.features, self.records = features, records

    def _params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"epsilon": float(self.epsilon), "delta": float(self.delta), "bins": int(self.bins),
                             "leaf_share": float(self.leaf_share), "alpha": float(self.alpha)}
        if self.max_depth is not None:
            p["depth"] = int(self.max_depth)
        if self.features is not None:
            p["features"] = list(self.features)
        if self.records is not None:
            p["records"] = int(self.records)
        return p

    def fit(self, X: np.ndarray, y: np.ndarray) -> "DPDecisionTreeClassifier":
        from dpfed.algorithms.params import validate

        if self.schema is None:
            raise DataValidationError("DPDecisionTreeClassifier needs a public schema (bounds, domains, classes): "
                                      "candidate splits taken from the data are not private")
        schema = self.schema
        rng = SecureRNG() if self.random_state is None else SecureRNG.from_seed(int(self.random_state))
        algo = ALGORITHMS["decision-tree"]
        spec = JobSpec("estimator", "decision-tree", validate(algo, self._params(), schema), schema)
        run = run_local(algo, spec, schema.validate(X, y), np.asarray(y), rng)
        self._adopt_model(run.coordinator.model(), schema, run.event)
        self.depth_ = run.coordinator.options.depth   # the explicit, automatic (``records``) or default depth
        return self

    @classmethod
    def from_model(cls, model: Mapping[str, np.ndarray], schema: Schema,
                   params: Mapping[str, Any]) -> "DPDecisionTreeClassifier":
        """The fitted estimator of a released model (a model file): predicts exactly as :func:`~.model.evaluate`."""
        feats, depth, records = params.get("features"), params.get("depth"), params.get("records")
        est = cls(epsilon=float(params.get("epsilon", 1.0)), delta=float(params.get("delta", 1e-6)),
                  max_depth=None if depth is None else int(depth), bins=int(params.get("bins", DEFAULT_BINS)),
                  leaf_share=float(params.get("leaf_share", DEFAULT_LEAF_SHARE)),
                  alpha=float(params.get("alpha", DEFAULT_ALPHA)), schema=schema,
                  features=None if feats is None else list(feats), records=None if records is None else int(records))
        est._adopt_model(model_arrays(model), schema)
        est.depth_ = int(len(est.model_["feature"]) + 1).bit_length() - 1
        return est

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return predict_proba(self.model_, self._fitted_records(X))

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.argmax(self.predict_proba(X), axis=1)
