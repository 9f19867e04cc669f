"""Private k-means: canonical ordering, spend == claim, DPKMeans, the federated halves, bad input.

Fixed seeds everywhere (SecureRNG.from_seed, numpy default_rng), so each assertion is
deterministic: false-alarm rate 0; the accuracy thresholds hold with margin at these seeds.
Budget: < 60 s on one core.
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np
import pytest

from dpfed.algorithms.contract import JobSpec, TaskRejected
from dpfed.algorithms.kmeans import (
    ALGORITHMS,
    DPKMeans,
    align_blocks,
    canonical_order,
    evaluate,
    inertia,
    kmeans,
    make_plan,
    merge_centers,
    plan_event,
    public_anchors,
)
from dpfed.core import accounting
from dpfed.data.datasets import make_blobs
from dpfed.data.schema import DataValidationError, Schema
from dpfed.simulation import run_inprocess

warnings.filterwarnings("ignore", message="SecureRNG seeded explicitly")

SCHEMA2 = Schema.numeric_box(2, -15.0, 15.0)


def test_canonical_order_is_stable_under_permutations_of_centers_and_blocks() -> None:
    rng = np.random.default_rng(0)
    truth = rng.uniform(-10, 10, size=(6, 3))
    blocks = truth[None] + rng.normal(0, 0.3, size=(40, 6, 3))
    anchors = public_anchors(6, np.full(3, -15.0), np.full(3, 15.0), seed=1)
    ref = align_blocks(blocks, anchors)
    shuffled = np.stack([b[rng.permutation(6)] for b in blocks])  # permute centers inside blocks
    assert np.array_equal(align_blocks(shuffled, anchors), ref)
    perm = rng.permutation(40)                                      # permute the blocks
    assert np.array_equal(align_blocks(blocks[perm], anchors), ref[perm])
    # matched across blocks: slot j holds the same true center in every block
    slots = ref.reshape(40, 6, 3)
    for j in range(6):
        nearest = np.argmin(((slots[:, j, None, :] - truth[None]) ** 2).sum(-1), axis=1)
        assert np.all(nearest == nearest[0])
    assert set(map(tuple, canonical_order(truth, anchors))) == set(map(tuple, truth))


@pytest.mark.parametrize("method,aggregator,steps", [("sample-aggregate", "mean", 2), ("sample-aggregate", "coa", 0),
                                                     ("sample-aggregate", "coa", 2), ("lloyd", "mean", 5)])
def test_plan_spend_equals_claim(method: str, aggregator: str, steps: int) -> None:
    eps, delta = 1.0, 1e-6
    plan = make_plan(method, 5, aggregator, steps, eps, delta)
    spent = accounting.epsilon(plan_event(plan), delta)
    assert 0.998 * eps <= spent <= eps
    # the composition is no worse than basic composition of its parts (a sanity bound)
    if aggregator == "coa" and method == "sample-aggregate":
        assert plan.agg_delta <= delta and plan.agg_epsilon < eps


def test_dpkmeans_sample_aggregate_recovers_blobs() -> None:
    X, _, _ = make_blobs(30000, 2, 3, seed=4)
    ref = kmeans(X, 3, np.random.default_rng(0), n_init=10)[1]
    model = DPKMeans(3, epsilon=1.0, delta=1e-6, bounds=(-15, 15), random_state=2).fit(X)
    assert model.cluster_centers_.shape == (3, 2)
    assert model.inertia_ / ref < 1.1
    assert 990 <= model.n_blocks_ <= 1010  # m = noisy count // (10 k)
    assert np.all(np.abs(model.cluster_sizes_ - 10000) < 500)
    assert model.score(X) == pytest.approx(-model.inertia_)
    assert set(model.predict(X[:50])) <= {0, 1, 2}
    assert model.get_params()["method"] == "sample-aggregate"
    eps = accounting.epsilon(model.privacy_event_, 1e-6)
    assert 0.998 <= eps <= 1.0


def test_dpkmeans_lloyd_and_coa_run_and_spend_their_budget() -> None:
    X, _, _ = make_blobs(30000, 2, 3, seed=4)
    for kw in ({"method": "lloyd"}, {"aggregator": "coa", "refine_steps": 2}):
        m = DPKMeans(3, epsilon=1.0, bounds=(-15, 15), random_state=0, **kw).fit(X)
        assert np.all(np.isfinite(m.cluster_centers_)) and np.all(np.abs(m.cluster_centers_) <= 15)
        assert accounting.epsilon(m.privacy_event_, 1e-6) <= 1.0


def test_bad_input_gives_clear_errors() -> None:
    X, _, _ = make_blobs(600, 2, 3, seed=0)
    with pytest.raises(ValueError, match="fewer than k=5"):   # k larger than some blocks
        DPKMeans(5, bounds=(-15, 15), block_size=5, random_state=0).fit(X)
    with pytest.raises(ValueError, match="blocks need at least"):  # k larger than every block
        DPKMeans(5, bounds=(-15, 15), block_size=3, random_state=0).fit(X)
    with pytest.raises(ValueError, match="too few records"):
        DPKMeans(3, bounds=(-15, 15), random_state=0).fit(X[:8])
    with pytest.raises(ValueError, match="outside the public domain"):
        DPKMeans(3, bounds=(-1, 1), random_state=0).fit(X)
    with pytest.raises(ValueError, match="bounds"):
        DPKMeans(3).fit(X)
    with pytest.raises(ValueError, match="n_clusters"):
        DPKMeans(700, bounds=(-15, 15)).fit(X)
    spec = JobSpec("j-bad", "kmeans", {"epsilon": 1.0, "delta": 1e-6, "k": 3}, SCHEMA2)
    # a party with no (or too few) records answers like any other: a failure after its charge would tell
    res = run_inprocess(spec, [(X, None), (X[:0], None), (X[:4], None)], seed=0)
    assert np.all(np.isfinite(res.model["cluster_centers"])) and res.rounds == 1
    with pytest.raises(DataValidationError, match="outside the public bounds"):
        run_inprocess(spec, [(X * 3, None)], seed=0)
    with pytest.raises(TaskRejected, match="integer"):
        ALGORITHMS["kmeans"].party().job_event(JobSpec("j", "kmeans", {"epsilon": 1.0, "delta": 1e-6, "k": 2.5},
                                                       SCHEMA2))


def test_federated_simulation_spends_the_claim_and_merges() -> None:
    X, _, _ = make_blobs(45000, 2, 3, seed=1)
    parts = [(X[i::3], None) for i in range(3)]
    spec = JobSpec("j-fed", "kmeans", {"epsilon": 1.0, "delta": 1e-6, "k": 3}, SCHEMA2)
    res = run_inprocess(spec, parts, seed=5)
    assert res.rounds == 1
    assert all(0.998 <= e <= 1.0 for e in res.party_epsilon.values())
    assert res.model["cluster_centers"].shape == (3, 2)
    out = evaluate(res.model, X, None, SCHEMA2)
    assert set(out) >= {"inertia", "inertia_nonprivate", "nonprivate_impl"}
    assert out["nonprivate_impl"] == "sklearn"
    assert out["inertia"] / out["inertia_nonprivate"] < 1.1


def test_merge_centers_weights_by_size() -> None:
    truth = np.array([[0.0, 0.0], [10.0, 0.0]])
    a = truth + 0.1
    b = np.array([[0.2, 0.0], [-5.0, -5.0]])  # second center of party b is junk but has size 0
    merged = merge_centers([a, b], [np.array([100, 100]), np.array([100, 0])], 2)
    merged = merged[np.argsort(merged[:, 0])]
    assert np.allclose(merged, [[0.15, 0.05], [10.1, 0.1]], atol=0.1)


def test_evaluate_uses_only_numeric_columns() -> None:
    from dpfed.data.schema import Feature

    schema = Schema((Feature("c", "categorical", categories=3), Feature("x", "numeric", lower=0, upper=1)))
    X = np.array([[0, 0.1], [2, 0.9], [1, 0.1], [0, 0.9]])
    out = evaluate({"cluster_centers": np.array([[0.1], [0.9]])}, X, None, schema)
    assert out["inertia"] == pytest.approx(0.0) and inertia(X[:, 1:], np.array([[0.5]])) == pytest.approx(0.64)


def test_cli_options_reach_the_job_params() -> None:
    algo = ALGORITHMS["kmeans"]
    p = argparse.ArgumentParser()
    algo.add_arguments(p)
    args = p.parse_args(["--method", "lloyd", "--k", "4", "--lloyd-iters", "3"])
    params = algo.params_from_args(args)
    assert params["method"] == "lloyd" and params["k"] == 4 and params["lloyd_iters"] == 3
    assert algo.needs_labels is False and algo.default_delta == 1e-6
