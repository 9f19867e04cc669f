"""Secure jobs as documented (issue 29 item 1), over real gRPC with mutual TLS and real party daemons whose
ledgers are the default (PLD) ones:

* ``dpfed job submit --noise distributed --records N`` runs under secure aggregation with nothing else (it
  needed ``--param secure_aggregation=true --param records=N``, then every PLD ledger refused the event);
* without ``--records`` the submit is refused in one line before anything is sent;
* ``dpfed status`` shows what the parties report (``party_reported_spent`` stayed at its registration value)
  and warns when a party's spend exceeds its limit.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from dpfed.cli import main
from dpfed.cli.coordinator import format_status
from dpfed.core.ledger import BudgetLedger
from dpfed.data.schema import Schema
from net_helpers import make_pki, spawn_party, start_coordinator
from party.config import write_config

SCHEMA = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)
PARTIES = [f"party-{i}" for i in range(3)]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    root = tmp_path_factory.mktemp("secure-submit")
    pki = make_pki(root, parties=3)
    server = start_coordinator(pki, root / "state")
    procs = []
    for i, name in enumerate(PARTIES):
        d = root / name
        d.mkdir()
        rng = np.random.default_rng(i)
        y = rng.integers(0, 2, 300)
        X = np.clip(0.3 + 0.4 * y[:, None] + rng.normal(0, 0.08, (300, 3)), 0.0, 1.0)
        np.savez(d / "data.npz", X=X, y=y)
        (d / "schema.json").write_text(SCHEMA.to_json())
        f = pki.files(name)
        write_config(d / "party.toml", {  # no accountant key: the default PLD ledger
            "name": name, "coordinator": f"127.0.0.1:{server.port}", "data": str(d / "data.npz"),
            "ledger": str(d / "ledger.sqlite"), "epsilon_limit": 10.0, "delta_limit": 1e-5,
            "reconnect_seconds": 0.2, "schema_file": str(d / "schema.json"), "exit_with_parent": True,
            "tls": {"ca": str(f.ca), "cert": str(f.cert), "key": str(f.key)}})
        procs.append(spawn_party(d / "party.toml"))
    try:
        assert server.coordinator.wait_for_parties(PARTIES, 60)
        yield root, ["--coordinator", f"127.0.0.1:{server.port}", "--cert", str(pki.files("operator").cert)]
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=15)
        server.stop(0.5)


def test_submit_distributed_runs_secure_on_pld_ledgers_and_status_shows_reports(deployment, capsys):
    root, conn = deployment
    code = main(["job", "submit", "--algorithm", "naive-bayes", "--epsilon", "1", "--delta", "1e-6",
                 "--noise", "distributed", "--records", "900", "--parties", *PARTIES, "--job-id", "sec-nb",
                 "--wait", *conn])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    rec = json.loads(out[out.index("{"):])
    assert rec["state"] == "done" and rec["summary"]["secure_aggregation"] is True, rec
    spent = {}
    for name in PARTIES:
        with BudgetLedger(root / name / "ledger.sqlite", epsilon_limit=10.0, delta_limit=1e-5) as led:
            assert led.accountant == "pld" and led.charge_ids() == ["sec-nb:plan"]
            spent[name] = led.spent()
    assert main(["status", "--json", *conn]) == 0
    status = json.loads(capsys.readouterr().out)
    for p in status["parties"]:  # what each party's own ledger reported when it accepted, not 0.0
        assert p["party_reported_spent"] == pytest.approx(spent[p["name"]], rel=1e-9) and p["party_reported_spent"] > 0
        assert p["over_limit"] is False


def test_submit_distributed_without_record_bound_is_one_line(deployment, capsys):
    _, conn = deployment
    code = main(["job", "submit", "--algorithm", "naive-bayes", "--epsilon", "1", "--noise", "distributed", *conn])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "--records" in err and "Traceback" not in err


def test_status_warns_when_a_spend_exceeds_its_limit() -> None:
    st = {"now": 0.0, "jobs": [], "parties": [
        {"name": "a", "connected": True, "last_seen": 0.0, "epsilon_spent": 5.062, "epsilon_limit": 5.0,
         "delta_limit": 1e-6, "party_reported_spent": 4.9},
        {"name": "b", "connected": True, "last_seen": 0.0, "epsilon_spent": 1.0, "epsilon_limit": 5.0,
         "delta_limit": 1e-6, "party_reported_spent": 1.0}]}
    text = format_status(st)
    warnings = [line for line in text.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "party a" in warnings[0] and "5.062" in warnings[0] and "limit of 5" in warnings[0]
    assert "4.9" in text  # the party's own report is shown
