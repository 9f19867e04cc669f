"""A PCA job with distributed noise under secure aggregation over real gRPC with mutual TLS and five real party
daemon processes: both rounds (the noisy mean, then the second moment around it) and hence the model are the
in-process ones for the same seeds (the SecAgg masks cancel exactly, the noise shares coincide), and the
subspace is the planted one."""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.data.schema import Schema
from dpfed.simulation.grpc_local import run_grpc_simulation
from dpfed.simulation.inprocess import run_inprocess


def test_secure_pca_over_grpc_matches_in_process(tmp_path):
    g = np.random.default_rng(4)
    d = 12
    basis = np.linalg.qr(g.normal(size=(d, 2)))[0].T
    X = np.clip(0.5 + (g.normal(size=(5000, 2)) * [0.2, 0.1]) @ basis + 0.01 * g.normal(size=(5000, d)), 0, 1)
    data = [(X[i::5], None) for i in range(5)]
    params = {"epsilon": 1.0, "delta": 1e-6, "k": 2, "clip": 0.8, "noise": "distributed", "secure_aggregation": True,
              "bits": 16}
    spec = JobSpec("secure-pca-grpc", "pca", params, Schema.numeric_box(d, 0.0, 1.0))
    net = run_grpc_simulation(spec, data, seed=5, workdir=tmp_path / "sim", timeout=600)
    local = run_inprocess(spec, data, seed=5)
    assert net.summary["secure_aggregation"] is True and net.rounds == local.rounds == 2
    assert net.epsilon_spent == local.epsilon_spent <= 1.0 * (1 + 1e-9)
    for key in ("components", "explained_variance", "mean"):
        np.testing.assert_array_equal(net.model[key], local.model[key])
    assert np.linalg.norm(net.model["components"] @ basis.T, axis=0).min() > 0.95
