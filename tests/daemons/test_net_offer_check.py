"""``SubmitJob`` runs the parties' own check of a job's spend (issue 24, item 5): an operator's typo, a noise
multiplier far too small for the stated epsilon, is refused at once with the parties' reason, and nothing
is queued (before, every party spent minutes and gigabytes deciding it). Real gRPC over mutual TLS."""
from __future__ import annotations

import grpc
import pytest

from dpfed.data.schema import Schema
from net_helpers import admin, make_pki, start_coordinator

SCHEMA = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)


def test_submit_job_refuses_a_noise_multiplier_far_below_the_stated_epsilon(tmp_path):
    pki = make_pki(tmp_path / "pki", parties=1)
    server = start_coordinator(pki, tmp_path / "state")
    try:
        with admin(pki, server.port) as adm:
            with pytest.raises(grpc.RpcError) as err:
                adm.submit_job("glvq", {"noise_multiplier": 0.05}, epsilon=1.0, delta=1e-5, schema=SCHEMA)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "> its stated epsilon 1" in err.value.details()
            assert adm.status()["jobs"] == []
            job = adm.submit_job("glvq", {"noise_multiplier": 4.0}, epsilon=1.0, delta=1e-5, schema=SCHEMA)
            assert [j["job_id"] for j in adm.status()["jobs"]] == [job]  # enough noise: queued as before
    finally:
        server.stop()
