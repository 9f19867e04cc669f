"""Logistic regression and linear SVM under secure aggregation over real gRPC with mutual TLS and five real
party daemon processes: the job completes and its model is the in-process one (same seeds: the SecAgg masks
cancel exactly, so the decoded sums, hence the models, coincide). One encoding each (``secure_rounding``).
The party processes are the ones the secure LVQ jobs run on too (``tests/support/secure_segmentation.py``: one
federation, started once, runs the four jobs; each job's result is that of a federation of its own)."""
from __future__ import annotations

import numpy as np
import pytest

from dpfed.simulation.inprocess import run_inprocess
from secure_segmentation import SEED, party_data, spec


@pytest.mark.parametrize("algorithm,rounding", [("logistic-regression", "record"), ("linear-svm", "party")])
def test_secure_linear_model_over_grpc_matches_in_process(segmentation, secure_segmentation_runs, algorithm, rounding):
    net = secure_segmentation_runs[(algorithm, rounding)]
    local = run_inprocess(spec(segmentation, algorithm, rounding), party_data(segmentation), seed=SEED)
    assert net.summary["secure_aggregation"] is True and net.summary["dropped_rounds"] == 0
    assert net.summary["secure_rounding"] == local.summary["secure_rounding"] == rounding
    assert net.rounds == local.rounds == 4
    assert net.epsilon_spent == local.epsilon_spent <= 2.0 * (1 + 1e-9)
    np.testing.assert_allclose(net.model["weights"], local.model["weights"], rtol=0, atol=1e-9)
    assert net.model["weights"].shape == (7, 20)
