"""The scikit-learn-style DP naive Bayes estimator (:class:`DPNaiveBayes`): both halves on one party."""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.driver import run_local
from dpfed.algorithms.estimator import ClassifierScore, EstimatorParams, SchemaModel, model_arrays
from dpfed.algorithms.naive_bayes.algorithm import ALGORITHMS
from dpfed.algorithms.naive_bayes.model import joint_log_likelihood
from dpfed.algorithms.naive_bayes.plan import DEFAULT_ALPHA, DEFAULT_VAR_FLOOR
from dpfed.algorithms.naive_bayes.statistics import check_labels
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import DataValidationError, Feature, Schema

__all__ = ["DPNaiveBayes", "DataDerivedSchemaWarning"]


class DataDerivedSchemaWarning(UserWarning):
    """The estimator derived bounds and classes from the data: the release is then NOT private."""


class DPNaiveBayes(SchemaModel, EstimatorParams, ClassifierScore):
    """Scikit-learn-style DP naive Bayes for one array: the party and coordinator halves, one party.

    ``schema`` gives the public domains and bounds; without one, ``fit`` derives all-numeric bounds
    and the class count from the data and warns (:class:`DataDerivedSchemaWarning`): that leaks.
    ``random_state`` (int) makes the noise reproducible (simulation only; it warns), None is secure.
    """

    def __init__(self, epsilon: float = 1.0, delta: float = 0.0, schema: Schema | None = None,
                 random_state: int | None = None, mechanism: str = "auto", alpha: float = DEFAULT_ALPHA,
                 var_floor: float = DEFAULT_VAR_FLOOR) -> None:
        self.epsilon, self.delta, self.schema, self.random_state = epsilon, delta, schema, random_state
        self.mechanism, self.alpha, self.var_floor = mechanism, alpha, var_floor

    def _schema_for(self, X: np.ndarray, y: np.ndarray) -> Schema:
        if self.schema is not None:
            return self.schema
        warnings.warn("DPNaiveBayes without a schema: bounds and classes are taken from the data, which "
                      "is NOT differentially private; pass a public schema", DataDerivedSchemaWarning, stacklevel=3)
        Xf = np.asarray(X, dtype=np.float64)
        if Xf.ndim != 2 or not np.isfinite(Xf).all():
            raise DataValidationError("records must be a finite 2-d array")
        lo, hi = Xf.min(axis=0), Xf.max(axis=0)
        hi = np.where(hi > lo, hi, lo + 1.0)
        return Schema(tuple(Feature(f"x{j}", "numeric", lower=float(lo[j]), upper=float(hi[j]))
                            for j in range(Xf.shape[1])), n_classes=int(np.max(y)) + 1)

    def fit(self, X: np.ndarray, y: np.ndarray) -> "DPNaiveBayes":
        schema = self._schema_for(X, y)
        params = {"epsilon": float(self.epsilon), "delta": float(self.delta), "mechanism": self.mechanism,
                  "alpha": float(self.alpha), "var_floor": float(self.var_floor)}
        spec = JobSpec("estimator", "naive-bayes", params, schema)
        Xv = schema.validate(X, y)
        yv = check_labels(np.asarray(y), len(Xv), schema.n_classes)
        rng = SecureRNG() if self.random_state is None else SecureRNG.from_seed(int(self.random_state))
        run = run_local(ALGORITHMS["naive-bayes"], spec, Xv, yv, rng)
        self._adopt_model(run.coordinator.model(), schema, run.event)
        return self

    @classmethod
    def from_model(cls, model: Mapping[str, np.ndarray], schema: Schema, params: Mapping[str, Any]) -> "DPNaiveBayes":
        """The fitted estimator of a released model (a model file, :mod:`dpfed.algorithms.model_file`)."""
        est = cls(epsilon=float(params.get("epsilon", 1.0)), delta=float(params.get("delta", 0.0)), schema=schema,
                  mechanism=str(params.get("mechanism", "auto")), alpha=float(params.get("alpha", DEFAULT_ALPHA)),
                  var_floor=float(params.get("var_floor", DEFAULT_VAR_FLOOR)))
        est._adopt_model(model_arrays(model), schema)
        return est

    def predict_log_proba(self, X: np.ndarray) -> np.ndarray:
        Xv = self._fitted_records(X)
        jll = joint_log_likelihood(self.model_, Xv)
        m = jll.max(axis=1, keepdims=True)
        return jll - (m + np.log(np.sum(np.exp(jll - m), axis=1, keepdims=True)))

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return np.exp(self.predict_log_proba(X))

    def predict(self, X: np.ndarray) -> np.ndarray:
        Xv = self._fitted_records(X)
        return np.argmax(joint_log_likelihood(self.model_, Xv), axis=1)
