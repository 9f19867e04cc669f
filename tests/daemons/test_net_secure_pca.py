"""PCA as the first step of a k-means (DP Lloyd) job, distributed noise under secure aggregation, over real gRPC
with mutual TLS and five real party daemon processes (the job name ``pca+kmeans`` resolved by every daemon
through the registry, the coordinator checkpointing the pipeline after every round): both PCA rounds (the
noisy mean, then the second moment around it), the k-means rounds on the projection, hence the model, are
the in-process ones for the same seeds (the SecAgg masks cancel exactly, the noise shares coincide)."""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.data.schema import Schema
from dpfed.simulation.grpc_local import run_grpc_simulation
from dpfed.simulation.inprocess import run_inprocess


def test_secure_pca_then_kmeans_over_grpc_matches_in_process(tmp_path):
    g = np.random.default_rng(6)
    d = 8
    X = np.clip(0.5 + 0.3 * np.repeat(np.eye(d)[:2], 1500, axis=0) + 0.03 * g.normal(size=(3000, d)), 0, 1)
    data = [(X[i::5], None) for i in range(5)]
    params = {"epsilon": 2.0, "delta": 1e-6, "pca_k": 2, "pca_clip": 0.6, "k": 2, "method": "lloyd", "lloyd_iters": 2,
              "noise": "distributed", "secure_aggregation": True, "bits": 16}
    spec = JobSpec("secure-pca-km-grpc", "pca+kmeans", params, Schema.numeric_box(d, 0.0, 1.0))
    net = run_grpc_simulation(spec, data, seed=7, workdir=tmp_path / "sim", timeout=600)
    local = run_inprocess(spec, data, seed=7)
    assert net.rounds == local.rounds > 2 and net.epsilon_spent == local.epsilon_spent <= 2.0 * (1 + 1e-9)
    for key in ("pca_components", "pca_mean", "cluster_centers"):
        np.testing.assert_array_equal(net.model[key], local.model[key])
