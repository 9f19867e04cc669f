"""Logistic regression and linear SVM under secure aggregation over real gRPC with mutual TLS and five real
party daemon processes: the job completes and its model is the in-process one (same seeds: the SecAgg masks
cancel exactly, so the decoded sums, hence the models, coincide). One encoding each (``secure_rounding``)."""
from __future__ import annotations

import numpy as np
import pytest

from dpfed.algorithms.contract import JobSpec
from dpfed.data.datasets import kfold_indices, split_parties
from dpfed.simulation.grpc_local import run_grpc_simulation
from dpfed.simulation.inprocess import run_inprocess


@pytest.mark.parametrize("algorithm,rounding", [("logistic-regression", "record"), ("linear-svm", "party")])
def test_secure_linear_model_over_grpc_matches_in_process(segmentation, tmp_path, algorithm, rounding):
    ds = segmentation
    tr, _ = next(iter(kfold_indices(len(ds.X), 5, seed=0)))
    data = split_parties(ds.X[tr], ds.y[tr], 5, "iid", np.random.default_rng(0))
    params = {"epsilon": 2.0, "delta": 1e-5, "epochs": 0.3, "sampling_rate": 0.1, "noise": "distributed",
              "secure_aggregation": True, "min_survivors": 3, "bits": 16, "secure_rounding": rounding}
    spec = JobSpec(f"secure-grpc-{algorithm}", algorithm, params, ds.schema)
    net = run_grpc_simulation(spec, data, seed=11, workdir=tmp_path / "sim", timeout=600)
    local = run_inprocess(spec, data, seed=11)
    assert net.summary["secure_aggregation"] is True and net.summary["dropped_rounds"] == 0
    assert net.rounds == local.rounds == 4
    assert net.epsilon_spent == local.epsilon_spent <= 2.0 * (1 + 1e-9)
    np.testing.assert_allclose(net.model["weights"], local.model["weights"], rtol=0, atol=1e-9)
    assert net.model["weights"].shape == (7, 20)
