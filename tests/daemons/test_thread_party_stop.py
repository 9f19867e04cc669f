"""``ThreadParty.stop`` / ``stop_parties`` (tests/support/net_helpers.py) report a party daemon thread that does
not stop, instead of going on silently after the join timeout (the test would then run on with a live daemon
talking to the coordinator and to a ledger it had closed). The stuck thread is real: a party daemon (in a thread,
over mutual TLS, against a real coordinator) computing a round's answer that takes 4 s (the noisy-mean test
plugin's stall), asked to stop with a 0.5 s join timeout. A second, idle party stopped in the same call stops
and is closed; the error names only the stuck party and where its thread is; once the answer is done the stuck
thread ends by itself, and a second ``stop`` reports nothing more.
"""
from __future__ import annotations

import time

import pytest

from net_helpers import PartyDidNotStop, ThreadParty, admin, party_config, stop_parties, wait_until

STALL_SECONDS = 4.0


def test_a_party_thread_that_does_not_stop_is_reported(pki, coordinator, tmp_path):
    parties = [ThreadParty(party_config(pki, tmp_path, f"party-{i}", coordinator.port)) for i in range(2)]
    try:
        with admin(pki, coordinator.port) as adm:
            wait_until(lambda: sum(p["connected"] for p in adm.status()["parties"]) == 2, 30, "two parties")
            adm.submit_job("noisy-mean", {"rounds": 2, "width": 3, "stall_rounds": [0], "stall_seconds": STALL_SECONDS},
                           epsilon=1.0, parties=["party-0"], job_id="stuck")
            wait_until(lambda: adm.status()["jobs"][0]["state"] == "running", 30, "the job to run")
        time.sleep(0.5)  # party-0's thread is inside round 0's answer
        t0 = time.monotonic()
        with pytest.raises(PartyDidNotStop) as exc:
            stop_parties(parties, timeout=0.5)
        took = time.monotonic() - t0
        msg = str(exc.value)
        assert "1 party thread(s) still running 0.5 s after stop()" in msg and "'party-0'" in msg, msg
        assert "'party-1'" not in msg and "net_noisy_mean.py" in msg and "sleep" in msg, msg  # where it is stuck
        assert took < STALL_SECONDS - 1, took  # it did not wait for the answer
        assert parties[0].thread.is_alive() and not parties[1].thread.is_alive()
        assert parties[0].daemon._closed and parties[1].daemon._closed  # both ledgers closed all the same
        parties[0].thread.join(timeout=STALL_SECONDS + 10)  # the answer done, the stopped daemon's thread ends
        assert not parties[0].thread.is_alive()
        parties[0].stop()  # stopped already: nothing more to report
    finally:
        for p in parties:
            p.daemon.stop()
            p.thread.join(timeout=STALL_SECONDS + 10)
