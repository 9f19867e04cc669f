"""A schema's records as bounded real vectors: one-hot categorical columns, numeric columns in [0, 1].

The encoding is fixed by the public schema alone (domains and bounds, never the records), so a party and
the coordinator agree on it without communication, and every encoded record lies in [0, 1]^D with at
most one 1 per categorical column: its L2 norm is at most ``sqrt(n_features)`` (:func:`max_norm`), the
public bound a linear model's per-record gradient norm rests on (Chaudhuri, Monteleoni & Sarwate, JMLR
2011, assume ``|x| <= 1``; divide by :func:`max_norm` for that). Numeric values outside the public bounds
are clamped (clamping is part of the mechanism); a NaN numeric value and a categorical code outside its
domain encode as 0 (the norm bound holds whatever the input: a party's validation refuses such records
before, this is the safety net).
"""
from __future__ import annotations

import math

import numpy as np

from dpfed.data.schema import Schema

__all__ = ["encoded_dimension", "encode", "max_norm", "encoded_names"]


def encoded_dimension(schema: Schema) -> int:
    """D: one column per categorical code plus one per numeric feature."""
    return int(sum(f.categories if f.kind == "categorical" else 1 for f in schema.features))


def max_norm(schema: Schema) -> float:
    """Public bound on an encoded record's L2 norm: ``sqrt(n_features)`` (each column contributes <= 1)."""
    return math.sqrt(max(schema.n_features, 1))


def encoded_names(schema: Schema) -> list[str]:
    """Names of the D encoded columns: the numeric features first (schema order), then one column per
    categorical code (``name=code``)."""
    out = [f.name for f in schema.features if f.kind != "categorical"]
    for f in schema.features:
        if f.kind == "categorical":
            out += [f"{f.name}={c}" for c in range(f.categories)]
    return out


def encode(schema: Schema, X: np.ndarray) -> np.ndarray:
    """(n, D) float64 encoding of the records ``X`` (n, n_features), columns as :func:`encoded_names`
    (module notes): vectorised, no loop over records."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != schema.n_features:
        raise ValueError(f"expected records with {schema.n_features} columns, got shape {X.shape}")
    n, num = len(X), schema.numeric
    Z = np.zeros((n, encoded_dimension(schema)))
    k = int(num.sum())
    if k:  # every numeric column at once, first (MNIST: 784 of them)
        with np.errstate(invalid="ignore", over="ignore"):
            v = (X[:, num] - schema.lower) / (schema.upper - schema.lower)
        np.clip(v, 0.0, 1.0, out=v)
        Z[:, :k] = np.nan_to_num(v, nan=0.0, copy=False)
    rows, at = np.arange(n), k
    for j in np.flatnonzero(~num):  # then the one-hot blocks, one categorical column at a time
        col, size = X[:, j], schema.features[j].categories
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(col) & (col >= 0) & (col < size) & (col == np.floor(col))
        Z[rows[ok], at + col[ok].astype(np.int64)] = 1.0
        at += size
    return Z
