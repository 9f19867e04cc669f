"""A statistics job (several queries, grouped) with distributed noise under secure aggregation over real gRPC
with mutual TLS and five real party daemon processes: it completes, and its answers are the in-process ones
(same seeds: the SecAgg masks cancel exactly, so the decoded sums, hence every value and interval, coincide)."""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.data.datasets import split_parties
from dpfed.simulation.grpc_local import run_grpc_simulation
from dpfed.simulation.inprocess import run_inprocess


def test_secure_statistics_over_grpc_matches_in_process(adult, tmp_path):
    data = split_parties(adult.X_train[:8000], adult.y_train[:8000], 5, "iid", np.random.default_rng(0))
    params = {"epsilon": 1.0, "delta": 1e-6, "noise": "distributed", "secure_aggregation": True, "min_survivors": 3,
              "queries": ["count", "mean:age", "var:hours-per-week", "median:education-num", "histogram:sex",
                          "table:sex:race"], "group_by": "class"}
    spec = JobSpec("secure-stats-grpc", "statistics", params, adult.schema)
    net = run_grpc_simulation(spec, data, seed=5, workdir=tmp_path / "sim", timeout=600)
    local = run_inprocess(spec, data, seed=5)
    assert net.summary["secure_aggregation"] is True and net.summary["mechanism"] == "ddlaplace"
    assert net.summary["dropped_rounds"] == 0 and net.rounds == local.rounds == 1
    assert net.epsilon_spent == local.epsilon_spent <= 1.0 * (1 + 1e-9)
    assert net.summary["results"] == local.summary["results"]
    for k in local.model:
        np.testing.assert_array_equal(net.model[k], local.model[k])
    mean_age = next(r for r in local.summary["results"] if r["query"] == "mean(age) by class")
    for c in range(2):
        true = adult.X_train[:8000][adult.y_train[:8000] == c, 0].mean()
        assert abs(mean_age["value"][c] - true) < 6 * mean_age["se"][c] + 1e-3
