"""One-party differentially private statistics in the style of diffprivlib's ``tools`` (``mean(x, epsilon=,
bounds=)``): each call runs the registered ``statistics`` job's two halves on one array (the same plan,
mechanism and estimators as a federated job) and returns an :class:`Estimate` with its standard error and
confidence interval. ``bounds`` are the public bounds; without them they are taken from the data, which is NOT
private (:class:`DataDerivedBoundsWarning`). ``random_state`` (an int) makes the noise reproducible
(simulation only).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.driver import run_local
from dpfed.algorithms.params import validate
from dpfed.algorithms.statistics.algorithm import ALGORITHMS
from dpfed.algorithms.statistics.coordinator import StatisticsCoordinator
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import DataDerivedBoundsWarning, DataValidationError, Feature, Schema

__all__ = ["Estimate", "count", "sum", "mean", "var", "std", "histogram", "quantile", "median"]


@dataclass(frozen=True)
class Estimate:
    """A private estimate: ``value`` (a float, or an array for a histogram or per group), its standard error
    ``se`` and the interval [``lower``, ``upper``] at ``confidence``; ``edges`` for a histogram."""

    value: Any
    se: Any
    lower: Any
    upper: Any
    confidence: float
    edges: np.ndarray | None = None

    def __float__(self) -> float:
        return float(self.value)


def _column(x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    if np.isnan(a).any():
        raise DataValidationError("the values hold NaN")
    return a


def _schema(a: np.ndarray, bounds: Sequence[float] | None, groups: int) -> Schema:
    if bounds is None:
        warnings.warn("no bounds given: they are taken from the data, which is NOT differentially private; "
                      "pass public bounds=(lower, upper)", DataDerivedBoundsWarning, stacklevel=4)
        lo, hi = (float(a.min()), float(a.max())) if len(a) else (0.0, 1.0)
        bounds = (lo, hi if hi > lo else lo + 1.0)
    lo, hi = float(bounds[0]), float(bounds[1])
    feats = [Feature("x", "numeric", lower=lo, upper=hi)]
    if groups:
        feats.append(Feature("group", "categorical", categories=int(groups)))
    return Schema(tuple(feats))


def _run(query: str, x: Any, epsilon: float, bounds: Sequence[float] | None, delta: float,
         random_state: int | None, confidence: float, by: Any, groups: int | None,
         mechanism: str = "auto") -> Estimate:
    a = _column(x)
    cols = [a]
    if by is not None:
        g = np.asarray(by).reshape(-1)
        if g.shape != a.shape:
            raise DataValidationError("by needs one group code per value")
        groups = int(groups) if groups is not None else int(np.max(g)) + 1
        cols.append(g.astype(np.float64))
    schema = _schema(a, bounds, groups or 0)
    params = validate(ALGORITHMS["statistics"], {"epsilon": float(epsilon), "delta": float(delta),
                                                 "queries": [query], "confidence": float(confidence),
                                                 "mechanism": mechanism, **({"group_by": "group"} if by is not None
                                                                            else {})}, schema)
    spec = JobSpec("tools", "statistics", params, schema)
    X = schema.validate(np.column_stack(cols), clip_numeric=True)  # clamped to the public bounds
    rng = SecureRNG() if random_state is None else SecureRNG.from_seed(int(random_state))
    coord = run_local(ALGORITHMS["statistics"], spec, X, None, rng).coordinator
    assert isinstance(coord, StatisticsCoordinator)
    ans = coord.answers[0]
    out = [getattr(ans, k) for k in ("value", "se", "lower", "upper")]
    if by is None:  # one group: drop the group axis
        out = [np.asarray(v)[0] for v in out]
    if by is None and np.ndim(out[0]) == 0:
        out = [float(v) for v in out]
    return Estimate(*out, confidence=float(confidence), edges=ans.edges)


def count(x: Any, epsilon: float = 1.0, *, delta: float = 0.0, random_state: int | None = None,
          confidence: float = 0.95, by: Any = None, groups: int | None = None) -> Estimate:
    """The number of values (per group of ``by``)."""
    return _run("count", x, epsilon, (0.0, 1.0), delta, random_state, confidence, by, groups)


def sum(x: Any, epsilon: float = 1.0, bounds: Sequence[float] | None = None, *, delta: float = 0.0,  # noqa: A001
        random_state: int | None = None, confidence: float = 0.95, by: Any = None, groups: int | None = None) -> Estimate:
    """The sum of the values clamped to ``bounds``."""
    return _run("sum:x", x, epsilon, bounds, delta, random_state, confidence, by, groups)


def mean(x: Any, epsilon: float = 1.0, bounds: Sequence[float] | None = None, *, delta: float = 0.0,
         random_state: int | None = None, confidence: float = 0.95, by: Any = None, groups: int | None = None) -> Estimate:
    """The mean of the values clamped to ``bounds``."""
    return _run("mean:x", x, epsilon, bounds, delta, random_state, confidence, by, groups)


def var(x: Any, epsilon: float = 1.0, bounds: Sequence[float] | None = None, *, delta: float = 0.0,
        random_state: int | None = None, confidence: float = 0.95, by: Any = None, groups: int | None = None) -> Estimate:
    """The variance (ddof 0) of the values clamped to ``bounds``."""
    return _run("var:x", x, epsilon, bounds, delta, random_state, confidence, by, groups)


def std(x: Any, epsilon: float = 1.0, bounds: Sequence[float] | None = None, *, delta: float = 0.0,
        random_state: int | None = None, confidence: float = 0.95, by: Any = None, groups: int | None = None) -> Estimate:
    """The standard deviation (ddof 0) of the values clamped to ``bounds``."""
    return _run("std:x", x, epsilon, bounds, delta, random_state, confidence, by, groups)


def histogram(x: Any, epsilon: float = 1.0, bins: int = 10, range: Sequence[float] | None = None, *,  # noqa: A002
              delta: float = 0.0, random_state: int | None = None, confidence: float = 0.95, by: Any = None,
              groups: int | None = None) -> Estimate:
    """Counts of ``bins`` equal-width bins over the public ``range`` (``edges`` on the result)."""
    return _run(f"histogram:x:bins={int(bins)}", x, epsilon, range, delta, random_state, confidence, by, groups)


def quantile(x: Any, q: float, epsilon: float = 1.0, bounds: Sequence[float] | None = None, *, delta: float = 0.0,
             random_state: int | None = None, confidence: float = 0.95, bins: int | None = None, by: Any = None,
             groups: int | None = None) -> Estimate:
    """The q-quantile (0 < q < 1) from the consistent hierarchical histogram (Hay et al. 2010) on a public grid of
    ``bins`` cells over ``bounds``."""
    query = f"quantile:x:{float(q)!r}" + (f":bins={int(bins)}" if bins else "")
    return _run(query, x, epsilon, bounds, delta, random_state, confidence, by, groups)


def median(x: Any, epsilon: float = 1.0, bounds: Sequence[float] | None = None, *, delta: float = 0.0,
           random_state: int | None = None, confidence: float = 0.95, bins: int | None = None, by: Any = None,
           groups: int | None = None) -> Estimate:
    """The median: :func:`quantile` at 0.5."""
    return quantile(x, 0.5, epsilon, bounds, delta=delta, random_state=random_state, confidence=confidence,
                    bins=bins, by=by, groups=groups)
