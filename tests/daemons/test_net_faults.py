"""Faults over real sockets: a party over budget, bad data at start, a coordinator restart, a
cancelled job (kill -9 of either daemon mid-job: ``tests/daemons/test_resume.py``). Neither daemon
crashes, nothing is charged twice, and no charge is lost (party ledgers and the coordinator's
global budget are read back from disk)."""
from __future__ import annotations

import numpy as np
import pytest

from coordinator.client import JobError
from coordinator.config import CoordinatorConfig
from coordinator.server import serve
from dpfed.cli import main
from dpfed.cli.coordinator import format_status
from dpfed.core.ledger import BudgetLedger
from net_helpers import PLUGINS, ThreadParty, admin, party_config, start_coordinator, stop_parties, wait_until


def _ledger_ids(path) -> list[str]:
    with BudgetLedger(path, epsilon_limit=100.0, delta_limit=1e-6) as led:
        return led.charge_ids()


def test_party_over_budget_refuses_and_the_operator_sees_why(pki, tmp_path, capsys):
    server = start_coordinator(pki, tmp_path / "state")
    parties = [ThreadParty(party_config(pki, tmp_path, "party-0", server.port, epsilon_limit=10.0)),
               ThreadParty(party_config(pki, tmp_path, "party-1", server.port, epsilon_limit=0.5))]
    try:
        assert server.coordinator.wait_for_parties(["party-0", "party-1"], 20)
        with admin(pki, server.port) as adm:
            job = adm.submit_job("noisy-mean", {"rounds": 2}, epsilon=1.0, delta=0.0)
            with pytest.raises(JobError) as info:
                adm.wait(job, timeout=30)
            rec = info.value.record
            assert rec["state"] == "refused"
            assert "party-1 refused: privacy budget exceeded" in rec["reason"]
            assert set(rec["refusals"]) == {"party-1"}
            st = adm.status()
            table = format_status(st)
            assert "refused" in table and "privacy budget exceeded" in table
            budget = {p["name"]: p for p in st["parties"]}
            assert budget["party-1"]["epsilon_spent"] == 0.0 and budget["party-1"]["epsilon_limit"] == 0.5
            assert budget["party-0"]["epsilon_spent"] > 0.5        # party-0 accepted: its charge is recorded
            # the coordinator keeps serving: a job within both budgets runs
            ok = adm.submit_job("noisy-mean", {"rounds": 2}, epsilon=0.4, delta=0.0)
            assert adm.wait(ok, timeout=30)["state"] == "done"
        assert _ledger_ids(tmp_path / "party-1" / "ledger.sqlite") == [f"{ok}:plan"]
        assert _ledger_ids(tmp_path / "party-0" / "ledger.sqlite") == [f"{job}:plan", f"{ok}:plan"]
        cert = str(pki.files("operator").cert)
        assert main(["status", "--coordinator", f"127.0.0.1:{server.port}", "--cert", cert]) == 0
        out = capsys.readouterr().out
        assert "party-1" in out and "/ 0.5" in out and "refused" in out
    finally:
        stop_parties(parties)
        server.stop(0.5)


@pytest.mark.parametrize("corrupt, message", [
    (lambda X: X.__setitem__((slice(0, 3), 1), np.nan), "column 'x1': 3 NaN/Inf value(s)"),
    (lambda X: X.__setitem__((slice(0, 5), 2), 123456.789), "column 'x2': 5 value(s) outside the public bounds"),
])
def test_bad_data_fails_at_start_with_counts_not_values(pki, tmp_path, capsys, corrupt, message):
    X = np.random.default_rng(0).uniform(size=(50, 3))
    corrupt(X)
    toml = party_config(pki, tmp_path, "party-0", 1, data=X, write_toml=True)
    assert main(["party", "serve", "--config", str(toml)]) == 2
    err = capsys.readouterr().err
    assert message in err and "123456" not in err and "nan" not in err.lower().replace("nan/inf", "")


def test_csv_columns_checked_and_check_command(pki, tmp_path, capsys):
    toml = party_config(pki, tmp_path, "party-0", 1, write_toml=True)
    csv = tmp_path / "party-0" / "data.csv"
    text = toml.read_text().replace("data.npz", "data.csv")
    toml.write_text(text)
    csv.write_text("x0,x2,extra\n0.1,0.2,5\n")
    assert main(["party", "check", "--config", str(toml)]) == 2
    err = capsys.readouterr().err
    assert "missing column(s): x1" in err and "unexpected column(s): extra" in err
    csv.write_text("x2,x0,x1\n0.1,0.2,0.3\n0.4,,0.6\n")
    assert main(["party", "check", "--config", str(toml)]) == 2
    assert "column 'x0': 1 NaN/Inf value(s)" in capsys.readouterr().err
    csv.write_text("x2,x0,x1\n0.1,0.2,0.3\n0.4,0.5,0.6\n")
    assert main(["party", "check", "--config", str(toml)]) == 0
    assert '"records": 2' in capsys.readouterr().out


def test_coordinator_restart_keeps_the_global_budget_and_models(pki, tmp_path):
    server = start_coordinator(pki, tmp_path / "state")
    port = server.port
    parties = [ThreadParty(party_config(pki, tmp_path, f"party-{i}", port)) for i in range(2)]
    try:
        assert server.coordinator.wait_for_parties(["party-0", "party-1"], 20)
        with admin(pki, port) as adm:
            done = adm.submit_job("noisy-mean", {"rounds": 2}, epsilon=1.0, delta=0.0)
            adm.wait(done, timeout=30)
            long = adm.submit_job("noisy-mean", {"rounds": 1_000_000}, epsilon=0.5, delta=0.0)
            for rec in adm.watch(long, timeout=30):
                if rec["rounds"] >= 2:
                    break
            before = {p["name"]: p["epsilon_spent"] for p in adm.status()["parties"]}
        server.stop(0.5)
        cfg = CoordinatorConfig(listen=f"127.0.0.1:{port}", state_dir=tmp_path / "state",
                                tls=pki.files("coordinator"), plugins=PLUGINS)
        server = serve(cfg)
        with admin(pki, port) as adm:
            st = adm.status()
            after = {p["name"]: p["epsilon_spent"] for p in st["parties"]}
            assert after == before and after["party-0"] > 1.0   # both jobs' plans, composed
            jobs = {j["job_id"]: j for j in st["jobs"]}
            assert jobs[done]["state"] == "done" and jobs[long]["state"] in ("queued", "offering", "running")
            model, rec = adm.get_model(done)
            assert model["mean"].shape == (3,) and rec["state"] == "done"
            assert server.coordinator.wait_for_parties(["party-0", "party-1"], 30)  # parties reconnect
            for rec in adm.watch(long, timeout=30):  # the interrupted job resumes where it stopped
                if rec["resumed_at"] and rec["rounds"] > rec["resumed_at"][0]:
                    break
            assert rec["resumed_at"][0] >= 2 and rec["resumes"] == 1
            assert adm.status()["parties"][0]["epsilon_spent"] == after["party-0"]  # at no extra charge
            adm.cancel(long)
            again = adm.submit_job("noisy-mean", {"rounds": 1}, epsilon=0.1, delta=0.0)
            assert adm.wait(again, timeout=30)["state"] == "done"
            assert adm.status()["parties"][0]["epsilon_spent"] > after["party-0"]
    finally:
        stop_parties(parties)
        server.stop(0.5)


def test_cancel_a_running_job(pki, tmp_path):
    server = start_coordinator(pki, tmp_path / "state", max_concurrent_jobs=1)  # the second job waits queued
    parties = [ThreadParty(party_config(pki, tmp_path, f"party-{i}", server.port)) for i in range(2)]
    try:
        assert server.coordinator.wait_for_parties(["party-0", "party-1"], 20)
        with admin(pki, server.port) as adm:
            job = adm.submit_job("noisy-mean", {"rounds": 1_000_000}, epsilon=1.0, delta=0.0)
            queued = adm.submit_job("noisy-mean", {"rounds": 1}, epsilon=1.0, delta=0.0)
            assert adm.cancel(queued)["state"] == "cancelled"
            wait_until(lambda: adm.status()["jobs"][0]["rounds"] > 0, what="the job to run")
            adm.cancel(job)
            rec = adm.wait(job, timeout=30, raise_on_failure=False)
            assert rec["state"] == "cancelled" and "operator" in rec["reason"]
            assert all(p.error is None for p in parties)
    finally:
        stop_parties(parties)
        server.stop(0.5)
