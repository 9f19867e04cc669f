"""The random forest's automatic depth (``random_forest/depth.py``) against the rule written out here with an
independent noise std (the continuous Laplace's sqrt(2) T / epsilon for the discrete Laplace of scale T / epsilon):
an explicit ``depth`` wins (a contract), no ``records`` gives the library default, a filled categorical domain
follows the signal-to-noise rule, a numeric one follows n alone, and every party and the coordinator (one
``job_forest`` of the public spec) draw the same depth. Deterministic: no false alarms.
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


def _depth(schema: Schema, **kw) -> int:
    params = validate(get_algorithm("random-forest"), {"trees": 10, "delta": 0.0, **kw}, schema)
    return job_forest(JobSpec("rf-depth", "random-forest", params, schema)).depth


def test_explicit_depth_and_no_records_default() -> None:
    assert _depth(DENSE, epsilon=1.0, depth=6, records=1000) == 6
    assert _depth(DENSE, epsilon=1.0) == DEFAULT_DEPTH


def test_filled_domain_follows_signal_to_noise() -> None:
    n, trees = 1000, 10
    for eps in (0.3, 1.0, 3.0):
        sigma = math.sqrt(2.0) * trees / eps                       # continuous Laplace std, scale T / eps
        want = min(round(math.log2(n / 2)) + 2, math.floor(math.log2(n / (2.0 * sigma))))
        assert _depth(DENSE, epsilon=eps, records=n) == max(1, want), eps
    assert _depth(DENSE, epsilon=0.01, records=n) == 1           # the noise swamps every split: one split left


def test_numeric_or_sparse_domain_follows_n() -> None:
    for eps in (0.1, 1.0):
        assert _depth(NUMERIC, epsilon=eps, records=1000) == round(math.log2(1000 / 2)) + 2
        assert _depth(DENSE, epsilon=eps, records=5) == round(math.log2(5 / 2)) + 2   # 12 cells > 2 x 5 records


def test_cli_keeps_explicit_depth_and_omits_the_default() -> None:
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    assert "depth" not in params_from_args(ap.parse_args([]))
    assert params_from_args(ap.parse_args(["--rf-depth", "5"]))["depth"] == 5


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
