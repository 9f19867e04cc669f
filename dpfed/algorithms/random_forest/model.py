"""Random decision forest maths: routing records to leaves, the per-leaf class counts a party releases, the
coordinator's post-processing of the noisy counts, and prediction (Jagannathan, Pillaipakkamnatt & Wright 2012,
Alg. 3: the class distribution of a record's leaf, averaged over the trees).

Post-processing (no privacy cost): the noisy count vector is reshaped to (trees, leaves, classes), negative
counts are set to 0 and ``alpha`` pseudo-counts are added; each leaf's class distribution is its row
normalised; a record's class probabilities are the mean of its T leaves' distributions.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from dpfed.algorithms.random_forest.structure import Forest
from dpfed.data.schema import Schema

__all__ = ["route", "leaf_counts", "postprocess", "forest_from_model", "predict_proba", "predict", "evaluate"]

_CHUNK = 1 << 13   # records routed at once (T x chunk int64 index arrays stay a few MB)


def route(X: np.ndarray, forest: Forest) -> np.ndarray:
    """The leaf (0 .. 2^D - 1) of every record in every tree, shape (T, n). Numeric values are clamped to the
    public bounds first and categorical codes to the domain, so every record lands in exactly one leaf per tree
    whatever its values (a NaN compares False: left)."""
    X = np.asarray(X, dtype=np.float64)
    n, T, D = len(X), forest.trees, forest.depth
    out = np.empty((T, n), np.int64)
    m_max = 64 * forest.goes_right.shape[2]
    Xc = np.where(forest.numeric, np.clip(X, forest.lower, forest.upper), np.clip(np.nan_to_num(X), 0, m_max - 1))
    t_idx = np.arange(T)[:, None]
    for start in range(0, n, _CHUNK):
        block = Xc[start:start + _CHUNK]
        rows = np.arange(len(block))[None, :]
        node = np.zeros((T, len(block)), np.int64)
        for _ in range(D):
            f = forest.feature[t_idx, node]
            x = block[rows, f]
            is_num = forest.numeric[f]
            codes = np.where(is_num, 0.0, x).astype(np.uint64)
            bits = forest.goes_right[t_idx, node, (codes >> np.uint64(6)).astype(np.int64)] >> (codes & np.uint64(63))
            right = np.where(is_num, x >= forest.threshold[t_idx, node], (bits & np.uint64(1)).astype(bool))
            node = 2 * node + 1 + right
        out[:, start:start + len(block)] = node - (forest.leaves - 1)
    return out


def leaf_counts(X: np.ndarray, y: np.ndarray, forest: Forest) -> np.ndarray:
    """The exact per-leaf class counts, flat int64 of length T 2^D k, entry (t 2^D + leaf) k + class: every
    record adds 1 to exactly one entry per tree (its L1 sensitivity is T, its L2 sensitivity sqrt(T))."""
    y = np.asarray(y, dtype=np.int64)
    leaves = route(X, forest)
    k = forest.n_classes
    idx = (np.arange(forest.trees)[:, None] * forest.leaves + leaves) * k + y[None, :]
    return np.bincount(idx.ravel(), minlength=forest.length).astype(np.int64)


def postprocess(total: np.ndarray, forest: Forest, alpha: float, mechanism: str) -> dict[str, np.ndarray]:
    """The noisy summed counts -> model arrays (module docstring); the public structure is stored alongside."""
    counts = np.asarray(total, dtype=np.float64).reshape(forest.trees, forest.leaves, forest.n_classes)
    p = np.maximum(counts, 0.0) + float(alpha)
    sums = p.sum(axis=2, keepdims=True)
    dist = np.divide(p, sums, out=np.full_like(p, 1.0 / forest.n_classes), where=sums > 0)
    return {"algorithm": np.array("random-forest"), "mechanism": np.array(mechanism),
            "leaf_counts": counts, "leaf_proba": dist, "feature": np.asarray(forest.feature),
            "threshold": np.asarray(forest.threshold), "goes_right": np.asarray(forest.goes_right),
            "numeric": np.asarray(forest.numeric), "lower": np.asarray(forest.lower),
            "upper": np.asarray(forest.upper)}


def forest_from_model(model: Mapping[str, np.ndarray]) -> Forest:
    """The structure stored in a model's arrays."""
    proba = np.asarray(model["leaf_proba"])
    return Forest(np.asarray(model["feature"], dtype=np.int64), np.asarray(model["threshold"], dtype=np.float64),
                  np.asarray(model["goes_right"], dtype=np.uint64), np.asarray(model["numeric"], dtype=bool),
                  np.asarray(model["lower"], dtype=np.float64), np.asarray(model["upper"], dtype=np.float64),
                  int(proba.shape[2]))


def predict_proba(model: Mapping[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """Class probabilities: the mean over trees of the record's leaf distribution, shape (n, k)."""
    forest = forest_from_model(model)
    leaves = route(X, forest)
    proba = np.asarray(model["leaf_proba"], dtype=np.float64)
    out = np.zeros((leaves.shape[1], forest.n_classes))
    for t in range(forest.trees):   # one gather per tree keeps memory at n x k
        out += proba[t, leaves[t]]
    return out / forest.trees


def predict(model: Mapping[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    return np.argmax(predict_proba(model, X), axis=1)


def evaluate(model: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray | None, schema: Schema) -> dict[str, float]:
    """Test accuracy on labelled records (numeric values clamped to the public bounds)."""
    if y is None:
        raise ValueError("random forest evaluation needs labels")
    Xv = schema.validate(X, clip_numeric=True)
    return {"test_accuracy": float(np.mean(predict(model, Xv) == np.asarray(y)))}
