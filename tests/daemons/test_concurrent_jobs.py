"""Several jobs at once (issue 12), over real sockets with mutual TLS and real party daemons.

Two jobs share a party: both run at the same time (each its own driver), both finish with the
right models, the shared party's ledger holds one charge per job, and its composed spend lies
above job b's spend alone (dp-accounting's PLD of its ``rounds`` Laplace releases at the
ledger's delta, computed here) and at most the sum of both epsilons (basic composition).
``dpfed status`` shows both as running while they run.
"""
from __future__ import annotations

import threading
import time

import dp_accounting as dpa
import numpy as np

from dpfed.cli.coordinator import format_status
from dpfed.core.ledger import BudgetLedger
from net_helpers import (
    ThreadParty,
    admin,
    make_pki,
    party_config,
    party_data,
    raw_stub,
    register,
    start_coordinator,
    stop_parties,
)
from protos import dpfed_pb2 as pb
from protos.codec import PROTOCOL_VERSION

ROUNDS, WIDTH = 60, 3


def _watch_running(client, stop: threading.Event, seen: list[set[str]], shown: list[str]) -> None:
    while not stop.is_set():
        st = client.status()
        running = {j["job_id"] for j in st["jobs"] if j["state"] == "running"}
        seen.append(running)
        if len(running) > 1:
            shown.append(format_status(st))
        time.sleep(0.01)


def _run_two_jobs(tmp_path, max_jobs: int):
    pki = make_pki(tmp_path / "pki", parties=3)
    server = start_coordinator(pki, tmp_path / "state", max_concurrent_jobs=max_jobs)
    parties = [ThreadParty(party_config(pki, tmp_path, f"party-{i}", server.port, epsilon_limit=20.0))
               for i in range(3)]
    try:
        with admin(pki, server.port) as client:
            deadline = time.monotonic() + 20
            while sum(p["connected"] for p in client.status()["parties"]) < 3:
                assert time.monotonic() < deadline, "parties did not connect"
                time.sleep(0.05)
            stop, seen, shown = threading.Event(), [], []
            watcher = threading.Thread(target=_watch_running, args=(client, stop, seen, shown), daemon=True)
            watcher.start()
            a = client.submit_job("noisy-mean", {"rounds": ROUNDS, "width": WIDTH, "epsilon": 2.0},
                                  parties=["party-0", "party-1", "party-2"], job_id="job-a")
            b = client.submit_job("noisy-mean", {"rounds": ROUNDS, "width": WIDTH, "epsilon": 3.0},
                                  parties=["party-0", "party-1"], job_id="job-b")
            recs = {j: client.wait(j, timeout=120) for j in (a, b)}
            stop.set()
            watcher.join(5)
            models = {j: client.get_model(j)[0] for j in (a, b)}
    finally:
        stop_parties(parties)
        server.stop()
    return recs, models, seen, shown


def test_two_jobs_run_at_once_and_the_shared_ledger_composes_both(tmp_path):
    recs, models, seen, shown = _run_two_jobs(tmp_path, max_jobs=4)
    assert {r["state"] for r in recs.values()} == {"done"}, recs
    assert any(s == {"job-a", "job-b"} for s in seen), "the two jobs never ran at the same time"
    table = shown[0].split("Jobs", 1)[1]  # `dpfed status` as printed, while both ran
    assert all(any(j in line and "running" in line for line in table.splitlines()) for j in ("job-a", "job-b"))
    # models: the noisy mean of the parties' records (Laplace noise; scale per entry and round is
    # (1 + width) * rounds / epsilon on a count of >= 400 records: the bound is far above 8 sd)
    for job, names in (("job-a", range(3)), ("job-b", range(2))):
        X = np.concatenate([party_data(seed=sum(map(ord, f"party-{i}"))) for i in names])
        got = np.asarray(models[job]["mean"], dtype=float)
        assert np.allclose(got, X.mean(axis=0), atol=0.25), (job, got, X.mean(axis=0))
    with BudgetLedger(tmp_path / "party-0" / "ledger.sqlite", epsilon_limit=20.0, delta_limit=1e-6) as led:
        assert sorted(led.charge_ids()) == ["job-a:plan", "job-b:plan"]
        spent = led.spent()
    b_alone = dpa.pld.PLDAccountant().compose(
        dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(ROUNDS / 3.0), ROUNDS)).get_epsilon(1e-6)
    assert b_alone - 1e-3 <= spent <= 2.0 + 3.0 + 1e-3, (b_alone, spent)
    assert spent > b_alone + 0.1, "job a's charge is missing from the composition"
    with BudgetLedger(tmp_path / "party-2" / "ledger.sqlite", epsilon_limit=20.0, delta_limit=1e-6) as led:
        assert led.charge_ids() == ["job-a:plan"]


def test_with_one_job_at_a_time_they_run_in_turn(tmp_path):
    recs, _, seen, _ = _run_two_jobs(tmp_path, max_jobs=1)
    assert {r["state"] for r in recs.values()} == {"done"}
    assert not any(len(s) > 1 for s in seen)


def test_more_open_task_streams_than_64_still_leave_room_for_calls(tmp_path):
    """Every open task stream holds a gRPC handler thread: 80 parties streaming at once must not starve
    registration or the operator's status call (the pool used to have 64 threads)."""
    pki = make_pki(tmp_path / "pki", parties=80)
    server = start_coordinator(pki, tmp_path / "state")
    channels, streams = [], []
    try:
        for i in range(80):
            ch, stub = raw_stub(pki, server.port, f"party-{i}")
            token = register(stub, f"party-{i}")
            channels.append(ch)
            streams.append(stub.TaskStream(pb.StreamRequest(version=PROTOCOL_VERSION, session=token)))
        with admin(pki, server.port) as client:
            deadline = time.monotonic() + 60
            while sum(p["connected"] for p in client.status()["parties"]) < 80:
                assert time.monotonic() < deadline, "80 streams did not all connect"
                time.sleep(0.2)
    finally:
        for s in streams:
            s.cancel()
        for ch in channels:
            ch.close()
        server.stop()
