"""The coordinator's metrics endpoint and console over real HTTPS, after a real 3-party job over gRPC with
mutual TLS (issue 28).

The metrics are parsed with prometheus_client's own parser and compared with the job's record (rounds,
refusals, final states) and the coordinator's status (every party's spent epsilon); the console's pages
are read as HTML. Who gets in: an operator certificate and an operator token do; a party certificate, a
revoked operator certificate, an operator certificate of another CA, no certificate, an expired token
and a token of another CA do not (both endpoints). Nothing is random here except the noise, which no
assertion looks at.
"""
from __future__ import annotations

import http.client
import json
import shutil
import ssl
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dpfed.cli import main
from dpfed.core.ledger import BudgetLedger
from dpfed.federation import certs
from dpfed.federation.console_token import issue_token
from net_helpers import ThreadParty, admin, make_pki, party_config, start_coordinator, stop_parties, wait_until
from tty_capture import terminal_stderr

ROUNDS = 6


def _get(port: int, path: str, pki=None, name: str | None = None, evil: bool = False, token: str | None = None,
         method: str = "GET") -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(pki.files("coordinator").ca))
    if name is not None:
        f = pki.files(name, evil)
        ctx.load_cert_chain(str(f.cert), str(f.key))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=20)
    try:
        conn.request(method, path, headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def _refused(port: int, path: str, pki, **kw) -> bool:
    """403, or a TLS handshake the server ends (a certificate of another CA)."""
    try:
        status, _ = _get(port, path, pki, **kw)
    except (ssl.SSLError, ConnectionError):
        return True
    return status == 403


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console")
    pki = make_pki(tmp / "pki", parties=3)
    ca = tmp / "pki" / "ca"
    certs.issue("ops-gone", ca, tmp / "pki" / "certs", role="operator")
    shutil.copy(certs.revoke("ops-gone", ca), tmp / "pki" / "certs" / "crl.pem")  # beside the coordinator's ca.crt
    running = start_coordinator(pki, tmp / "state", console_port=0, metrics_port=0)
    parties = [ThreadParty(party_config(pki, tmp, f"party-{i}", running.port, epsilon_limit=3.0))
               for i in range(3)]
    try:
        with admin(pki, running.port) as client:
            wait_until(lambda: sum(p["connected"] for p in client.status()["parties"]) == 3, 30, "3 parties")
            done = client.wait(client.submit_job("noisy-mean", {"rounds": ROUNDS, "epsilon": 2.0}, job_id="ok-job"),
                               timeout=120)
            # a second job over every party's limit (2 + 2 > 3): all three refuse it, with the budget reason
            refused = client.wait(client.submit_job("noisy-mean", {"rounds": 2, "epsilon": 2.0}, job_id="too-much"),
                                  timeout=120, raise_on_failure=False)
            status = client.status()
        yield {"pki": pki, "tmp": tmp, "running": running, "done": done, "refused": refused, "status": status}
    finally:
        stop_parties(parties)
        running.stop()


def test_metrics_parse_and_equal_the_jobs_record(deployment):
    d = deployment
    status, text = _get(d["running"].metrics.port, "/metrics", d["pki"], "operator")
    assert status == 200
    m = _samples(text)
    assert d["done"]["state"] == "done" and d["done"]["rounds"] == ROUNDS
    assert m[("dpfed_rounds_total", (("algorithm", "noisy-mean"),))] == d["done"]["rounds"]
    assert m[("dpfed_round_seconds_count", (("algorithm", "noisy-mean"),))] == ROUNDS
    assert d["refused"]["state"] == "refused" and len(d["refused"]["refusals"]) == 3
    assert all("privacy budget exceeded" in r for r in d["refused"]["refusals"].values())
    assert m[("dpfed_refusals_total", (("kind", "budget"),))] == 3
    assert m[("dpfed_jobs_finished_total", (("state", "done"),))] == 1
    assert m[("dpfed_jobs_finished_total", (("state", "refused"),))] == 1
    assert m[("dpfed_jobs", (("state", "done"),))] == 1 and m[("dpfed_jobs", (("state", "refused"),))] == 1
    assert m[("dpfed_connected_parties", ())] == 3
    for p in d["status"]["parties"]:
        assert m[("dpfed_party_epsilon_spent", (("party", p["name"]),))] == pytest.approx(p["epsilon_spent"], abs=0)
        assert m[("dpfed_party_epsilon_limit", (("party", p["name"]),))] == 3.0
    # every round: one task message to each of 3 parties, one result from each
    assert m[("dpfed_task_bytes_sent_total", ())] > 0 and m[("dpfed_result_bytes_received_total", ())] > 0
    assert m[("dpfed_dropouts_total", ())] == 0 and m[("dpfed_aborted_rounds_total", ())] == 0


def test_party_ledgers_record_who_asked(deployment):
    d = deployment
    with BudgetLedger(d["tmp"] / "party-1" / "ledger.sqlite", epsilon_limit=3.0, delta_limit=1e-6) as led:
        rows = led.history()["charges"]
    assert [r["job"] for r in rows] == ["ok-job"]  # the refused job charged nothing
    assert rows[0]["algorithm"] == "noisy-mean"
    assert rows[0]["coordinator"] == f"coordinator@127.0.0.1:{d['running'].port}"


def test_console_pages_show_the_federation_jobs_and_budgets(deployment):
    d = deployment
    port, pki = d["running"].console.port, d["pki"]
    status, page = _get(port, "/federation", pki, "operator")
    assert status == 200 and page.count('class="party"') == 3 and "connected" in page
    assert 'src="/static/console.js"' in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
    status, page = _get(port, "/fragment/jobs", pki, "operator")
    assert f'data-round="{ROUNDS}">round {ROUNDS} of {ROUNDS}<' in page and "too-much" in page
    status, page = _get(port, "/budgets", pki, "operator")
    assert status == 200 and page.count('class="series"') == 3  # one line per party
    status, page = _get(port, "/job/too-much", pki, "operator")
    refusals = page.split("<h2>Refusals</h2>")[1]
    assert status == 200 and refusals.count("<td>budget</td>") == 3 and refusals.count("privacy budget exceeded") == 3
    status, page = _get(port, "/job/ok-job", pki, "operator")
    assert "Rounds over time" in page and "Answer bytes" in page
    assert _get(port, "/static/console.js", pki, "operator")[0] == 200
    assert _get(port, "/jobs", pki, "operator", method="POST")[0] == 405  # read-only


@pytest.mark.parametrize("endpoint", ["console", "metrics"])
def test_only_operators_get_in(deployment, endpoint):
    d = deployment
    pki, ca = d["pki"], d["tmp"] / "pki" / "ca"
    port = getattr(d["running"], endpoint).port
    path = "/jobs" if endpoint == "console" else "/metrics"
    assert _get(port, path, pki, "operator")[0] == 200
    assert _get(port, path, pki, token=issue_token("alice", ca))[0] == 200
    assert _refused(port, path, pki, name="party-0")            # a party certificate
    assert _refused(port, path, pki, name="coordinator")        # not an operator either
    assert _refused(port, path, pki, name="ops-gone")           # a revoked operator certificate
    assert _refused(port, path, pki, name="operator", evil=True)  # an operator certificate of another CA
    assert _refused(port, path, pki)                             # no certificate, no token
    assert _refused(port, path, pki, token=issue_token("alice", ca, hours=1, now=time.time() - 7200))  # expired
    assert _refused(port, path, pki, token=issue_token("alice", d["tmp"] / "pki" / "evil-ca"))  # another CA's


def test_a_token_in_the_address_becomes_a_cookie(deployment):
    d = deployment
    token = issue_token("alice", d["tmp"] / "pki" / "ca")
    ctx = ssl.create_default_context(cafile=str(d["pki"].files("coordinator").ca))
    conn = http.client.HTTPSConnection("127.0.0.1", d["running"].console.port, context=ctx, timeout=20)
    conn.request("GET", f"/jobs?token={token}&refresh=1")
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 303 and resp.getheader("Location") == "/jobs?refresh=1"
    cookie = resp.getheader("Set-Cookie")
    assert "HttpOnly" in cookie and "Secure" in cookie and "SameSite=Strict" in cookie
    conn.request("GET", "/jobs", headers={"Cookie": cookie.split(";")[0]})
    resp = conn.getresponse()
    assert resp.status == 200 and "ok-job" in resp.read().decode()
    conn.close()


def test_job_wait_bar_only_on_a_terminal(deployment, capsys, monkeypatch):
    d = deployment
    f = d["pki"].files("operator")
    argv = ["job", "wait", "ok-job", "--coordinator", f"127.0.0.1:{d['running'].port}", "--cert", str(f.cert),
            "--key", str(f.key), "--ca", str(f.ca)]
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and json.loads(cap.out)["rounds"] == ROUNDS  # not a terminal: as before
    with terminal_stderr(monkeypatch) as err:
        assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["rounds"] == ROUNDS  # stdout unchanged
    assert f"round {ROUNDS} of {ROUNDS}, done" in err[0]
