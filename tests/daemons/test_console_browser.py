"""The operator's console in a real browser (headless Chromium) during a real 3-party job over gRPC with
mutual TLS: what a person would see. The parties on the federation page, the job's round count advancing
on the jobs page while it runs (the page updates itself), and after the job one line per party on the
budget plot; every resource the browser loaded came from the coordinator. Needs Debian's chromium and
chromium-driver (.ci/run installs them). Screenshots are taken by bench/console_screenshots.py, not here.
"""
from __future__ import annotations

import time

from selenium.webdriver.support.ui import WebDriverWait

from browser import Browser
from dpfed.federation.console_token import issue_token
from net_helpers import ThreadParty, admin, make_pki, party_config, start_coordinator, stop_parties

ROUNDS = 150
NAMES = ["party-0", "party-1", "party-2"]

_ROUNDS_JS = """return Array.from(document.querySelectorAll('table.jobs tbody tr')).map(function (tr) {
  var a = tr.querySelector('a'), r = tr.querySelector('span.round'), s = tr.querySelector('span.state');
  return a && r && s ? [a.textContent, parseInt(r.getAttribute('data-round')), s.textContent, r.textContent] : null;
}).filter(Boolean);"""


def test_the_console_shows_parties_progress_and_budgets(tmp_path):
    pki = make_pki(tmp_path / "pki", parties=3)
    running = start_coordinator(pki, tmp_path / "state", console_port=0)
    parties = [ThreadParty(party_config(pki, tmp_path, n, running.port, epsilon_limit=5.0)) for n in NAMES]
    browser = None
    try:
        browser = Browser(pki.files("coordinator").cert)
        d = browser.driver
        base = f"https://127.0.0.1:{running.console.port}"
        d.get(f"{base}/federation?token={issue_token('operator', tmp_path / 'pki' / 'ca')}&refresh=0.3")
        assert d.current_url == f"{base}/federation?refresh=0.3"  # the token went into a cookie
        WebDriverWait(d, 60, 0.1).until(  # the page updates itself as the parties connect
            lambda d: d.execute_script("return document.querySelectorAll('span.ok').length") == 3)
        assert sorted(d.execute_script(
            "return Array.from(document.querySelectorAll('span.party')).map(e => e.textContent)")) == NAMES

        d.get(f"{base}/jobs?refresh=0.3")
        with admin(pki, running.port) as client:
            job = client.submit_job("noisy-mean", {"rounds": ROUNDS, "epsilon": 1.0}, job_id="browser-job")
            seen: list[tuple[int, str]] = []
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                rows = {r[0]: r for r in d.execute_script(_ROUNDS_JS)}
                if job in rows:
                    seen.append((rows[job][1], rows[job][2]))
                    if rows[job][2] in ("done", "failed", "refused", "cancelled"):
                        break
                time.sleep(0.1)
            record = client.wait(job, timeout=60)
        assert record["state"] == "done" and seen[-1] == (ROUNDS, "done"), seen[-5:]
        rounds = [r for r, _ in seen]
        assert rounds == sorted(rounds)  # never backwards
        assert len({r for r, s in seen if 0 < r < ROUNDS and s == "running"}) >= 2, seen  # seen advancing
        assert rows[job][3] == f"round {ROUNDS} of {ROUNDS}"

        d.get(f"{base}/budgets")
        lines = d.execute_script("return Array.from(document.querySelectorAll('#budget-chart polyline.series'))"
                                 ".map(e => [e.getAttribute('data-name'), e.getAttribute('points').split(' ').length])")
        assert sorted(n for n, _ in lines) == NAMES and all(k >= 3 for _, k in lines)  # one step up per party
        legend = d.find_element("id", "budget-chart").text
        assert all(n in legend for n in NAMES)
        loaded = d.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        assert loaded and all(u.startswith(base + "/") for u in loaded), loaded  # nothing from anywhere else
    finally:
        if browser is not None:
            browser.quit()
        stop_parties(parties)
        running.stop()
