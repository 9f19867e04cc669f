"""Private decision tree maths (Friedman & Schuster, KDD 2010, "Data mining with differential privacy",
DiffP-C4.5 with noisy counts): routing records down a partial tree, the per-level and per-leaf count vectors a
party releases, the coordinator's split choice from the summed noisy counts, and prediction.

A tree of depth D is stored heap-wise over its 2^D - 1 possible internal nodes (root 0, children 2v + 1 and
2v + 2): ``feature[v]`` is the grid feature node v splits on (-1: v is a leaf or unreached) and
``left[v, c]`` is 1 when cell c of that feature goes left. A record stops at the first node without a split.

Split choice (post-processing of one level's release): for every open node, every feature and every binary
split of its cells (a prefix of the cells for a numeric feature; for a categorical one a prefix of the codes
sorted by the noisy share of the node's majority class, Breiman et al. 1984's optimal ordering for two
classes), the weighted Gini impurity of the two children from the clipped noisy class counts; the smallest
wins (FS10 Sec. 4 score the same noisy counts with information gain; Gini needs no logarithm of noisy values).
A node is split only when its noisy record count (the level's counts summed over every cell of every
feature, / F) is at least the noise std of one feature's histogram total, sigma sqrt(cells k / F) (FS10
Sec. 4.2's stopping rule N / (t C) < sqrt(2) / epsilon, for the Gaussian); otherwise it becomes a leaf.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from dpfed.algorithms.decision_tree.grid import Grid, cells
from dpfed.data.schema import Schema

_CHUNK = 1 << 15   # records counted at once

__all__ = ["descend", "level_counts", "leaf_counts", "choose_splits", "min_count", "tree_model", "predict_proba",
           "predict", "evaluate"]


def descend(C: np.ndarray, feature: np.ndarray, left: np.ndarray, steps: int) -> np.ndarray:
    """The heap node of every record after at most ``steps`` moves down the tree (it stops at a node without
    a split); ``C`` is the records' cells (:func:`.grid.cells`)."""
    n, internal = len(C), len(feature)
    node = np.zeros(n, np.int64)
    rows = np.arange(n)
    for _ in range(int(steps)):
        inside = node < internal
        f = np.where(inside, feature[np.minimum(node, internal - 1)], -1)
        go = f >= 0
        if not go.any():
            break
        cell = C[rows, np.maximum(f, 0)]
        goes_left = left[np.minimum(node, internal - 1), cell] != 0
        node = np.where(go, 2 * node + 2 - goes_left, node)
    return node


def level_counts(C: np.ndarray, y: np.ndarray, feature: np.ndarray, left: np.ndarray, level: int, grid: Grid,
                 k: int) -> np.ndarray:
    """The exact counts of level ``level``, flat int64 of length 2^level S k (S = grid.total cells), entry
    ((slot S + offset_f + cell_f) k + class) for the node ``slot`` of that level: every record that reached the
    level adds 1 to exactly F entries (one cell per feature), the others add nothing."""
    first, length = (1 << level) - 1, (1 << level) * grid.total * k
    y = np.asarray(y, np.int64)
    out = np.zeros(length, np.int64)
    for a in range(0, len(C), _CHUNK):   # chunks keep the (records x F) index array a few MB
        Cb = C[a:a + _CHUNK]
        node = descend(Cb, feature, left, level)
        at = node >= first
        idx = ((node[at, None] - first) * grid.total + grid.offsets[None, :] + Cb[at]) * k + y[a:a + _CHUNK][at, None]
        out += np.bincount(idx.ravel(), minlength=length).astype(np.int64)
    return out


def leaf_counts(C: np.ndarray, y: np.ndarray, feature: np.ndarray, left: np.ndarray, depth: int,
                k: int) -> np.ndarray:
    """The exact class counts of every node a record ends in, flat int64 of length (2^(D+1) - 1) k: each
    record adds 1 to exactly one entry."""
    node = descend(C, feature, left, depth)
    idx = node * k + np.asarray(y, np.int64)
    return np.bincount(idx, minlength=((2 << depth) - 1) * k).astype(np.int64)


def min_count(sigma: float, grid: Grid, k: int) -> float:
    """The stopping threshold on a node's noisy count (module docstring)."""
    return float(sigma) * math.sqrt(grid.total * k / grid.features)


def _gini(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Weighted Gini impurity n_L (1 - sum p_L^2) + n_R (1 - sum p_R^2) over the last axis (classes)."""
    out = np.zeros(left.shape[:-1])
    for side in (left, right):
        n = side.sum(-1)
        out += n - np.divide((side ** 2).sum(-1), n, out=np.zeros_like(n), where=n > 0)
    return out


def choose_splits(hist: np.ndarray, grid: Grid, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best split of every node of a level from its noisy counts ``hist`` (nodes, S, k): the grid feature
    (nodes,) and the left-cell masks (nodes, widest) (module docstring)."""
    H = np.maximum(np.asarray(hist, np.float64), 0.0)
    nodes = H.shape[0]
    best = np.full(nodes, np.inf)
    feat = np.full(nodes, -1, np.int64)
    left = np.zeros((nodes, grid.widest), np.uint8)
    for f in range(grid.features):  # a loop over features, vectorised over nodes and cells
        m, off = int(grid.sizes[f]), int(grid.offsets[f])
        if m < 2:
            continue
        Hf = H[:, off:off + m, :]
        if grid.numeric[f]:
            order = np.broadcast_to(np.arange(m), (nodes, m))
        else:
            major = Hf.sum(1).argmax(-1)
            share = np.divide(Hf[np.arange(nodes), :, major], Hf.sum(-1), out=np.zeros((nodes, m)),
                              where=Hf.sum(-1) > 0)
            order = np.argsort(share, axis=1, kind="stable")
        prefix = np.cumsum(np.take_along_axis(Hf, order[:, :, None], axis=1), axis=1)[:, :-1, :]
        score = _gini(prefix, Hf.sum(1)[:, None, :] - prefix)
        i = score.argmin(axis=1)
        s = score[np.arange(nodes), i]
        better = s < best
        best, feat = np.where(better, s, best), np.where(better, f, feat)
        mask = (np.arange(m)[None, :] <= i[:, None]).astype(np.uint8)     # the first i + 1 in the order go left
        cellmask = np.zeros((nodes, m), np.uint8)
        np.put_along_axis(cellmask, order, mask, axis=1)
        left[better] = 0
        left[better, :m] = cellmask[better]
    return feat, left


def tree_model(feature: np.ndarray, left: np.ndarray, counts: np.ndarray, grid: Grid, alpha: float,
               mechanism: str) -> dict[str, np.ndarray]:
    """The model arrays: the structure, the noisy leaf counts (nodes, k) and their smoothed distributions
    (negative counts set to 0, ``alpha`` pseudo-counts added), and the public grid."""
    c = np.asarray(counts, np.float64)
    p = np.maximum(c, 0.0) + float(alpha)
    sums = p.sum(axis=1, keepdims=True)
    proba = np.divide(p, sums, out=np.full_like(p, 1.0 / c.shape[1]), where=sums > 0)
    return {"algorithm": np.array("decision-tree"), "mechanism": np.array(mechanism),
            "feature": np.asarray(feature, np.int64), "left": np.asarray(left, np.uint8), "leaf_counts": c,
            "leaf_proba": proba, "columns": grid.columns, "numeric": grid.numeric, "lower": grid.lower,
            "upper": grid.upper, "sizes": grid.sizes}


def _grid_of(model: Mapping[str, np.ndarray]) -> Grid:
    sizes = np.asarray(model["sizes"], np.int64)
    return Grid(np.asarray(model["columns"], np.int64), np.asarray(model["numeric"], bool),
                np.asarray(model["lower"], np.float64), np.asarray(model["upper"], np.float64), sizes,
                np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64))


def predict_proba(model: Mapping[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """Class probabilities: the smoothed noisy class distribution of the node each record ends in."""
    feature = np.asarray(model["feature"], np.int64)
    depth = int(len(feature) + 1).bit_length() - 1
    node = descend(cells(X, _grid_of(model)), feature, np.asarray(model["left"]), depth)
    return np.asarray(model["leaf_proba"], np.float64)[node]


def predict(model: Mapping[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    return np.argmax(predict_proba(model, X), axis=1)


def evaluate(model: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray | None, schema: Schema) -> dict[str, float]:
    """Test accuracy on labelled records (numeric values clamped to the public bounds)."""
    if y is None:
        raise ValueError("decision tree evaluation needs labels")
    Xv = schema.validate(X, clip_numeric=True)
    return {"test_accuracy": float(np.mean(predict(model, Xv) == np.asarray(y)))}
