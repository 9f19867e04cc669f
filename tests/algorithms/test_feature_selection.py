"""Private feature selection (issue 27 item 3) against independent references: the contingency table equals a
count written out record by record; a far record moves it by exactly d cells (its planned sensitivity); the noise
measured from the released tables has the variance of the event it reports (false-alarm rate 1e-4,
``tests/support/noise_checks.py``); the mutual information equals scikit-learn's on an exact table; a planted
informative feature is selected from the noisy table."""
from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.dp_event import DiscreteLaplaceDpEvent
from sklearn.metrics import mutual_info_score

from dpfed.algorithms.feature_selection import (
    TableLayout,
    contingency_counts,
    feature_scores,
    mutual_information,
    release_tables,
    select_features,
)
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Feature, Schema
from noise_checks import assert_gaussian_variance, assert_heavy_variance, discrete_laplace_moments

SCHEMA = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=10.0),
                 Feature("b", "categorical", categories=5), Feature("v", "numeric", lower=-5.0, upper=5.0)),
                n_classes=2)


def _data(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    y = g.integers(0, 2, n)
    b = np.where(g.random(n) < 0.8, y * 2, g.integers(0, 5, n))       # b carries the class
    X = np.column_stack([g.integers(0, 3, n), g.uniform(0, 10, n), b, g.uniform(-5, 5, n)])
    return X.astype(float), y


def _reference(X: np.ndarray, y: np.ndarray, bins: int) -> np.ndarray:
    lay = TableLayout.from_schema(SCHEMA, bins)
    out = np.zeros(lay.length, np.int64)
    for i in range(len(X)):
        for j, f in enumerate(SCHEMA.features):
            if f.kind == "categorical":
                v = int(X[i, j])
            else:
                x = min(max(X[i, j], f.lower), f.upper)
                v = min(int((x - f.lower) / (f.upper - f.lower) * bins), bins - 1)
            out[lay.offsets[j] + v * 2 + y[i]] += 1
    return out


def test_table_equals_a_count_record_by_record_and_a_far_record_moves_d_cells():
    X, y = _data(300)
    X[:5, 1], X[5:10, 3] = 1e9, -1e9
    np.testing.assert_array_equal(contingency_counts(X, y, SCHEMA, bins=8), _reference(X, y, 8))
    far = np.array([[1.0, 1e12, 2.0, -1e12]])
    diff = contingency_counts(np.vstack([X, far]), np.append(y, 1), SCHEMA, 8) - contingency_counts(X, y, SCHEMA, 8)
    assert np.abs(diff).sum() == SCHEMA.n_features and diff.max() == 1


@pytest.mark.parametrize("wide", [False, True])
def test_noise_of_the_released_tables_matches_the_reported_event(wide):
    """d = 4: the discrete Laplace of scale d / eps (smaller variance than the Gaussian); d = 20 numeric features:
    round(sigma Z), sigma the reported multiplier times sqrt(d). 60 releases; false-alarm rate 1e-4."""
    schema = Schema.numeric_box(20, 0.0, 1.0, n_classes=2) if wide else SCHEMA
    g = np.random.default_rng(2)
    X, y = (g.uniform(size=(200, 20)), g.integers(0, 2, 200)) if wide else _data(200)
    clean = contingency_counts(X, y, schema)
    resid, event, var = [], None, 0.0
    for j in range(60):
        noisy, event, var = release_tables(X, y, schema, epsilon=1.0, delta=1e-6, rng=SecureRNG.from_seed(j))
        resid.append(noisy - clean)
    r, d = np.concatenate(resid).astype(float), schema.n_features
    if wide:
        assert isinstance(event, dpa.GaussianDpEvent)
        sigma = event.noise_multiplier * math.sqrt(d)   # the L2 sensitivity sqrt(d)
        assert var == pytest.approx(sigma ** 2 + 1 / 12, rel=1e-9)
        assert_gaussian_variance(r, sigma ** 2 + 1 / 12)
    else:
        assert isinstance(event, DiscreteLaplaceDpEvent) and event.sensitivity == d
        assert event.noise_parameter * d <= 1.0 + 1e-12          # pure epsilon-DP at the job's epsilon
        lap_var, kurt = discrete_laplace_moments(d / 1.0)
        assert var == pytest.approx(lap_var, rel=1e-6)
        assert_heavy_variance(r, lap_var, kurt)


def test_scores_and_selection():
    X, y = _data(2000, seed=1)
    exact = contingency_counts(X, y, SCHEMA)
    lay = TableLayout.from_schema(SCHEMA)
    block = exact[lay.offsets[2]:lay.offsets[2] + 5 * 2].reshape(5, 2).astype(float)
    assert mutual_information(block) == pytest.approx(mutual_info_score(X[:, 2].astype(int), y), rel=1e-9)
    noisy, _, var = release_tables(X, y, SCHEMA, epsilon=0.5, delta=1e-6, rng=SecureRNG.from_seed(3))
    assert select_features(SCHEMA, feature_scores(noisy, SCHEMA, noise_var=var), 1) == ["b"]
    with pytest.raises(ValueError, match="m must lie"):
        select_features(SCHEMA, np.zeros(4), 5)
