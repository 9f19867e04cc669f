"""The operator's console: read-only web pages served by the coordinator itself (``console_port``).

Pages (each also as ``/fragment/...``, the part a page's script re-fetches every few seconds; one JSON view):

- ``/`` or ``/federation``: every party, connected or not, last seen, its ingress shard, its certificate's
  expiry and whether it is revoked, its spent and declared epsilon;
- ``/jobs``: every job's state, algorithm, parameters, round r of T with a progress bar, seconds per round,
  time left, dropouts and aborted rounds, planned and spent epsilon;
- ``/budgets``: every party's spent epsilon against its limit, and a plot of spent epsilon over time per party;
- ``/job/JOB``: one job: its facts, rounds over time, answer sizes per round, refusals with their reasons;
- ``/api/status``: the status as JSON (what ``dpfed status --json`` prints).

Everything is rendered here (HTML, SVG plots: :mod:`dpfed.federation.svg_chart`); the page's one script and
style sheet are served by the coordinator too (``/static/``): nothing is fetched from anywhere else. The
console changes nothing (GET only, :mod:`coordinator.web`) and shows public facts only: the coordinator
never has a record value. Access: :class:`coordinator.web.Access`.
"""
from __future__ import annotations

import html
import json
import math
import time
from pathlib import Path
from typing import Any

from coordinator.web import Reply, Route
from dpfed.federation.svg_chart import step_chart
from dpfed.federation.tls import PeerRefused, revoked_serials

__all__ = ["console_routes", "total_rounds"]

_STATIC = Path(__file__).with_name("console_static")
_PAGES = (("federation", "Federation"), ("jobs", "Jobs"), ("budgets", "Budgets"))
esc = html.escape


def total_rounds(job: dict[str, Any]) -> int | None:
    """T, the job's number of rounds, from its rounds done and progress (progress = r / T; None: unknown yet)."""
    if job["state"] == "done":
        return int(job["rounds"])
    p = float(job.get("progress") or 0.0)
    return max(int(round(job["rounds"] / p)), int(job["rounds"])) if p > 0 else None


def _ago(t: float | None, now: float) -> str:
    if t is None:
        return "never"
    s = max(now - float(t), 0.0)
    return "now" if s < 2 else f"{s:.0f} s ago" if s < 120 else f"{s / 60:.0f} min ago" if s < 7200 else \
        f"{s / 3600:.1f} h ago"


def _utc(t: float | None) -> str:
    return "?" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(t)))


def _num(x: float | None, fmt: str = ".4g") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _duration(s: float | None) -> str:
    if s is None:
        return "–"
    return f"{s:.2f} s" if s < 60 else f"{s / 60:.1f} min" if s < 3600 else f"{s / 3600:.1f} h"


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{v}</td>" for v in r) + "</tr>" for r in rows)
    if not rows:
        body = f'<tr><td colspan="{len(head)}" class="none">none</td></tr>'
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


class _Console:
    """The pages of one coordinator (a :class:`coordinator.server.Coordinator`)."""

    def __init__(self, coord: Any) -> None:
        self.c = coord

    # ------------------------------------------------------------------ the pages' live parts
    def federation(self, q: dict[str, str]) -> str:
        st, now = self.c.status(), time.time()
        try:
            revoked = revoked_serials(self.c.config.tls)
        except PeerRefused:
            revoked = frozenset()
        rows = []
        for p in st["parties"]:
            facts = self.c.store.parties.get(p["name"], {})
            expires = facts.get("cert_expires")
            serial = facts.get("cert_serial")
            is_revoked = serial is not None and int(serial, 16) in revoked
            days = None if expires is None else (float(expires) - now) / 86400
            rows.append([f'<span class="party">{esc(p["name"])}</span>',
                         '<span class="ok">connected</span>' if p["connected"] else '<span class="away">away</span>',
                         esc(_ago(p.get("last_seen"), now)),
                         esc(str(p["shard"])) if p.get("shard", -1) >= 0 else "–",
                         "?" if expires is None else f"{esc(_utc(expires)[:10])} ({days:.0f} days)",
                         '<span class="bad">REVOKED</span>' if is_revoked else "no",
                         f'{_num(p.get("epsilon_spent"))} of {_num(p.get("epsilon_limit"))}'])
        n_conn = sum(1 for p in st["parties"] if p["connected"])
        running = sum(1 for j in st["jobs"] if j["state"] in ("offering", "running"))
        return (f'<p class="summary"><b id="connected-count">{n_conn}</b> of {len(st["parties"])} parties connected; '
                f"{running} job(s) running, {len(st['jobs'])} in all; max {st['max_concurrent_jobs']} at once.</p>"
                + _table(["party", "stream", "last seen", "shard", "certificate expires", "revoked",
                          "epsilon spent of limit"], rows, "parties"))

    def jobs(self, q: dict[str, str]) -> str:
        st, rows = self.c.status(), []
        for j in reversed(st["jobs"]):
            rows.append(self._job_row(j))
        return _table(["job", "state", "algorithm", "parameters", "progress", "s / round", "time left",
                       "dropouts", "aborted rounds", "epsilon planned", "epsilon spent"], rows, "jobs")

    def _job_row(self, j: dict[str, Any]) -> list[str]:
        tl = self.c.metrics.timelines.snapshot(j["job_id"]) or {}
        total, r = total_rounds(j), int(j["rounds"])
        spr = tl.get("seconds_per_round")
        left = None if spr is None or total is None or j["state"] != "running" else spr * max(total - r, 0)
        params = {k: v for k, v in j["params"].items() if k != "roster"}
        summary = j.get("summary") or {}
        spent = max(j["party_epsilon"].values(), default=None)
        bar = (f'<progress max="{total}" value="{r}"></progress>' if total else '<progress></progress>')
        return [f'<a href="/job/{esc(j["job_id"])}">{esc(j["job_id"])}</a>',
                f'<span class="state {esc(j["state"])}">{esc(j["state"])}</span>', esc(j["algorithm"]),
                f'<code class="params">{esc(json.dumps(params, sort_keys=True)[:160])}</code>',
                f'<span class="round" data-round="{r}">round {r} of {total if total else "?"}</span> {bar}',
                _duration(spr), _duration(left) if j["state"] == "running" else "–",
                str(summary.get("dropouts", tl.get("dropouts", 0))),
                str(summary.get("aborted_rounds", tl.get("aborted_rounds", 0))),
                _num(j["params"].get("epsilon")), _num(spent)]

    def budgets(self, q: dict[str, str]) -> str:
        st, rows = self.c.status(), []
        for p in st["parties"]:
            spent, limit = float(p.get("epsilon_spent", 0.0)), float(p.get("epsilon_limit", float("nan")))
            bar = f'<progress max="{limit}" value="{min(spent, limit)}"></progress>' if limit == limit else ""
            rows.append([f'<span class="party">{esc(p["name"])}</span>', _num(spent), _num(limit),
                         _num(max(limit - spent, 0.0) if limit == limit else None), bar])
        history = self.c.store.budget_history()
        chart = step_chart({name: history.get(name, []) for name in sorted(history)},
                           title="Epsilon spent over time, per party (the coordinator's record)",
                           y_label="epsilon spent", now=time.time())
        return (_table(["party", "epsilon spent", "limit", "remaining", ""], rows, "budgets")
                + f'<div class="chart" id="budget-chart">{chart}</div>')

    def job(self, q: dict[str, str]) -> str:
        job_id = q["_path"].split("/", 2)[2]
        j = next((x for x in self.c.status()["jobs"] if x["job_id"] == job_id), None)
        if j is None:
            return f"<p>No job {esc(job_id)}.</p>"
        tl = self.c.metrics.timelines.snapshot(job_id) or {"rounds": [], "refusals": []}
        row = self._job_row(j)
        facts = _table(["state", "algorithm", "progress", "s / round", "time left", "dropouts", "aborted rounds",
                        "epsilon planned", "epsilon spent"], [row[1:3] + row[4:]], "job")
        rounds = tl["rounds"]
        charts = ""
        if rounds:
            charts = (step_chart({"rounds completed": [(x["time"], i + 1) for i, x in enumerate(rounds)]},
                                 title="Rounds over time", y_label="rounds")
                      + step_chart({"answer bytes": [(x["time"], x["answer_bytes"]) for x in rounds]},
                                   title="Answer bytes received per round", y_label="bytes"))
        refusals = [[esc(_utc(x["time"])), esc(x["party"]), esc(x["kind"]), esc(x["reason"])] for x in tl["refusals"]]
        seen = {x["party"] for x in tl["refusals"]}
        refusals += [["?", esc(p), "offer", esc(r)] for p, r in sorted(j["refusals"].items()) if p not in seen]
        spent = "".join(f"<li>{esc(p)}: {_num(e)}</li>" for p, e in sorted(j["party_epsilon"].items()))
        return (f'<p>Parties: {esc(", ".join(j["parties"])) or "?"}; created {_utc(j["created"])}, started '
                f'{_utc(j.get("started"))}, finished {_utc(j.get("finished"))}.</p>'
                + (f'<p class="reason">{esc(j["reason"])}</p>' if j.get("reason") else "") + facts
                + f'<h2>Epsilon each party charged for this job</h2><ul>{spent or "<li>none yet</li>"}</ul>'
                + f'<div class="chart">{charts or "<p>No round has ended yet (since the coordinator started).</p>"}'
                + "</div><h2>Refusals</h2>" + _table(["time", "party", "kind", "reason"], refusals, "refusals"))

    # ------------------------------------------------------------------ the whole page around them
    def page(self, name: str, title: str, q: dict[str, str]) -> Reply:
        path = q["_path"]
        inner = getattr(self, name)(q)
        refresh = q.get("refresh", "2")
        try:
            refresh = str(min(max(float(refresh), 0.2), 60.0))
        except ValueError:
            refresh = "2"
        nav = "".join(f'<a href="/{p}"{" class=here" if p == name else ""}>{t}</a>' for p, t in _PAGES)
        body = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>dpfed: {esc(title)}</title>'
                '<link rel="stylesheet" href="/static/console.css"><script src="/static/console.js" defer></script>'
                f'</head><body><header><b>dpfed console</b><nav>{nav}</nav><span class="who">operator '
                f'{esc(q["_operator"])} · updated <span id="updated">{time.strftime("%H:%M:%S UTC", time.gmtime())}'
                f'</span></span></header><h1>{esc(title)}</h1>'
                f'<main id="live" data-src="/fragment{esc(path)}" data-refresh="{refresh}">{inner}</main></body></html>')
        return Reply(body.encode())

    def fragment(self, q: dict[str, str]) -> Reply:
        rest = q["_path"][len("/fragment"):]
        q = {**q, "_path": rest}
        name = "federation" if rest in ("", "/") else rest.strip("/").split("/", 1)[0]
        if name not in ("federation", "jobs", "budgets", "job"):
            return Reply(b"404 not found\n", "text/plain; charset=utf-8", 404)
        return Reply(getattr(self, name)(q).encode())

    def static(self, q: dict[str, str]) -> Reply:
        name = q["_path"].rsplit("/", 1)[-1]
        kinds = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}
        if name not in kinds:
            return Reply(b"404 not found\n", "text/plain; charset=utf-8", 404)
        return Reply((_STATIC / name).read_bytes(), kinds[name])

    def api_status(self, q: dict[str, str]) -> Reply:
        return Reply(json.dumps(self.c.status(), allow_nan=True).encode(), "application/json")


def console_routes(coord: Any) -> tuple[dict[str, Route], dict[str, Route]]:
    """(exact routes, prefix routes) of the console of ``coord``."""
    con = _Console(coord)
    exact: dict[str, Route] = {"/api/status": con.api_status}
    for path, (name, title) in {"/": _PAGES[0], "/federation": _PAGES[0], "/jobs": _PAGES[1],
                                "/budgets": _PAGES[2]}.items():
        exact[path] = lambda q, n=name, t=title: con.page(n, t, q)
    prefixes: dict[str, Route] = {"/job/": lambda q: con.page("job", f"Job {q['_path'][5:]}", q),
                                  "/fragment/": con.fragment, "/static/": con.static}
    return exact, prefixes
