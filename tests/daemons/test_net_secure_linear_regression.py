"""Linear regression with distributed noise under secure aggregation over real gRPC with mutual TLS and five
real party daemon processes: it completes, and its model is the in-process one (same seeds: the SecAgg masks
cancel exactly, so the decoded sums, hence the coefficients, coincide)."""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.data.datasets import load_dataset, split_parties
from dpfed.simulation.grpc_local import run_grpc_simulation
from dpfed.simulation.inprocess import run_inprocess


def test_secure_linear_regression_over_grpc_matches_in_process(tmp_path):
    ds = load_dataset("california_housing")
    data = split_parties(ds.X_train[:4000], ds.y_train[:4000], 5, "iid", np.random.default_rng(0))
    params = {"epsilon": 1.0, "delta": 1e-5, "noise": "distributed", "secure_aggregation": True,
              "min_survivors": 3, "bits": 16}
    spec = JobSpec("secure-lr-grpc", "linear-regression", params, ds.schema)
    net = run_grpc_simulation(spec, data, seed=5, workdir=tmp_path / "sim", timeout=600)
    local = run_inprocess(spec, data, seed=5)
    assert net.summary["secure_aggregation"] is True and net.summary["mechanism"] == "ddgauss"
    assert net.summary["dropped_rounds"] == 0 and net.rounds == local.rounds == 1
    assert net.epsilon_spent == local.epsilon_spent <= 1.0 * (1 + 1e-9)
    for k in ("coef", "ridge_lambda", "noisy_count", "noisy_yty"):
        np.testing.assert_array_equal(net.model[k], local.model[k])
