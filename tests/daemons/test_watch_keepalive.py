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


def test_watch_sends_a_job_only_when_it_changes(pki, tmp_path):
    """A watch sends the record when *this job* changes or its heartbeat is due, not on every change of the
    coordinator (another job, a party's answer): at 100 parties that was a 50 KB record per answer, and
    building it took a quarter of the coordinator's CPU in a 5-party MNIST job."""
    server = start_coordinator(pki, tmp_path / "state", offer_timeout=60.0, heartbeat_seconds=600.0)
    c = server.coordinator
    try:
        with AdminClient(f"127.0.0.1:{server.port}", tls=pki.files("operator")) as adm:
            job = adm.submit_job("noisy-mean", {"rounds": 1}, epsilon=1.0, delta=0.0, parties=["nobody"])
        watch = c.watch(job, timeout=1.5)
        first = next(watch)
        assert first["job_id"] == job and first["progress"] == 0.0
        for _ in range(20):  # changes elsewhere: nothing to send before the watch's own deadline
            with c._cond:
                c._changed()
        assert list(watch) == []
        watch = c.watch(job, timeout=30.0)
        assert next(watch)["progress"] == 0.0
        with c._cond:
            c.jobs[job].progress = 0.25
            c._changed()
        snap = next(watch)  # the change is sent, whole
        assert snap["progress"] == 0.25 and snap["schema"] == first["schema"] and snap["params"] == first["params"]
    finally:
        server.stop(0.5)


def test_job_record_to_dict_is_a_deep_copy_equal_to_asdict():
    from dataclasses import asdict

    from coordinator.state import JobRecord

    rec = JobRecord("j1", "lvq", {"epsilon": 1.0, "nested": {"a": [1, 2.5]}}, {"features": [{"name": "x"}]},
                    ["p0", "p1"], refusals={"p1": "over budget"}, party_epsilon={"p0": 0.5},
                    summary={"noise": float("inf"), "h": [0.1, 0.2]}, resumed_at=[3])
    d = rec.to_dict()
    assert d == asdict(rec)
    d["params"]["nested"]["a"].append(9)
    d["summary"]["h"].append(1.0)
    assert rec.params["nested"]["a"] == [1, 2.5] and rec.summary["h"] == [0.1, 0.2]
