"""The scikit-learn-style DP linear regression (:class:`DPLinearRegression`): both halves on one party."""
from __future__ import annotations

import warnings
from typing import Any, Mapping

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.driver import run_local
from dpfed.algorithms.estimator import EstimatorParams, RegressorScore, SchemaModel, model_arrays
from dpfed.algorithms.linear_regression.algorithm import ALGORITHMS
from dpfed.algorithms.linear_regression.model import predict
from dpfed.algorithms.linear_regression.options import DEFAULT_DELTA
from dpfed.algorithms.params import validate
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import DataDerivedBoundsWarning, DataValidationError, Feature, Schema

__all__ = ["DPLinearRegression"]


class DPLinearRegression(SchemaModel, EstimatorParams, RegressorScore):
    """Scikit-learn-style DP linear (ridge) regression for one array: AdaSSP (default) or the functional
    mechanism, the party and coordinator halves on one party; ``score`` is R^2.

    ``schema`` gives the public feature bounds and the target's (``Schema(..., target=Feature(...))``); without
    one, ``fit`` derives all-numeric bounds from the data and warns (:class:`DataDerivedBoundsWarning`): that
    leaks. ``random_state`` (int) makes the noise reproducible (simulation only; it warns), None is secure.
    """

    classifier = False

    def __init__(self, epsilon: float = 1.0, delta: float = DEFAULT_DELTA, schema: Schema | None = None,
                 method: str = "adassp", random_state: int | None = None) -> None:
        self.epsilon, self.delta, self.schema, self.method, self.random_state = epsilon, delta, schema, method, random_state

    def _schema_for(self, X: np.ndarray, y: np.ndarray) -> Schema:
        if self.schema is not None:
            return self.schema
        warnings.warn("DPLinearRegression without a schema: bounds are taken from the data, which is NOT "
                      "differentially private; pass a public schema", DataDerivedBoundsWarning, stacklevel=3)
        Xf, yf = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if Xf.ndim != 2 or not np.isfinite(Xf).all() or not np.isfinite(yf).all():
            raise DataValidationError("records and targets must be finite arrays (2-d and 1-d)")
        lo, hi = Xf.min(axis=0), Xf.max(axis=0)
        hi = np.where(hi > lo, hi, lo + 1.0)
        ylo, yhi = float(yf.min()), float(yf.max())
        return Schema(tuple(Feature(f"x{j}", "numeric", lower=float(lo[j]), upper=float(hi[j]))
                            for j in range(Xf.shape[1])),
                      target=Feature("y", "numeric", lower=ylo, upper=yhi if yhi > ylo else ylo + 1.0))

    def fit(self, X: np.ndarray, y: np.ndarray) -> "DPLinearRegression":
        schema = self._schema_for(X, y)
        algo = ALGORITHMS["linear-regression"]
        params = validate(algo, {"epsilon": float(self.epsilon), "delta": float(self.delta), "method": self.method},
                          schema)
        spec = JobSpec("estimator", "linear-regression", params, schema)
        Xv = schema.validate(X, y)
        yv = schema.labels(y)
        rng = SecureRNG() if self.random_state is None else SecureRNG.from_seed(int(self.random_state))
        run = run_local(algo, spec, Xv, yv, rng)
        self._adopt_model(run.coordinator.model(), schema, run.event)
        self.coef_ = np.asarray(self.model_["coef"])
        return self

    @classmethod
    def from_model(cls, model: Mapping[str, np.ndarray], schema: Schema, params: Mapping[str, Any]
                   ) -> "DPLinearRegression":
        """The fitted estimator of a released model (a model file, :mod:`dpfed.algorithms.model_file`)."""
        est = cls(epsilon=float(params.get("epsilon", 1.0)), delta=float(params.get("delta", DEFAULT_DELTA)),
                  schema=schema, method=str(params.get("method", "adassp")))
        est._adopt_model(model_arrays(model), schema)
        est.coef_ = np.asarray(est.model_["coef"])
        return est

    def predict(self, X: np.ndarray) -> np.ndarray:
        return predict(self.model_, self._fitted_records(X))
