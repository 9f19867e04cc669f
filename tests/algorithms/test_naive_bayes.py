"""Tests of differentially private naive Bayes (dpfed.algorithms.naive_bayes). Budget: < 60 s on 2 cores.

Statistical tests use fixed seeds (deterministic outcomes); thresholds sit several standard
deviations (measured over 10 seeds, bench/bench_naive_bayes.py) below the expected value.
"""
from __future__ import annotations

import argparse
import math
import warnings

import numpy as np
import pytest

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.contract import Aggregate, JobSpec, Task, TaskRejected, sum_combine
from dpfed.algorithms.naive_bayes import (
    DataDerivedSchemaWarning,
    DPNaiveBayes,
    Layout,
    NaiveBayesCoordinator,
    NaiveBayesParty,
    evaluate,
    plan_release,
    simplex_rows,
    sufficient_statistics,
)
from dpfed.core import accounting
from dpfed.core.rng import ReproducibleSeedWarning, SecureRNG
from dpfed.data.datasets import load_dataset, split_parties
from dpfed.data.schema import DataValidationError, Feature, Schema
from dpfed.simulation import run_inprocess

pytestmark = pytest.mark.filterwarnings("ignore::dpfed.core.rng.ReproducibleSeedWarning")


def _spec(schema: Schema, eps: float = 1.0, delta: float = 0.0, **kw) -> JobSpec:
    return JobSpec("job-nb", "naive-bayes", {"epsilon": eps, "delta": delta, **kw}, schema)


# --------------------------------------------------------------------------- non-private limit

@pytest.mark.parametrize("name", ["nursery", "mushroom"])
def test_huge_epsilon_matches_sklearn_categorical_nb(name):
    from sklearn.naive_bayes import CategoricalNB

    d = load_dataset(name)
    est = DPNaiveBayes(epsilon=1e5, schema=d.schema, random_state=0).fit(d.X_train, d.y_train)
    ref = CategoricalNB(alpha=1.0, min_categories=d.schema.domain_sizes).fit(d.X_train.astype(int), d.y_train)
    Xte = d.X_test.astype(int)
    assert np.mean(est.predict(d.X_test) == ref.predict(Xte)) >= 0.999
    np.testing.assert_allclose(est.predict_proba(d.X_test), ref.predict_proba(Xte), atol=1e-3)


def test_huge_epsilon_matches_sklearn_gaussian_nb(adult):
    from sklearn.naive_bayes import GaussianNB

    num = adult.schema.numeric
    schema = Schema(tuple(f for f in adult.schema.features if f.kind == "numeric"), n_classes=2)
    est = DPNaiveBayes(epsilon=1e6, schema=schema, random_state=0, var_floor=1e-12)
    est.fit(adult.X_train[:, num], adult.y_train)
    ref = GaussianNB(var_smoothing=1e-12).fit(adult.X_train[:, num], adult.y_train)
    assert np.mean(est.predict(adult.X_test[:, num]) == ref.predict(adult.X_test[:, num])) >= 0.995
    half = (schema.upper - schema.lower) / 2
    np.testing.assert_allclose(est.model_["num_mean"], ref.theta_, atol=1e-4 * half.max(), rtol=1e-4)
    np.testing.assert_allclose(est.model_["num_var"], ref.var_, rtol=2e-3)


# --------------------------------------------------------------------------- privacy

@pytest.mark.parametrize("eps,delta,mech", [(1.0, 0.0, "laplace"), (0.1, 0.0, "laplace"),
                                            (1.0, 1e-6, "gaussian"), (0.1, 1e-6, "gaussian"),
                                            (2.0, 1e-6, "laplace")])
def test_spend_equals_claim(adult, eps, delta, mech):
    spec = _spec(adult.schema, eps, delta, mechanism="auto" if mech == "gaussian" or delta == 0 else mech)
    plan = plan_release(spec)
    assert plan.mechanism == mech
    event = NaiveBayesParty().job_event(spec)
    spent = accounting.epsilon(event, delta)
    assert spent <= eps * (1 + 1e-9)
    assert spent >= eps * (1 - 1e-4)
    # the mechanism's own event never claims more than the plan that was charged
    stats = np.zeros(Layout.from_schema(adult.schema).length, np.int64)
    from dpfed.core.mechanisms import discrete_laplace, rounded_gaussian
    rng = SecureRNG.from_seed(1)
    rel = (discrete_laplace(stats, sensitivity=plan.l1, epsilon=eps, rng=rng) if mech == "laplace"
           else rounded_gaussian(stats, sensitivity=plan.l2, sigma=plan.noise, rng=rng))
    assert accounting.epsilon(rel.event, max(delta, 1e-12)) <= eps * (1 + 1e-9)


def test_auto_picks_gaussian_only_with_delta(adult):
    assert plan_release(_spec(adult.schema, 1.0, 0.0)).mechanism == "laplace"
    assert plan_release(_spec(adult.schema, 1.0, 1e-6)).mechanism == "gaussian"
    with pytest.raises(ValueError, match="delta > 0"):
        plan_release(_spec(adult.schema, 1.0, 0.0, mechanism="gaussian"))
    with pytest.raises(ValueError, match="mechanism"):
        plan_release(_spec(adult.schema, 1.0, 0.0, mechanism="cauchy"))


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_one_record_moves_the_vector_within_its_sensitivity(adult, delta):
    """Add/remove one record (incl. extreme ones at the bounds): L1 <= plan.l1, L2 <= plan.l2."""
    layout = Layout.from_schema(adult.schema)
    plan = plan_release(_spec(adult.schema, 1.0, delta))
    rng = np.random.default_rng(3)
    X, y = adult.X_train[:500].copy(), adult.y_train[:500].copy()
    extreme = X[:20].copy()
    num = adult.schema.numeric
    extreme[:, num] = np.where(rng.random((20, num.sum())) < 0.5, adult.schema.lower, adult.schema.upper)
    X = np.vstack([X, extreme])
    y = np.concatenate([y, rng.integers(0, 2, 20)])
    full = sufficient_statistics(X, y, layout, plan.weights)
    for i in list(range(0, 500, 50)) + list(range(500, 520)):
        keep = np.arange(len(X)) != i
        diff = full - sufficient_statistics(X[keep], y[keep], layout, plan.weights)
        assert np.abs(diff).sum() <= plan.l1
        assert np.sqrt(np.sum(diff.astype(float) ** 2)) <= plan.l2 + 1e-9


def test_inprocess_job_charges_exactly_its_epsilon(adult):
    spec = _spec(adult.schema, 0.5, 1e-6)
    parts = split_parties(adult.X_train, adult.y_train, 3, rng=np.random.default_rng(0))
    res = run_inprocess(spec, parts, seed=0)
    assert res.rounds == 1
    assert 0.5 * (1 - 1e-4) <= res.epsilon_spent <= 0.5 * (1 + 1e-9)
    assert set(res.party_epsilon) == {"party-0", "party-1", "party-2"}


# --------------------------------------------------------------------------- accuracy

@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_adult_accuracy_at_epsilon_1_with_5_parties(adult, delta):
    """Seed 0, iid split (default_rng(0)), 5 parties, epsilon 1. Mean over 10 seeds: 0.836
    (Laplace, std 0.008) / 0.837 (Gaussian, std 0.003); the threshold 0.81 is > 3 std below."""
    parts = split_parties(adult.X_train, adult.y_train, 5, rng=np.random.default_rng(0))
    res = run_inprocess(_spec(adult.schema, 1.0, delta), parts, seed=0)
    acc = get_algorithm("naive-bayes").evaluate(res.model, adult.X_test, adult.y_test, adult.schema)
    assert acc["test_accuracy"] >= 0.81


# --------------------------------------------------------------------------- bad input

def _party_answer(schema, X, y, eps=1.0):
    spec = _spec(schema, eps)
    return NaiveBayesParty().answer(spec, Task("job-nb", 0, "nb-statistics"), X, y, SecureRNG.from_seed(0))


def test_nan_and_out_of_domain_give_clear_errors_without_values(adult):
    X, y = adult.X_train[:200].copy(), adult.y_train[:200]
    X[5, 0] = np.nan  # age
    with pytest.raises(DataValidationError, match="'age'.*NaN"):
        _party_answer(adult.schema, X, y)
    with pytest.raises(DataValidationError, match="NaN"):
        DPNaiveBayes(schema=adult.schema, random_state=0).fit(X, y)
    X = adult.X_train[:200].copy()
    X[7, 1] = 987  # workclass code far outside its 9 codes
    with pytest.raises(DataValidationError, match="'workclass'.*domain") as info:
        _party_answer(adult.schema, X, y)
    assert "987" not in str(info.value)
    with pytest.raises(DataValidationError, match="domain") as info:
        DPNaiveBayes(schema=adult.schema, random_state=0).fit(X, y)
    assert "987" not in str(info.value)


def test_bad_labels_give_clear_errors(adult):
    X = adult.X_train[:100]
    with pytest.raises(DataValidationError, match="classes 0..1"):
        _party_answer(adult.schema, X, np.full(100, 2))
    with pytest.raises(DataValidationError, match="needs labels"):
        _party_answer(adult.schema, X, None)
    with pytest.raises(DataValidationError, match="expected 100 labels"):
        _party_answer(adult.schema, X, np.zeros(99, np.int64))


def test_class_absent_at_a_party_still_gives_a_full_model(adult):
    """A party with no record of class 1 releases noisy zeros for it: no error, same shapes."""
    y = adult.y_train
    only0 = (adult.X_train[y == 0][:3000], y[y == 0][:3000])
    mixed = (adult.X_train[:5000], y[:5000])
    res = run_inprocess(_spec(adult.schema, 1.0), [only0, mixed], seed=2)
    assert res.model["class_log_prior"].shape == (2,)
    assert np.all(np.isfinite(res.model["class_log_prior"]))
    assert np.all(np.isfinite(res.model["num_var"]))


def test_task_checks_and_malformed_answers(adult):
    spec = _spec(adult.schema)
    party = NaiveBayesParty()
    party.check_task(spec, Task("job-nb", 0, "nb-statistics"))
    for bad in [Task("job-nb", 1, "nb-statistics"), Task("job-nb", 0, "gradient"),
                Task("other", 0, "nb-statistics"), Task("job-nb", 0, "nb-statistics", params={"epsilon": 9})]:
        with pytest.raises(TaskRejected):
            party.check_task(spec, bad)
    coord = NaiveBayesCoordinator(spec, ["a", "b"])
    task = coord.next_task()
    length = Layout.from_schema(adult.schema).length
    good = {"stats": np.zeros(length, np.int64)}

    def combined(**answers):
        return sum_combine(task, [Aggregate(a, (name,)) for name, a in answers.items()])

    with pytest.raises(ValueError, match="missing"):
        coord.absorb(task, combined(a=good))
    with pytest.raises(ValueError, match="different shapes"):
        coord.absorb(task, combined(a=good, b={"stats": np.zeros(length - 1, np.int64)}))
    with pytest.raises(ValueError, match="integer 'stats' vector"):
        coord.absorb(task, combined(a=good, b={"stats": np.zeros(length)}))
    assert coord.progress == 0.0
    coord.absorb(task, combined(a=good, b=good))
    assert coord.progress == 1.0 and coord.next_task() is None
    with pytest.raises(ValueError):
        coord.absorb(task, combined(a=good, b=good))


# --------------------------------------------------------------------------- post-processing

def test_simplex_projection_is_the_euclidean_projection():
    rng = np.random.default_rng(5)
    V = rng.normal(0, 50, (200, 7)) + rng.uniform(-20, 60, (200, 1))
    totals = rng.uniform(1, 300, 200)
    P = simplex_rows(V, totals)
    assert np.all(P >= 0)
    np.testing.assert_allclose(P.sum(axis=1), totals, rtol=1e-10)
    # KKT: P = max(V - theta, 0) for one theta per row (a projection onto the scaled simplex)
    theta = np.array([np.mean((V[i] - P[i])[P[i] > 0]) for i in range(200)])
    np.testing.assert_allclose(P, np.maximum(V - theta[:, None], 0), atol=1e-8)
    # and no random feasible point is closer
    for _ in range(20):
        Q = rng.dirichlet(np.ones(7), 200) * totals[:, None]
        assert np.all(np.sum((V - P) ** 2, 1) <= np.sum((V - Q) ** 2, 1) + 1e-9)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_model_invariants_under_heavy_noise(adult, delta):
    parts = split_parties(adult.X_train[:2000], adult.y_train[:2000], 4, rng=np.random.default_rng(1))
    m = run_inprocess(_spec(adult.schema, 0.01, delta), parts, seed=4).model
    assert str(m["algorithm"]) == "naive-bayes"
    np.testing.assert_allclose(np.logaddexp.reduce(m["class_log_prior"]), 0.0, atol=1e-12)
    for j, size in enumerate(adult.schema.domain_sizes):
        rows = m["cat_log_prob"][j, :, :size]
        assert np.all(np.isfinite(rows))
        np.testing.assert_allclose(np.logaddexp.reduce(rows, axis=1), 0.0, atol=1e-12)
        assert np.all(m["cat_log_prob"][j, :, size:] == -np.inf)
    half = (adult.schema.upper - adult.schema.lower) / 2
    assert np.all(m["num_mean"] >= adult.schema.lower) and np.all(m["num_mean"] <= adult.schema.upper)
    assert np.all(m["num_var"] >= 2e-3 * half ** 2 * (1 - 1e-12))
    assert np.all(m["num_var"] <= half ** 2 * (1 + 1e-12))
    assert np.all(m["class_count"] >= 1.0)


# --------------------------------------------------------------------------- estimator & registry

def test_estimator_api(adult):
    from sklearn.base import clone

    est = DPNaiveBayes(epsilon=2.0, schema=adult.schema, random_state=7)
    assert clone(est).get_params() == est.get_params()
    assert est.set_params(alpha=2.0) is est and est.alpha == 2.0
    with pytest.raises(ValueError, match="invalid parameter"):
        est.set_params(gamma=1)
    with pytest.raises(RuntimeError, match="not fitted"):
        est.predict(adult.X_test)
    with pytest.warns(ReproducibleSeedWarning):
        est.fit(adult.X_train, adult.y_train)
    p = est.predict_proba(adult.X_test[:50])
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.log(p), est.predict_log_proba(adult.X_test[:50]), atol=1e-9)
    again = DPNaiveBayes(epsilon=2.0, schema=adult.schema, random_state=7, alpha=2.0).fit(adult.X_train, adult.y_train)
    assert np.array_equal(again.predict(adult.X_test), est.predict(adult.X_test))
    assert est.score(adult.X_test, adult.y_test) >= 0.8
    assert accounting.epsilon(est.privacy_event_, 0.0) <= 2.0 * (1 + 1e-9)


def test_estimator_without_schema_warns_that_it_leaks():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(-2, 1, (500, 3)), rng.normal(2, 1, (500, 3))])
    y = np.repeat([0, 1], 500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleSeedWarning)
        with pytest.warns(DataDerivedSchemaWarning):
            est = DPNaiveBayes(epsilon=1.0, random_state=0).fit(X, y)
    assert est.score(X, y) >= 0.95


def test_registry_and_flags():
    algo = get_algorithm("naive-bayes")
    assert algo.default_delta == 1e-6
    parser = argparse.ArgumentParser()
    algo.add_arguments(parser)
    args = parser.parse_args(["--nb-mechanism", "laplace", "--nb-alpha", "0.5"])
    assert algo.params_from_args(args) == {"mechanism": "laplace", "alpha": 0.5, "var_floor": 2e-3, "noise": "local"}
    assert algo.params_from_args(parser.parse_args(["--noise", "distributed"]))["noise"] == "distributed"
    sch = Schema((Feature("a", "categorical", categories=3),), n_classes=2)
    coord = algo.coordinator(_spec(sch, 1.0), ["p"])
    assert coord.summary()["mechanism"] == "laplace"
    with pytest.raises(ValueError, match="labels"):
        evaluate({}, np.zeros((1, 1)), None, sch)
    assert math.isfinite(coord.summary()["noise_std_counts"])
