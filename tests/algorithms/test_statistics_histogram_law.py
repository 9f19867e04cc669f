"""The one-party histogram is diffprivlib's histogram in law (issue 27: "histogram no worse than diffprivlib").

diffprivlib 0.6.6's ``tools.histogram`` adds ``GeometricTruncated(epsilon, sensitivity=1, lower=0)`` to each
NumPy count: the two-sided geometric law P(X = k) = (1 - q) / (1 + q) q^|k|, q = e^(-epsilon), with values below
0 mapped to 0, so a cell of count c is released as Y = max(c + X, 0):
P(Y = 0) = q^c / (1 + q), P(Y = y) = (1 - q) / (1 + q) q^|y - c| for y >= 1. dpfed's one-party histogram job
(one level, mechanism auto, delta 1e-6: Laplace on whole counts) releases the discrete Laplace of scale
1 / epsilon (the same law) and the coordinator clamps the cell at 0. This is the geometric mechanism, optimal for
a single counting query (Ghosh, Roughgarden & Sundararajan 2009), so in law neither can beat the other: the
benchmark's histogram ratio 1 party / diffprivlib is 1 in expectation. Checked here on the same cells for both,
against the PMF above built here.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.driver import run_local
from dpfed.algorithms.params import validate
from dpfed.algorithms.registry import get_algorithm
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Feature, Schema

SCHEMA = Schema((Feature("u", "numeric", lower=0.0, upper=6.0),), n_classes=0)
COUNTS = (0, 1, 2, 3, 5, 8)   # cell c holds COUNTS[c] records: clamping at 0 matters for the small ones
EPS = 0.5
RUNS = 400


def _records() -> np.ndarray:
    return np.repeat(np.arange(len(COUNTS)) + 0.5, COUNTS)[:, None]


def _pvalue(y: np.ndarray, c: int, q: float) -> float:
    """Chi-square p-value of released values ``y`` of a cell of count ``c`` against max(c + X, 0), X two-sided
    geometric with ratio ``q``; categories 0, 1, ... merged from the right until each expects >= 5 draws."""
    from scipy import stats

    top = c + int(12 / -math.log(q))
    p = np.array([q ** c / (1 + q)] + [(1 - q) / (1 + q) * q ** abs(v - c) for v in range(1, top + 1)])
    p = np.append(p, 1.0 - p.sum())  # y > top
    obs = np.bincount(np.minimum(y.astype(np.int64), top + 1), minlength=top + 2).astype(float)
    exp = p * len(y)
    while len(exp) > 2 and exp[-1] < 5:  # fold the thin tail into its neighbour
        exp[-2] += exp[-1]
        obs[-2] += obs[-1]
        exp, obs = exp[:-1], obs[:-1]
    return float(stats.chisquare(obs, exp).pvalue)


def _dpfed_releases() -> np.ndarray:
    algo = get_algorithm("statistics")
    p = validate(algo, {"epsilon": EPS, "delta": 1e-6, "queries": [f"histogram:u:bins={len(COUNTS)}"],
                        "mechanism": "auto"}, SCHEMA)
    spec = JobSpec("hist-law", "statistics", p, SCHEMA)
    X = _records()
    out = [run_local(algo, spec, X, None, SecureRNG.from_seed(f"law{i}")).coordinator.answers[0].value
           for i in range(RUNS)]
    return np.asarray(out, dtype=np.float64).reshape(RUNS, len(COUNTS))


def _diffprivlib_releases() -> np.ndarray:
    import diffprivlib.tools as dt

    x = _records()[:, 0]
    return np.array([dt.histogram(x, epsilon=EPS, bins=len(COUNTS), range=(0.0, 6.0), random_state=i)[0]
                     for i in range(RUNS)], dtype=np.float64)


@pytest.mark.timeout(120)
def test_one_party_histogram_is_diffprivlibs_truncated_geometric_in_law():
    """400 one-party jobs and 400 diffprivlib calls on the same 6 cells (counts 0..8), epsilon 0.5: each cell's
    releases against max(c + X, 0), q = e^-0.5, by a chi-square test at p > 1e-4: 12 tests, a false alarm below
    1.2e-3 (chi-square approximation, every category expecting >= 5 draws). Power, checked in the same test:
    dpfed's releases reject the law at epsilon / 2 (q = e^-0.25), and the law without the clamp at 0 (cell 0's
    releases are never negative, and half its mass would be) is not what either releases."""
    q = math.exp(-EPS)
    ours, theirs = _dpfed_releases(), _diffprivlib_releases()
    assert (ours >= 0).all() and (ours == np.round(ours)).all() and (theirs >= 0).all()
    for c, n in enumerate(COUNTS):
        assert _pvalue(ours[:, c], n, q) > 1e-4, ("dpfed", n)
        assert _pvalue(theirs[:, c], n, q) > 1e-4, ("diffprivlib", n)
    # the same law: both put about q^0 / (1 + q) = 0.62 of cell 0's mass at 0 (the clamped negative half and 0)
    assert abs(np.mean(ours[:, 0] == 0) - 1 / (1 + q)) < 0.1 and abs(np.mean(theirs[:, 0] == 0) - 1 / (1 + q)) < 0.1
    # power: a twice wider law is rejected on the pooled cells
    assert min(_pvalue(ours[:, c], n, math.exp(-EPS / 2)) for c, n in enumerate(COUNTS)) < 1e-4
