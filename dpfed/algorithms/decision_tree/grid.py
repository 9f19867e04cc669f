"""The public candidate splits of a private decision tree: one grid of cells per usable feature, from the
schema alone (Friedman & Schuster, KDD 2010, Sec. 4: the candidate splits must not come from the data).

* numeric feature j: ``bins`` equal-width cells on its public bounds [lower_j, upper_j] (values clamped first,
  NaN to the lower bound); a split is a threshold on a cell boundary;
* categorical feature j: one cell per public category code (codes clamped into the domain); a split sends a
  subset of the codes left.

Every record lies in exactly ONE cell of every feature: the per-(node, feature, cell, class) counts of one
level change by one record in exactly F entries (F usable features), each by 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dpfed.algorithms.random_forest.structure import usable_features
from dpfed.data.schema import Schema

__all__ = ["Grid", "grid_for", "cells"]


@dataclass(frozen=True)
class Grid:
    """The usable features (schema column indices), their kinds, bounds and cell counts; ``offsets[f]`` is
    the first cell of feature f in the concatenation of all features' cells (``total`` cells)."""

    columns: np.ndarray    # (F,) int64 schema column of each usable feature
    numeric: np.ndarray    # (F,) bool
    lower: np.ndarray      # (F,) float64 (0 for categorical)
    upper: np.ndarray      # (F,) float64 (cells - 1 for categorical)
    sizes: np.ndarray      # (F,) int64 cells per feature
    offsets: np.ndarray    # (F,) int64

    @property
    def features(self) -> int:
        return int(len(self.columns))

    @property
    def total(self) -> int:
        return int(self.sizes.sum())

    @property
    def widest(self) -> int:
        return int(self.sizes.max())


def grid_for(schema: Schema, bins: int, features: Sequence[str] | None = None) -> Grid:
    """The grid of ``schema`` with ``bins`` cells per numeric feature (module docstring)."""
    cols = usable_features(schema, features)
    numeric = np.asarray(schema.numeric, dtype=bool)[cols]
    lower, upper, sizes = np.zeros(len(cols)), np.zeros(len(cols)), np.zeros(len(cols), np.int64)
    for i, j in enumerate(cols):
        f = schema.features[int(j)]
        if f.kind == "numeric":
            lower[i], upper[i], sizes[i] = float(f.lower), float(f.upper), int(bins)
        else:
            sizes[i] = int(f.categories)
            upper[i] = float(sizes[i] - 1)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return Grid(cols.astype(np.int64), numeric, lower, upper, sizes, offsets)


def cells(X: np.ndarray, grid: Grid) -> np.ndarray:
    """The cell (0 .. sizes[f] - 1) of every record in every usable feature, int64 (n, F): numeric values
    clamped to the bounds (NaN to the lower bound), categorical codes clamped into the domain."""
    V = np.asarray(X, dtype=np.float64)[:, grid.columns]
    V = np.where(np.isnan(V), grid.lower, V)
    V = np.clip(V, grid.lower, grid.upper)
    width = np.where(grid.numeric, (grid.upper - grid.lower) / np.maximum(grid.sizes, 1), 1.0)
    raw = np.where(grid.numeric, np.floor((V - grid.lower) / np.where(width > 0, width, 1.0)), np.rint(V))
    return np.clip(raw, 0, grid.sizes - 1).astype(np.int64)
