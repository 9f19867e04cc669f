"""The scikit-learn-style DP PCA estimator (:class:`DPPCA`): both halves on one party (the same code as a
federated ``pca`` job), ``fit`` / ``transform`` / ``fit_transform`` / ``inverse_transform``."""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.driver import run_local
from dpfed.algorithms.estimator import EstimatorParams, SchemaModel, model_arrays
from dpfed.algorithms.pca.algorithm import ALGORITHMS
from dpfed.algorithms.pca.model import captured_variance, project
from dpfed.algorithms.pca.plan import DEFAULT_MEAN_SHARE, DEFAULT_MEAN_WEIGHT
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import DataDerivedBoundsWarning, DataValidationError, Schema

__all__ = ["DPPCA"]


class DPPCA(SchemaModel, EstimatorParams):
    """Differentially private PCA ("Analyze Gauss" with a noisy mean from the same release; see
    :mod:`dpfed.algorithms.pca.plan`) with scikit-learn's attribute names: ``components_`` (k x d rows),
    ``explained_variance_``, ``explained_variance_ratio_`` (of the noisy total variance), ``mean_``,
    ``n_components_``, ``n_features_in_``, and ``privacy_event_``.

    ``schema`` (all numeric) or ``bounds`` = (lower, upper) (scalars or one per column) are the public
    bounds; without either, ``fit`` takes them from the data and warns (:class:`DataDerivedBoundsWarning`):
    that is NOT private. ``clip`` bounds a record's norm around ``origin`` in units of the largest feature
    range (``mean_clip`` around ``origin`` for the noisy mean). ``random_state`` (int) makes the noise reproducible (simulation only; it warns), None is secure.
    """

    classifier = False

    def __init__(self, n_components: int = 2, epsilon: float = 1.0, delta: float = 1e-6,
                 schema: Schema | None = None, bounds: tuple[Any, Any] | None = None, clip: float | None = None,
                 mean_clip: float | None = None, origin: str = "midpoint", mean_weight: float = DEFAULT_MEAN_WEIGHT,
                 mean_share: float = DEFAULT_MEAN_SHARE, random_state: int | None = None) -> None:
        self.n_components, self.epsilon, self.delta = n_components, epsilon, delta
        self.schema, self.bounds, self.clip, self.mean_clip, self.origin = schema, bounds, clip, mean_clip, origin
        self.mean_weight, self.mean_share, self.random_state = mean_weight, mean_share, random_state

    def _schema_for(self, X: np.ndarray) -> Schema:
        if self.schema is not None:
            return self.schema
        Xf = np.asarray(X, dtype=np.float64)
        if Xf.ndim != 2 or not np.isfinite(Xf).all():
            raise DataValidationError("records must be a finite 2-d array")
        if self.bounds is not None:
            return Schema.numeric_box(Xf.shape[1], self.bounds[0], self.bounds[1])
        warnings.warn("DPPCA without a schema or bounds: bounds are taken from the data, which is NOT "
                      "differentially private; pass public bounds", DataDerivedBoundsWarning, stacklevel=3)
        lo, hi = Xf.min(axis=0), Xf.max(axis=0)
        return Schema.numeric_box(Xf.shape[1], lo, np.where(hi > lo, hi, lo + 1.0))

    def fit(self, X: np.ndarray, y: Any = None) -> "DPPCA":
        schema = self._schema_for(X)
        params: dict[str, Any] = {"epsilon": float(self.epsilon), "delta": float(self.delta),
                                  "k": int(self.n_components), "origin": self.origin,
                                  "mean_weight": float(self.mean_weight), "mean_share": float(self.mean_share)}
        for key in ("clip", "mean_clip"):
            if getattr(self, key) is not None:
                params[key] = float(getattr(self, key))
        algo = ALGORITHMS["pca"]
        from dpfed.algorithms.params import validate

        spec = JobSpec("estimator", "pca", validate(algo, params, schema), schema)
        Xv = schema.validate(X, clip_numeric=True)
        rng = SecureRNG() if self.random_state is None else SecureRNG.from_seed(int(self.random_state))
        run = run_local(algo, spec, Xv, None, rng)
        model = run.coordinator.model()
        self._adopt_model(model, schema, run.event)
        self.components_ = model["components"]
        self.explained_variance_ = model["explained_variance"]
        self.explained_variance_ratio_ = model["explained_variance_ratio"]
        self.mean_ = model["mean"]
        self.n_components_ = int(self.n_components)
        return self

    @classmethod
    def from_model(cls, model: Mapping[str, np.ndarray], schema: Schema, params: Mapping[str, Any]) -> "DPPCA":
        """The fitted estimator of a released model (a model file, :mod:`dpfed.algorithms.model_file`)."""
        est = cls(n_components=int(np.asarray(model["components"]).shape[0]),
                  epsilon=float(params.get("epsilon", 1.0)), delta=float(params.get("delta", 1e-6)), schema=schema,
                  clip=params.get("clip"), mean_clip=params.get("mean_clip"), origin=str(params.get("origin", "midpoint")),
                  mean_weight=float(params.get("mean_weight", DEFAULT_MEAN_WEIGHT)),
                  mean_share=float(params.get("mean_share", DEFAULT_MEAN_SHARE)))
        est._adopt_model(model_arrays(model), schema)
        est.components_, est.mean_ = est.model_["components"], est.model_["mean"]
        est.explained_variance_ = est.model_.get("explained_variance")
        est.explained_variance_ratio_ = est.model_.get("explained_variance_ratio")
        est.n_components_ = int(est.components_.shape[0])
        return est

    def score(self, X: np.ndarray, y: Any = None) -> float:
        """The variance of ``X`` (clamped to the public bounds, centred by its own mean) captured by the
        released components: the job's own evaluation (:func:`~.model.evaluate`, ``captured_variance``)."""
        return captured_variance(self.components_, self._fitted_records(X))

    def transform(self, X: np.ndarray) -> np.ndarray:
        """(X - mean_) @ components_.T (post-processing: no privacy cost)."""
        self._check_fitted()
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise DataValidationError(f"expected a 2-d array with {self.n_features_in_} columns")
        return project(self.model_, X)

    def fit_transform(self, X: np.ndarray, y: Any = None) -> np.ndarray:
        return self.fit(X, y).transform(X)

    def inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        self._check_fitted()
        return np.asarray(Z, dtype=np.float64) @ self.components_ + self.mean_
