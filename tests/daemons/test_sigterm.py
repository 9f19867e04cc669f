"""The daemons honour SIGTERM within a 2 s grace (issue 29): podman (``podman stop -t 2``, ``podman pod stop``)
and Kubernetes send SIGTERM and kill after the grace, so a daemon that finishes its current work first is killed
under load. Real processes over mutual TLS: ``dpfed coordinator serve`` and two ``party.daemon`` processes run a
multi-round job (the noisy-mean test plugin) whose round 4 keeps every party busy for 3 s computing its answer,
and round 10 the coordinator for 3 s absorbing the sum. SIGTERM lands on a party in the middle of round 4's answer
and on the coordinator in the middle of round 10's absorb (before: the party finished its answer, 4.8 s with a 4 s
stall; the coordinator waited up to 10 s for each job runner). Checked: each exits with status 0 within 2 s of
the signal; the restarted party and the restarted coordinator carry the job to its end with every planned round;
every party's ledger, and the coordinator's mirror, hold exactly one charge for the job.
"""
from __future__ import annotations

import json
import time

from net_helpers import (
    admin,
    free_port,
    ledger_charges,
    party_config,
    sigterm,
    spawn_coordinator,
    spawn_party,
    wait_until,
)

ROUNDS, STALLS, STALL_SECONDS, GRACE = 16, (4, 10), 3.0, 2.0
JOB = "sigterm"


def _round_in_progress(port: int, pki, r: int) -> None:
    """Wait until the job works on round ``r`` (rounds 0..r-1 done), then a little longer: the parties are
    inside round r's 3-second answer (or the coordinator inside its absorb)."""
    with admin(pki, port) as adm:
        wait_until(lambda: next(j for j in adm.status()["jobs"] if j["job_id"] == JOB)["rounds"] >= r, 120,
                   f"round {r}")
    time.sleep(0.5)


def test_daemons_stop_within_the_grace_mid_job_and_the_job_resumes(pki, tmp_path):
    port = free_port()
    coord = spawn_coordinator(pki, tmp_path, port)
    tomls = [party_config(pki, tmp_path, f"party-{i}", port, epsilon_limit=1e5, write_toml=True) for i in range(2)]
    parties = [spawn_party(t) for t in tomls]
    timings = {}
    try:
        with admin(pki, port) as adm:
            wait_until(lambda: sum(p["connected"] for p in adm.status()["parties"]) == 2, 60, "two parties")
            adm.submit_job("noisy-mean", {"rounds": ROUNDS, "width": 3, "stall_rounds": [STALLS[0]],
                                          "absorb_stall_rounds": [STALLS[1]],
                                          "stall_seconds": STALL_SECONDS}, epsilon=100.0, delta=0.0, job_id=JOB)
        _round_in_progress(port, pki, STALLS[0])
        rc, timings["party"] = sigterm(parties[1])
        assert rc == 0 and timings["party"] < GRACE, (rc, timings, parties[1].stdout.read()[-2000:])
        parties[1] = spawn_party(tomls[1])
        _round_in_progress(port, pki, STALLS[1])
        rc, timings["coordinator"] = sigterm(coord)
        log = (tmp_path / "coordinator.log").read_text(errors="replace")
        assert rc == 0 and timings["coordinator"] < GRACE, (rc, timings, log[-2000:])
        coord = spawn_coordinator(pki, tmp_path, port)  # the job resumes by itself
        with admin(pki, port) as adm:
            rec = adm.wait(JOB, timeout=240)
    finally:
        for p in (*parties, coord):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    assert rec["state"] == "done" and rec["rounds"] == ROUNDS and rec["resumes"] >= 1, json.dumps(rec)[:2000]
    for i in range(2):
        assert ledger_charges(tmp_path / f"party-{i}" / "ledger.sqlite") == [f"{JOB}:plan"]
        assert ledger_charges(tmp_path / "state" / "budget" / f"party-{i}.sqlite") == [f"{JOB}:plan"]
    print(f"\nSIGTERM to exit: party {timings['party']:.2f} s, coordinator {timings['coordinator']:.2f} s")
