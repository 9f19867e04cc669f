"""The PCA step's defaults and the projected features' bounds (pca+naive-bayes scored 0.23 on satimage at
epsilon 4). Two causes, each with a test that fails on the old code:

* PCA's default clip was the public box's diameter: on satimage (4,435 records) the noise (~C^2) swamped the
  covariance and the released subspace captured 0.22-0.27 of what non-private PCA captures at the pipeline's
  PCA budget (epsilon 1 of 4). With the default a quarter of the diameter: 0.87.
* The learner's bounds were the box [-C, C]^k although the components spread over 1/20 of it, so naive Bayes
  scaled its noise and its variance floor to a range the records never fill. Component i is now clamped to
  b_i = pca_bound sqrt(lambda_i) (lambda_i released) and rescaled into the box; the party's projection is
  compared here with an independent NumPy computation, and any bounds a coordinator sends keep records in the box.
"""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.decomposition import PCA

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.params import validate
from dpfed.algorithms.pca.model import captured_variance
from dpfed.algorithms.pipeline import project
from dpfed.algorithms.pipeline.spec import DEFAULT_BOUND, component_bounds
from dpfed.data.datasets import load_dataset, split_parties
from dpfed.data.schema import Schema
from dpfed.simulation.inprocess import run_inprocess

D, K = 5, 2
BOX = Schema.numeric_box(D, 0.0, 4.0, n_classes=2)
PIPE = {"epsilon": 2.0, "delta": 1e-5, "pca_k": K, "pca_clip": 0.5}


def _spec() -> JobSpec:
    algo = get_algorithm("pca+naive-bayes")
    return JobSpec("pipe", "pca+naive-bayes", validate(algo, PIPE, BOX), BOX)


def _records(n: int = 200) -> np.ndarray:
    return np.random.default_rng(1).uniform(0.0, 4.0, size=(n, D))


def test_default_pca_clip_keeps_the_subspace_on_a_few_thousand_records():
    """satimage, PCA with the pipeline's share at epsilon 4 (epsilon 1, delta 2.5e-6), every PCA default: the
    captured variance on the test set against non-private PCA's. 0.87 / 0.87 for two seeds with the default clip
    (a quarter of the diameter), 0.23 / 0.27 with the diameter (the old default): the bar 0.6 separates them by
    many times the seed-to-seed spread (0.01); the noise is seeded, so the outcome is reproducible."""
    ds = load_dataset("satimage")
    X = ds.schema.validate(ds.X_train, clip_numeric=True)
    Xt = ds.schema.validate(ds.X_test, clip_numeric=True)
    ref = captured_variance(PCA(5).fit(X).components_, Xt)
    data = split_parties(ds.X_train, ds.y_train, 3, "iid", np.random.default_rng(0))
    m = run_inprocess(JobSpec("pca-default", "pca", {"epsilon": 1.0, "delta": 2.5e-6, "k": 5}, ds.schema),
                      data, seed=0).model
    assert captured_variance(m["components"], Xt) / ref > 0.6


def test_projection_is_clamped_to_the_bounds_and_rescaled_into_the_box():
    """The party's projection equals C clip(V u, +-b) / b computed here from the spec's public geometry."""
    spec, X = _spec(), _records()
    g = np.random.default_rng(2)
    V = np.linalg.qr(g.normal(size=(D, K)))[0].T
    center = np.full(D, 2.0)
    b = np.array([0.05, 0.2])
    C, scale = 0.5, 4.0
    U = (X - center) / scale
    U = U * np.minimum(1.0, C / np.linalg.norm(U, axis=1))[:, None]
    want = C * np.clip(U @ V.T, -b, b) / b
    task = Task("pipe", 2, "nb-statistics", arrays={"pca_center": center, "pca_components": V, "pca_bounds": b})
    np.testing.assert_allclose(project(spec, task, X), want, rtol=1e-12, atol=1e-15)
    # the records fill the box: most of the first component sits at its bound
    assert np.mean(np.abs(project(spec, task, X)[:, 0]) > 0.9 * C) > 0.5
    # no bounds (a task of an older coordinator): the plain projection, as before
    old = Task("pipe", 2, "nb-statistics", arrays={"pca_center": center, "pca_components": V})
    np.testing.assert_allclose(project(spec, old, X), U @ V.T, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("bounds", [[1e-300, 1e-300], [-1.0, 0.0], [1e9, 0.7], [0.5, 0.5]])
def test_any_bounds_a_coordinator_sends_keep_the_records_in_the_box(bounds):
    spec, X = _spec(), _records()
    V = np.eye(K, D)
    task = Task("pipe", 2, "nb-statistics", arrays={"pca_center": np.full(D, 2.0), "pca_components": V,
                                                    "pca_bounds": np.array(bounds)})
    Y = project(spec, task, X)
    assert np.all(np.isfinite(Y)) and np.abs(Y).max() <= 0.5


@pytest.mark.parametrize("bounds", [[np.nan, 1.0], [np.inf, 1.0], [1.0], [[1.0, 1.0]]])
def test_bad_bounds_are_refused(bounds):
    task = Task("pipe", 2, "nb-statistics", arrays={"pca_center": np.full(D, 2.0), "pca_components": np.eye(K, D),
                                                    "pca_bounds": np.array(bounds)})
    with pytest.raises(TaskRejected, match="pca_bounds"):
        project(_spec(), task, _records(5))


def test_bounds_come_from_the_released_variances():
    """b_i = pca_bound sqrt(explained_variance_i) / scale, C where that is not in (0, C)."""
    model = {"clip": np.array(0.5), "scale": np.array(4.0), "explained_variance": np.array([0.16, 0.0016, -1.0, 64.0])}
    np.testing.assert_allclose(component_bounds(model, 3.0), [0.3, 0.03, 0.5, 0.5])
    # the coordinator sends them with every learner task and puts them in the model
    spec = _spec()
    algo = get_algorithm("pca+naive-bayes")
    X = _records(300)
    y = (X[:, 0] > 2.0).astype(np.int64)
    run = run_inprocess(spec, [(X[:150], y[:150]), (X[150:], y[150:])], seed=0)
    m = run.model
    np.testing.assert_array_equal(m["pca_bounds"], component_bounds(
        {"clip": m["pca_clip"], "scale": m["pca_scale"], "explained_variance": m["pca_explained_variance"]},
        DEFAULT_BOUND))
    assert algo.evaluate(m, X, y, BOX)["test_accuracy"] > 0.5
