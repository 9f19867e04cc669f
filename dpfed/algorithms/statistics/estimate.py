"""The coordinator's post-processing of the summed noisy vector into answers, each with the standard error
the noise implies and a confidence interval (no privacy cost: functions of the release and public facts).

Per block the entries are divided by the block weight (natural units: records) and carry independent noise
of known variance v (the plan's per-entry variance times the number of noise shares). Estimators:

* moments (u = (x - lower) / r in [0, 1], r = upper - lower): degree 1, T = (sum (1-u), sum u):
  n = T0 + T1, S = T1; degree 2, T = (sum (1-u)^2, sum 2u(1-u), sum u^2): n = T0 + T1 + T2, S = T1 / 2 + T2,
  Q = T2. count n, sum lower n + r S, mean lower + r S / n, variance r^2 (Q / n - (S / n)^2) (ddof 0, as
  NumPy), std its square root. Standard errors by the delta method (gradient by central differences,
  v sum_k (df/dT_k)^2);
* histogram and table cells: the noisy count clamped at 0, standard error sqrt(v); a count read from a
  histogram or table sums its cells (variance cells x v);
* quantile q of a column from its histogram on the public grid e_0 < ... < e_G (Smith 2011 and Dwork & Lei
  2009 discuss DP quantiles; this is the noisy-CDF method): C_j = sum_{i<=j} h_i estimates #(x < e_{j+1}),
  and D_j = C_j - q C_{G-1} = (1 - q) C_j - q (N - C_j) has variance v ((1 - q)^2 (j + 1) + q^2 (G - 1 - j)).
  x* = inf{x : #(x' <= x) >= q N} (NumPy's ``inverted_cdf``) lies below e_{j+1} iff D_j >= 0, so the interval is
  [e_{j+1} of the last j with D_j + k sd_j < 0, e_{j+1} of the first j with D_j - k sd_j >= 0]; the value
  interpolates linearly inside the bin where the running maximum of C first reaches q N;
* quantile from a tree block (:mod:`.tree`, Hay et al. 2010): the same rule on the least-squares consistent
  leaves, with sd_j^2 = v Var(C_j - q N) of the consistent estimate (:func:`.tree.prefix_variance`: the linear
  map from the noisy nodes applied to unit vectors, exact for independent equal-variance node noise); a count
  read from a tree block is the consistent total, with variance v Var(N);

Intervals are value +- k standard errors: k = the normal quantile under Gaussian noise; under Laplace noise
k = ln(1 / alpha) / sqrt 2, the exact two-sided quantile of one Laplace variable in standard-error units
(a sum of several has lighter tails, so it is conservative), alpha = 1 - confidence, widened for a block of
whole counts at a small discrete scale (:func:`block_multiplier`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Callable

import numpy as np

from dpfed.algorithms.statistics.queries import Block, Layout, Query
from dpfed.algorithms.statistics.tree import consistent_leaves, prefix_variance
from dpfed.data.schema import Schema

__all__ = ["Answer", "multiplier", "block_multiplier", "moment_estimate", "quantile_estimate", "estimate_all"]


@dataclass(frozen=True)
class Answer:
    """One query's answer per group: value, standard error, interval (arrays, first axis = groups)."""

    query: Query
    groups: tuple[str, ...]
    value: np.ndarray
    se: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    edges: np.ndarray | None = None

    def to_dict(self) -> dict[str, Any]:
        def out(a: np.ndarray) -> Any:
            a = np.asarray(a, dtype=np.float64)
            return (a[0] if self.query.by is None else a).tolist()
        d: dict[str, Any] = {"query": self.query.label, **self.query.to_dict(),
                             "groups": list(self.groups) if self.query.by is not None else None,
                             "value": out(self.value), "se": out(self.se), "lower": out(self.lower),
                             "upper": out(self.upper)}
        if self.edges is not None:
            d["edges"] = np.asarray(self.edges, dtype=np.float64).tolist()
        return d


def multiplier(mechanism: str, confidence: float) -> float:
    """k of the interval value +- k se (module docstring)."""
    alpha = 1.0 - confidence
    if mechanism in ("laplace", "ddlaplace"):  # ddlaplace: >= 1 discrete Laplace summed (lighter tails)
        return math.log(1.0 / alpha) / math.sqrt(2.0)
    return NormalDist().inv_cdf(1.0 - alpha / 2.0)


def block_multiplier(mechanism: str, confidence: float, unit_var: float) -> float:
    """k for a block whose entries carry noise of variance ``unit_var`` in the block's own integer units. Under
    Laplace the noise is a discrete Laplace (or lighter-tailed sums): with q from its variance 2q / (1 - q)^2 and
    t = -1 / ln q, P(|X| > x) = 2 q^(floor(x) + 1) / (1 + q) <= 2 e^(-x / t) / (1 + q) <= alpha at
    x = t ln(2 / ((1 + q) alpha)); k is x over the standard error, at least :func:`multiplier` (equal to it as
    t grows: whole counts at a small scale need the wider interval)."""
    k = multiplier(mechanism, confidence)
    if mechanism not in ("laplace", "ddlaplace") or not unit_var > 0:
        return k
    s = unit_var / 2.0
    d = (math.sqrt(4.0 * s + 1.0) - 1.0) / (2.0 * s)  # 1 - q, the root of s q^2 - (2 s + 1) q + s = 0 below 1
    t = -1.0 / math.log1p(-d)
    x = t * math.log(2.0 / ((2.0 - d) * (1.0 - confidence)))
    return max(k, x / math.sqrt(unit_var))


def _delta_se(f: Callable[[np.ndarray], np.ndarray], T: np.ndarray, v: float) -> np.ndarray:
    """sqrt(v sum_k (df/dT_k)^2), f applied row-wise to T (groups, k), gradient by central differences."""
    h = max(1.0, math.sqrt(v)) * 1e-3
    total = np.zeros(T.shape[0])
    for k in range(T.shape[1]):
        e = np.zeros(T.shape[1])
        e[k] = h
        total += ((f(T + e) - f(T - e)) / (2 * h)) ** 2
    return np.sqrt(v * total)


def _moment_fn(stat: str, degree: int, lo: float, r: float) -> Callable[[np.ndarray], np.ndarray]:
    def f(T: np.ndarray) -> np.ndarray:
        n = T.sum(axis=1)
        S = T[:, 1] if degree == 1 else T[:, 1] / 2 + T[:, 2]
        if stat == "count":
            return n
        if stat == "sum":
            return lo * n + r * S
        nn = np.maximum(n, 1.0)
        m = S / nn
        if stat == "mean":
            return lo + r * m
        var = r * r * (T[:, 2] / nn - m * m)
        return var if stat == "var" else np.sqrt(np.maximum(var, 0.0))
    return f


def moment_estimate(q: Query, T: np.ndarray, v: float, degree: int, lo: float, r: float,
                    k: float) -> tuple[np.ndarray, ...]:
    """(value, se, lower, upper) of a count, sum, mean, var or std query from a moment block T (groups, cells)."""
    stat = q.stat
    f = _moment_fn(stat if stat != "std" else "var", degree, lo, r)
    value, se = f(T), _delta_se(f, T, v)
    if stat == "std":  # delta method through the square root, floored where the variance is near 0
        sd = np.sqrt(np.maximum(value, 0.0))
        lower, upper = np.sqrt(np.maximum(value - k * se, 0.0)), np.sqrt(np.maximum(value + k * se, 0.0))
        return sd, se / np.maximum(2.0 * sd, 1e-300), lower, upper
    lo_v, hi_v = {"count": (0.0, math.inf), "sum": (-math.inf, math.inf), "mean": (lo, lo + r),
                  "var": (0.0, r * r / 4.0)}[stat]
    clipped = np.clip(value, lo_v, hi_v)
    return clipped, se, np.clip(value - k * se, lo_v, hi_v), np.clip(value + k * se, lo_v, hi_v)


def quantile_estimate(h: np.ndarray, v: float, q: float, lo: float, r: float, k: float,
                      unit_var: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """(value, se, lower, upper) of quantile ``q`` from noisy histograms ``h`` (groups, G) on a grid over
    [lo, lo + r] (module docstring); ``unit_var[j]`` is Var(C_j - q N) / v (default: independent cells); se is
    the interval's half width over k."""
    G = h.shape[1]
    C = np.cumsum(h, axis=1)
    N = C[:, -1:]
    D = C - q * N
    j = np.arange(G)
    if unit_var is None:
        unit_var = (1 - q) ** 2 * (j + 1) + q * q * (G - 1 - j)
    sd = np.sqrt(v * np.asarray(unit_var))[None, :]
    edges = lo + r * (j + 1) / G
    below = (D + k * sd) < 0
    above = (D - k * sd) >= 0
    above[:, -1] = True
    last_below = np.where(below.any(axis=1), G - 1 - np.argmax(below[:, ::-1], axis=1), -1)
    lower = np.where(last_below >= 0, edges[np.maximum(last_below, 0)], lo)
    upper = edges[np.argmax(above, axis=1)]
    M = np.maximum.accumulate(np.maximum(C, 0.0), axis=1)
    target = q * np.maximum(N[:, 0], 0.0)
    first = np.argmax(M >= target[:, None] - 1e-9, axis=1)
    prev = np.where(first > 0, M[np.arange(len(M)), np.maximum(first - 1, 0)], 0.0)
    width = M[np.arange(len(M)), first] - prev
    frac = np.where(width > 0, (target - prev) / np.where(width > 0, width, 1.0), 0.5)
    value = lo + r * (first + np.clip(frac, 0.0, 1.0)) / G
    value = np.clip(value, lower, upper)
    return value, (upper - lower) / (2 * k), lower, upper


def _group_names(block: Block, schema: Schema) -> tuple[str, ...]:
    if block.by == -2 and schema.class_names:
        return tuple(schema.class_names)
    return tuple(str(g) for g in range(block.groups))


def estimate_all(layout: Layout, schema: Schema, total: np.ndarray, weights: np.ndarray, entry_var: np.ndarray,
                 mechanism: str, confidence: float) -> list[Answer]:
    """Every query's :class:`Answer` from the summed vector ``total`` (module docstring); ``entry_var[b]`` is
    block b's per-entry noise variance in records^2."""
    out = []
    for q, b in zip(layout.queries, layout.source, strict=True):
        block = layout.blocks[b]
        T = total[block.offset:block.offset + block.size].astype(np.float64).reshape(block.groups, block.cells)
        T = T / float(weights[b])
        v = float(entry_var[b])
        k = block_multiplier(mechanism, confidence, v * float(weights[b]) ** 2)
        names = _group_names(block, schema)
        if block.kind == "tree":
            T = consistent_leaves(T, block.bins)
        if block.kind == "moments":
            f = schema.features[block.column]
            out.append(Answer(q, names, *moment_estimate(q, T, v, block.degree, f.lower, f.upper - f.lower, k)))
        elif q.stat == "count":  # a count block, or the cells of a histogram or table of the same grouping
            n = T.sum(axis=1)
            cells = float(prefix_variance(block.bins, 0.0)[-1]) if block.kind == "tree" else block.cells
            se = np.full(len(n), math.sqrt(v * cells))
            out.append(Answer(q, names, np.maximum(n, 0.0), se, np.maximum(n - k * se, 0.0), np.maximum(n + k * se, 0.0)))
        elif q.stat in ("quantile", "median"):
            f = schema.features[block.column]
            qq = float(q.q or 0.5)
            res = quantile_estimate(T, v, qq, f.lower, f.upper - f.lower, k,
                                    prefix_variance(block.bins, qq) if block.kind == "tree" else None)
            out.append(Answer(q, names, *res))
        else:  # histogram or table cells
            se = np.full(T.shape, math.sqrt(v))
            edges = None
            if block.bins:
                f = schema.features[block.column]
                edges = np.linspace(f.lower, f.upper, block.bins + 1)
            out.append(Answer(q, names, np.maximum(T, 0.0), se, np.maximum(T - k * se, 0.0),
                              np.maximum(T + k * se, 0.0), edges))
    return out
