"""A distributed-noise LVQ job under secure aggregation over real gRPC with mutual TLS and five
real party daemon processes, with each encoding (``secure_rounding``): it completes, and its model is the
in-process one (same seeds: the SecAgg masks cancel exactly, so the decoded sums, hence the models, coincide).
The party processes are the ones the secure linear models' jobs run on too (``tests/support/secure_segmentation.py``:
one federation, started once, runs the four jobs; each job's result is that of a federation of its own)."""
from __future__ import annotations

import numpy as np
import pytest

from dpfed.simulation.inprocess import run_inprocess
from secure_segmentation import SEED, party_data, spec


@pytest.mark.parametrize("rounding", ["record", "party"])
def test_secure_lvq_over_grpc_matches_in_process(segmentation, secure_segmentation_runs, rounding):
    net = secure_segmentation_runs[("glvq", rounding)]
    local = run_inprocess(spec(segmentation, "glvq", rounding), party_data(segmentation), seed=SEED)
    assert net.summary["secure_aggregation"] is True and net.summary["dropped_rounds"] == 0
    assert net.summary["secure_rounding"] == local.summary["secure_rounding"] == rounding
    assert net.rounds == local.rounds == 11
    assert net.epsilon_spent == local.epsilon_spent <= 1.5 * (1 + 1e-9)
    np.testing.assert_allclose(net.model["prototypes"], local.model["prototypes"], rtol=0, atol=1e-9)
