"""A private decision tree job (one release per level, then the leaves) with distributed noise under secure
aggregation over real gRPC with mutual TLS and five real party daemon processes: it completes, and its model is
the in-process one (same seeds: the SecAgg masks cancel exactly, so every level's decoded counts, hence the
splits the coordinator picks and the leaves, coincide)."""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.decision_tree import evaluate
from dpfed.data.datasets import load_dataset, split_parties
from dpfed.simulation.grpc_local import run_grpc_simulation
from dpfed.simulation.inprocess import run_inprocess


def test_secure_decision_tree_over_grpc_matches_in_process(tmp_path):
    ds = load_dataset("nursery")
    data = split_parties(ds.X_train, ds.y_train, 5, "iid", np.random.default_rng(0))
    params = {"epsilon": 1.0, "delta": 1e-6, "noise": "distributed", "secure_aggregation": True,
              "min_survivors": 4, "bits": 16, "depth": 3}
    spec = JobSpec("secure-dt-grpc", "decision-tree", params, ds.schema)
    net = run_grpc_simulation(spec, data, seed=5, workdir=tmp_path / "sim", timeout=600)
    local = run_inprocess(spec, data, seed=5)
    assert net.summary["secure_aggregation"] is True and net.summary["mechanism"] == "ddgauss"
    assert net.summary["dropped_rounds"] == 0 and net.rounds == local.rounds == 4
    assert net.epsilon_spent == local.epsilon_spent <= 1.0 * (1 + 1e-9)
    assert net.summary["splits"] == local.summary["splits"] >= 3
    for k in ("feature", "left", "leaf_counts", "leaf_proba"):
        np.testing.assert_array_equal(net.model[k], local.model[k])
    assert evaluate(net.model, ds.X_test, ds.y_test, ds.schema)["test_accuracy"] > 0.75
