"""Scikit-learn's estimator conventions without importing scikit-learn (a test/bench extra only).

``get_params`` / ``set_params`` read the constructor's signature, so ``sklearn.base.clone``, grid
searches and pipelines treat dpfed models like their own; ``ClassifierScore.score`` is accuracy;
``SchemaModel`` holds the fitted state of a model released over a public schema.
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from dpfed.data.schema import Schema

__all__ = ["EstimatorParams", "ClassifierScore", "RegressorScore", "SchemaModel", "class_indices", "model_arrays"]


class EstimatorParams:
    """Parameters are the constructor's arguments, stored under the same names."""

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return sorted(p.name for p in sig.parameters.values()
                      if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> "EstimatorParams":
        names = self._param_names()
        for name, value in params.items():
            if name not in names:
                raise ValueError(f"invalid parameter {name!r} for {type(self).__name__}; valid: {', '.join(names)}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        changed = []
        for k, v in self.get_params().items():
            d = defaults.get(k, inspect.Parameter.empty)
            try:
                same = d is not inspect.Parameter.empty and bool(v == d)
            except (ValueError, TypeError):  # arrays compare element-wise
                same = False
            if not same:
                changed.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(changed)})"


class ClassifierScore:
    """``score(X, y)``: mean accuracy of ``predict(X)``, as scikit-learn classifiers define it."""

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        correct = (self.predict(X) == np.asarray(y)).astype(np.float64)
        return float(np.average(correct, weights=sample_weight))


class RegressorScore:
    """``score(X, y)``: the coefficient of determination R^2 of ``predict(X)``, as scikit-learn regressors define it."""

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        y = np.asarray(y, dtype=np.float64)
        w = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        res = float(np.sum(w * (y - np.asarray(self.predict(X))) ** 2))
        tot = float(np.sum(w * (y - np.average(y, weights=w)) ** 2))
        return 1.0 - res / tot


def model_arrays(model: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A released model's entries as arrays (a model file's, for an estimator's ``from_model``)."""
    return {k: np.asarray(v) for k, v in model.items()}


class SchemaModel:
    """The fitted state of an estimator whose released model is a dict of arrays over a public schema:
    ``model_``, ``schema_``, ``n_features_in_``, a classifier's ``classes_`` (the class indices
    0..n_classes-1) and, after ``fit``, ``privacy_event_``; records are validated against the schema."""

    #: False for a regressor or a transformer (no ``classes_``)
    classifier: ClassVar[bool] = True
    model_: dict[str, np.ndarray]
    schema_: Schema

    def _adopt_model(self, model: dict[str, np.ndarray], schema: Schema, event: object = None) -> None:
        """Set the fitted attributes from the released ``model`` (and the ``event`` ``fit`` charged)."""
        self.model_, self.schema_ = model, schema
        if self.classifier:
            self.classes_ = np.arange(schema.n_classes)
        self.n_features_in_ = schema.n_features
        if event is not None:
            self.privacy_event_ = event

    def _check_fitted(self) -> None:
        if not hasattr(self, "model_"):
            raise RuntimeError(f"this {type(self).__name__} is not fitted yet; call fit first")

    def _fitted_records(self, X: Any) -> np.ndarray:
        """``X`` validated against the fitted schema, numeric columns clamped to its bounds."""
        self._check_fitted()
        return self.schema_.validate(X, clip_numeric=True)


def class_indices(y: np.ndarray, classes: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """(classes, the index of each label in them): ``classes`` public (given) or the sorted labels of ``y``;
    ValueError for fewer than 2 classes or a label outside them."""
    cls = np.unique(y) if classes is None else np.asarray(classes)
    if len(cls) < 2:
        raise ValueError("need at least 2 classes")
    idx = np.searchsorted(cls, y)
    if np.any(idx >= len(cls)) or np.any(cls[np.minimum(idx, len(cls) - 1)] != y):
        raise ValueError("y contains labels outside `classes`")
    return cls, idx
