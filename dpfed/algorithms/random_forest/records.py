"""A party's records for a random forest or decision tree job: float64 features and int64 labels, shapes and classes checked."""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.data.schema import DataValidationError

__all__ = ["party_records"]


def party_records(spec: JobSpec, X: np.ndarray, y: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``X`` as float64 with the schema's columns and ``y`` as int64 labels in 0..k-1 (DataValidationError
    naming the problem, never a value)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != spec.schema.n_features:
        raise DataValidationError(f"expected a 2-d array with {spec.schema.n_features} columns")
    if y is None:
        raise DataValidationError("random forests and decision trees need labels at every party")
    y = np.asarray(y)
    k = spec.schema.n_classes
    if y.shape != (len(X),):
        raise DataValidationError(f"labels: expected {len(X)} labels, got shape {tuple(y.shape)}")
    if len(y) and (not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= k):
        raise DataValidationError(f"labels: value(s) outside the schema's classes 0..{k - 1}")
    return X, y.astype(np.int64, copy=False)
