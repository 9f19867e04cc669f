"""The random forest's automatic shape (``random_forest/depth.py``) against the rule written out here with an
independent noise std (the continuous Laplace's sqrt(2) T / epsilon for the discrete Laplace of scale T / epsilon):
an explicit ``depth`` or ``trees`` wins (a contract), no ``records`` gives the library defaults, a filled
categorical domain follows the signal-to-noise rule, a numeric one follows n alone (one level past D_n), without
``trees`` the forest trades trees (16..30) for that depth under the count cap, and every party and the
coordinator (one ``job_forest`` of the public spec) draw the same shape. Deterministic: no false alarms.
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from dpfed.algorithms import DPRandomForestClassifier, get_algorithm
from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.params import validate
from dpfed.algorithms.random_forest import job_forest
from dpfed.algorithms.random_forest.options import add_arguments, params_from_args
from dpfed.algorithms.random_forest.plan import DEFAULT_DEPTH
from dpfed.data.schema import Feature, Schema

DENSE = Schema((Feature("a", "categorical", categories=3), Feature("b", "categorical", categories=4)), n_classes=2)
NUMERIC = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=1.0)),
                 n_classes=2)


THREE = Schema(NUMERIC.features, n_classes=3)
CAP = 1 << 22   # released counts trees x 2^depth x classes (options.MAX_COUNTS)


def _shape(schema: Schema, **kw) -> tuple[int, int]:
    params = validate(get_algorithm("random-forest"), {"delta": 0.0, **kw}, schema)
    forest = job_forest(JobSpec("rf-depth", "random-forest", params, schema))
    return forest.trees, forest.depth


def _depth(schema: Schema, **kw) -> int:
    return _shape(schema, **{"trees": 10, **kw})[1]


def _numeric_shape(n: int, k: int, eps: float) -> tuple[int, int]:
    """The automatic (trees, depth) of a numeric domain, written out: target round(log2(n / k)) + 3; when the
    noise of 16 trees per unit of L2 sensitivity is at most 8 (pure epsilon: the Laplace std sqrt(2) 16 / eps
    over sqrt(16); (1, 1e-6): the Gaussian's z = 4.2), the most trees in 16..30 whose T 2^target k counts fit
    the cap, else 30; then the deepest depth <= target that fits."""
    target = round(math.log2(n / k)) + 3
    trade = math.sqrt(2.0) * 16 / eps / 4.0 <= 8.0
    trees = min(30, max(16, CAP // ((1 << target) * k))) if trade else 30
    depth = max(d for d in range(1, target + 1) if trees * (1 << d) * k <= CAP)
    return trees, depth


def test_explicit_depth_and_no_records_default() -> None:
    assert _depth(DENSE, epsilon=1.0, depth=6, records=1000) == 6
    assert _depth(DENSE, epsilon=1.0) == DEFAULT_DEPTH
    assert _shape(NUMERIC, epsilon=1.0) == (30, DEFAULT_DEPTH)                     # no records: the defaults
    assert _shape(NUMERIC, epsilon=1.0, depth=6, records=32561) == (30, 6)         # explicit depth: 30 trees


def test_filled_domain_follows_signal_to_noise() -> None:
    n, trees = 1000, 10
    for eps in (0.3, 1.0, 3.0):
        sigma = math.sqrt(2.0) * trees / eps                       # continuous Laplace std, scale T / eps
        want = min(round(math.log2(n / 2)) + 2, math.floor(math.log2(n / (2.0 * sigma))))
        assert _depth(DENSE, epsilon=eps, records=n) == max(1, want), eps
    assert _depth(DENSE, epsilon=0.01, records=n) == 1           # the noise swamps every split: one split left


def test_numeric_or_sparse_domain_follows_n() -> None:
    for eps in (0.1, 1.0):
        assert _depth(NUMERIC, epsilon=eps, records=1000) == round(math.log2(1000 / 2)) + 3
        assert _depth(DENSE, epsilon=eps, records=5) == round(math.log2(5 / 2)) + 3   # 12 cells > 2 x 5 records


def test_without_trees_the_forest_trades_trees_for_depth_under_the_cap() -> None:
    """Adult's size (32561, 2 classes): 16 trees of depth 17 (30 trees allow only 16); a size whose depth fits
    21 trees (3 classes, target 16); a larger one where the floor of 16 trees holds and the depth gives way;
    a small one that keeps 30 trees. At epsilon 3 the trade happens, at 0.3 (noisier) it does not: 30 trees at
    the capped depth. Explicit trees are honoured and only the depth fits the cap."""
    cases = [(NUMERIC, 32561, 2), (THREE, 3 * 2 ** 13, 3), (NUMERIC, 2 * 2 ** 16, 2), (NUMERIC, 1000, 2)]
    seen = set()
    for schema, n, k in cases:
        for eps in (0.3, 3.0):
            want = _numeric_shape(n, k, eps)
            assert _shape(schema, epsilon=eps, records=n) == want, (n, k, eps)
            assert want[0] * (1 << want[1]) * k <= CAP
            seen.add(want)
    assert seen == {(16, 17), (21, 16), (30, 12), (30, 16), (30, 15)}
    assert _shape(NUMERIC, epsilon=1.0, records=32561, trees=30) == (30, 16)       # the cap: 30 x 2^16 x 2
    assert _shape(NUMERIC, epsilon=1.0, records=32561, trees=8) == (8, 17)


def test_filled_domain_keeps_thirty_trees() -> None:
    for eps in (0.3, 3.0):
        assert _shape(DENSE, epsilon=eps, records=1000)[0] == 30


def test_party_and_coordinator_share_the_automatic_shape() -> None:
    """An automatic secure job: the party's release length (its secure plan) is the coordinator's forest's, the
    T 2^D k of the shape written out above."""
    from dpfed.algorithms.contract import Task
    from dpfed.algorithms.random_forest.secure import secure_plan
    from dpfed.simulation.inprocess import secure_spec

    params = validate(get_algorithm("random-forest"), {
        "epsilon": 1.0, "delta": 1e-6, "records": 32561, "noise": "distributed", "secure_aggregation": True,
        "min_survivors": 4}, NUMERIC)
    spec = secure_spec(JobSpec("rf-auto", "random-forest", params, NUMERIC), [f"p{i}" for i in range(5)], 32561)
    coord = get_algorithm("random-forest").coordinator(spec, [f"p{i}" for i in range(5)])
    trees, depth = _numeric_shape(32561, 2, 1.0)    # 4.2 <= 8: the Gaussian at (1, 1e-6) trades like eps >= 0.71
    plan = secure_plan(spec, Task("rf-auto", 0, "rf-leaf-counts"))
    assert plan is not None and plan.length == coord.forest.length == trees * (1 << depth) * 2
    assert (coord.forest.trees, coord.forest.depth) == (trees, depth) and "trees" not in spec.params


def test_cli_keeps_explicit_depth_and_omits_the_default() -> None:
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    assert "depth" not in params_from_args(ap.parse_args([]))
    assert "trees" not in params_from_args(ap.parse_args([]))
    assert params_from_args(ap.parse_args(["--rf-depth", "5"]))["depth"] == 5
    assert params_from_args(ap.parse_args(["--rf-trees", "12"]))["trees"] == 12


@pytest.mark.filterwarnings("ignore:SecureRNG seeded explicitly")
def test_estimator_takes_a_public_record_bound_for_the_automatic_depth() -> None:
    """``DPRandomForestClassifier(records=n)``: the automatic depth of a job with the public bound n (here the
    signal-to-noise depth of a filled domain, below the default); without it the library default; never the
    number of rows it is given (20 rows here, a bound of 1000)."""
    g = np.random.default_rng(0)
    X, y = np.column_stack([g.integers(0, 3, 20), g.integers(0, 4, 20)]), g.integers(0, 2, 20)
    kw = {"epsilon": 1.0, "delta": 0.0, "n_estimators": 10, "schema": DENSE, "random_state": 0}
    est = DPRandomForestClassifier(records=1000, **kw).fit(X, y)
    assert est.depth_ == _depth(DENSE, epsilon=1.0, records=1000) != DEFAULT_DEPTH
    assert est.get_params()["records"] == 1000
    assert DPRandomForestClassifier(**kw).fit(X, y).depth_ == DEFAULT_DEPTH
    assert DPRandomForestClassifier(records=1000, max_depth=3, **kw).fit(X, y).depth_ == 3
    auto = {**kw, "n_estimators": None, "schema": NUMERIC}
    Xn = np.column_stack([g.integers(0, 3, 20), g.uniform(0, 1, 20)])
    est = DPRandomForestClassifier(records=32561, **auto).fit(Xn, y)                   # trees and depth chosen
    assert (est.trees_, est.depth_) == _numeric_shape(32561, 2, 1.0) == (16, 17)
    assert est.get_params()["n_estimators"] is None
    assert DPRandomForestClassifier(**auto).fit(Xn, y).trees_ == 30                   # no bound: the default
