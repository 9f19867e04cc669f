"""The party daemon's ledger page (``console_port`` in party.toml): on 127.0.0.1 only, read-only, the same
report as ``dpfed party ledger`` (compared with the ledger's own rows here), and only to requests addressed to
127.0.0.1 or localhost at its port (another Host, as a DNS-rebinding web page sends, gets 421 and no ledger). No
coordinator is needed: the daemon serves its page while it keeps trying to reach one."""
from __future__ import annotations

import dataclasses
import http.client
import json

import dp_accounting as dpa

from dpfed.core.ledger import BudgetLedger
from net_helpers import ThreadParty, free_port, make_pki, party_config


def _get(port: int, path: str, method: str = "GET", host: str | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request(method, path, headers={"Host": host} if host else {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_the_daemon_serves_its_ledger_on_loopback(tmp_path):
    pki = make_pki(tmp_path / "pki", parties=1)
    cfg = dataclasses.replace(party_config(pki, tmp_path, "party-0", free_port()), console_port=0,
                              reconnect_seconds=5.0)
    with BudgetLedger(cfg.ledger, epsilon_limit=cfg.epsilon_limit, delta_limit=cfg.delta_limit) as led:
        led.charge("job-x", dpa.LaplaceDpEvent(4.0), charge_id="job-x:plan", params_digest="d" * 64,
                   origin=("noisy-mean", "coordinator@127.0.0.1:1"))
        rows = led.history()["charges"]
    party = ThreadParty(cfg)
    try:
        page = party.daemon.page
        assert page is not None and page.server_address[0] == "127.0.0.1"
        status, html = _get(page.port, "/")
        assert status == 200 and "Privacy ledger of party party-0" in html and "<svg" in html
        status, body = _get(page.port, "/ledger.json")
        got = json.loads(body)["charges"]
        assert [(c["job"], c["epsilon_total_after"], c["coordinator"]) for c in got] == \
            [(r["job"], r["epsilon_after"], r["coordinator"]) for r in rows]
        assert _get(page.port, "/ledger.csv")[1].startswith("kind,time,job")
        assert _get(page.port, "/", "POST")[0] == 405 and _get(page.port, "/x")[0] == 404
        assert _get(page.port, "/ledger.json", host=f"localhost:{page.port}")[0] == 200
        for host in (f"rebound.example:{page.port}", "127.0.0.1", f"127.0.0.1:{page.port + 1}"):  # DNS rebinding
            status, body = _get(page.port, "/ledger.json", host=host)
            assert status == 421 and "answers only at http://127.0.0.1" in body and "job-x" not in body, body
    finally:
        party.stop()
