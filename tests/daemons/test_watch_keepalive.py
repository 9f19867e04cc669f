"""``dpfed job wait`` survives long silences (issue 10, finding 10).

Clients ping idle connections (gRPC keepalive); gRPC servers by default answer pings that come
more often than every 5 minutes without data with GOAWAY ``too_many_pings``, and the client then
reports "cannot reach the coordinator". The settings are shortened here (client pings every
second) so that a silence of a few seconds shows what hours of silence would: with the old server
options the watch dies after about three pings.
"""
from __future__ import annotations

import time

import pytest

from coordinator.client import AdminClient
from net_helpers import start_coordinator


def _wait_through_silence(pki, port: int, seconds: float) -> None:
    """Watch a job that stays queued (it waits for a party that never comes) for ``seconds``."""
    with AdminClient(f"127.0.0.1:{port}", tls=pki.files("operator"), keepalive_seconds=1.0) as adm:
        job = adm.submit_job("noisy-mean", {"rounds": 1}, epsilon=1.0, delta=0.0, parties=["nobody"])
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):  # our own deadline, not UNAVAILABLE (GOAWAY too_many_pings)
            adm.wait(job, timeout=seconds)
        assert time.monotonic() - t0 >= seconds - 0.5
        assert adm.status()["jobs"][0]["state"] == "queued"   # the connection is still usable


@pytest.mark.parametrize("server_settings", [
    dict(min_ping_interval=0.5, heartbeat_seconds=600.0),   # the ping policy alone keeps it alive
    dict(min_ping_interval=300.0, heartbeat_seconds=0.5),   # gRPC's strict default, saved by heartbeats
], ids=["ping-policy", "heartbeat"])
def test_job_wait_survives_silence(pki, tmp_path, server_settings):
    server = start_coordinator(pki, tmp_path / "state", offer_timeout=60.0, **server_settings)
    try:
        _wait_through_silence(pki, server.port, 8.0)
    finally:
        server.stop(0.5)
