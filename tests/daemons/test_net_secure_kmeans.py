"""A k-means job with distributed noise under secure aggregation over real gRPC with mutual TLS and five
real party daemon processes, each missing a round with probability 0.3 (here round 0, the count, is
aborted and m falls back to the public record bound): it completes, and every round,
hence the model, is the in-process one (same seeds: the SecAgg masks cancel exactly, the noise shares and
the simulated dropouts coincide)."""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.data.datasets import make_blobs
from dpfed.data.schema import Schema
from dpfed.simulation.grpc_local import run_grpc_simulation
from dpfed.simulation.inprocess import run_inprocess


def test_secure_kmeans_over_grpc_with_dropouts_matches_in_process(tmp_path):
    X, _, _ = make_blobs(10000, 4, 4, seed=2)
    data = [(X[i::5], None) for i in range(5)]
    params = {"epsilon": 1.0, "delta": 1e-6, "k": 4, "method": "sample-aggregate", "refine_steps": 2,
              "noise": "distributed", "secure_aggregation": True, "min_survivors": 3, "bits": 16}
    spec = JobSpec("secure-km-grpc", "kmeans", params, Schema.numeric_box(4, -15.0, 15.0))
    net = run_grpc_simulation(spec, data, seed=3, workdir=tmp_path / "sim", timeout=600, dropout=0.3)
    local = run_inprocess(spec, data, seed=3, dropout=0.3)
    assert net.summary["secure_aggregation"] is True and net.summary["dropouts"] == local.summary["dropouts"] >= 1
    assert net.rounds == local.rounds == 4 and net.summary["aborted_rounds"] == local.summary["aborted_rounds"] == 1
    assert net.epsilon_spent == local.epsilon_spent <= 1.0 * (1 + 1e-9)
    np.testing.assert_array_equal(net.model["cluster_centers"], local.model["cluster_centers"])
    np.testing.assert_array_equal(net.model["cluster_sizes"], local.model["cluster_sizes"])
