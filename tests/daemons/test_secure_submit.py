"""Secure jobs as documented (issue 29 item 1), over real gRPC with mutual TLS and real party daemons whose
ledgers are the default (PLD) ones:

* ``dpfed job submit --noise distributed --records N`` runs under secure aggregation with nothing else (it
  needed ``--param secure_aggregation=true --param records=N``, then every PLD ledger refused the event);
* without ``--records`` the bound is the sum of the ``public_records`` the roster's parties registered with
  (party.toml), or the submit is refused in one line naming the parties that declared none, before anything is
  sent; a party refuses a job whose total bound is below its own published one, and does not start when its
  data hold more records than it publishes;
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
from net_helpers import make_pki, raw_stub, register, spawn_party, start_coordinator
from party.config import PartyConfig, write_config

SCHEMA = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)
PARTIES = [f"party-{i}" for i in range(3)]
PUBLIC_RECORDS = {"party-0": 400, "party-1": 350, "party-2": 300}  # each holds 300 records


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    root = tmp_path_factory.mktemp("secure-submit")
    pki = make_pki(root, parties=4)  # party-3 registers without a record bound
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
            "public_records": PUBLIC_RECORDS[name], "tls": {"ca": str(f.ca), "cert": str(f.cert), "key": str(f.key)}})
        procs.append(spawn_party(d / "party.toml"))
    try:
        assert server.coordinator.wait_for_parties(PARTIES, 60)
        yield root, pki, server, ["--coordinator", f"127.0.0.1:{server.port}",
                                  "--cert", str(pki.files("operator").cert)]
    finally:
        for p in procs:  # all at once: each daemon takes up to its shutdown grace to exit
            p.terminate()
        for p in procs:
            p.wait(timeout=15)
        server.stop(0.5)


def test_submit_distributed_runs_secure_on_pld_ledgers_and_status_shows_reports(deployment, capsys):
    root, _, _, conn = deployment
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


def test_submit_distributed_takes_the_record_bound_from_the_registrations(deployment, capsys):
    """No --records: the sum of the bounds the connected parties registered with (roster: those parties)."""
    _, _, server, conn = deployment
    code = main(["job", "submit", "--algorithm", "naive-bayes", "--epsilon", "1", "--delta", "1e-6",
                 "--noise", "distributed", "--job-id", "sec-nb-registered", "--wait", *conn])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    rec = json.loads(out[out.index("{"):])
    assert rec["state"] == "done" and rec["summary"]["secure_aggregation"] is True, rec
    job = server.coordinator.jobs["sec-nb-registered"]
    assert job.params["records"] == sum(PUBLIC_RECORDS.values()) and sorted(job.parties) == PARTIES
    assert main(["status", "--json", *conn]) == 0
    status = {p["name"]: p for p in json.loads(capsys.readouterr().out)["parties"]}
    assert {n: status[n]["public_records"] for n in PARTIES} == PUBLIC_RECORDS


def test_submit_distributed_without_record_bound_is_one_line(deployment, capsys):
    """A roster party that declared no bound (party-3 registers without one): refused, naming it."""
    _, pki, server, conn = deployment
    ch, stub = raw_stub(pki, server.port, "party-3")
    with ch:
        register(stub, "party-3")
    code = main(["job", "submit", "--algorithm", "naive-bayes", "--epsilon", "1", "--noise", "distributed",
                 "--parties", "party-0", "party-3", "party-1", *conn])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "--records" in err and "Traceback" not in err
    assert "party-3" in err and "party-0" not in err and "public_records" in err


def test_a_party_refuses_a_total_bound_below_its_published_bound(deployment, capsys):
    """--records 350 < party-0's published 400: party-0 refuses before any charge (the job is refused)."""
    root, _, _, conn = deployment
    code = main(["job", "submit", "--algorithm", "naive-bayes", "--epsilon", "1", "--delta", "1e-6",
                 "--noise", "distributed", "--records", "350", "--parties", *PARTIES, "--job-id", "sec-nb-low",
                 "--wait", *conn])
    out, err = capsys.readouterr()
    rec = json.loads(out[out.index("{"):])
    assert code == 1 and rec["state"] == "refused", rec
    assert "published bound 400" in json.dumps(rec), rec
    with BudgetLedger(root / "party-0" / "ledger.sqlite", epsilon_limit=10.0, delta_limit=1e-5) as led:
        assert "sec-nb-low:plan" not in led.charge_ids()


def test_a_party_with_more_records_than_it_publishes_does_not_start(deployment):
    from dpfed.data.schema import DataValidationError

    root = deployment[0]
    cfg = PartyConfig.load(root / "party-2" / "party.toml")
    low = PartyConfig(**{**cfg.__dict__, "public_records": 299})
    with pytest.raises(DataValidationError, match="300 records, more than public_records = 299"):
        low.load_data()
    assert len(cfg.load_data()[0]) == 300


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
