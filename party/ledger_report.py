"""The data owner's account of what its party released: ``dpfed party ledger`` (text, JSON, CSV, HTML).

Everything comes from the party's own ledger (:meth:`dpfed.core.ledger.BudgetLedger.history`): every
charge with its job, algorithm, parameters digest, the coordinator that offered it, time, its own epsilon
(the charge alone, at the ledger's delta, by the ledger's accountant), the owner's total after it, and
the accountant; every answered round's task and answer digests; the limit, spent and remaining budget.
No record value is in the ledger, so none can be in the report. The HTML page is one self-contained
file (inline CSS and SVG: :mod:`dpfed.federation.svg_chart`), plotting the cumulative epsilon over time.
"""
from __future__ import annotations

import csv
import datetime as dt
import html
import io
import json
import time
from typing import Any

from dpfed.core import accounting
from dpfed.core.ledger import BudgetLedger
from dpfed.federation.svg_chart import step_chart

__all__ = ["ledger_report", "report_csv", "report_html", "report_text", "CSV_FIELDS"]

UNKNOWN = "unknown (recorded before dpfed kept it)"

CSV_FIELDS = ("kind", "time", "job", "algorithm", "params_digest", "coordinator", "epsilon", "delta", "accountant",
              "epsilon_total_after", "charge_id", "round", "task_digest", "answer_digest")


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(float(t), dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def ledger_report(ledger: BudgetLedger, party: str = "") -> dict[str, Any]:
    """The whole ledger as one JSON-ready dict (charges in commit order, answers in time order)."""
    hist = ledger.history()
    report = ledger.report()
    charges = []
    for row in hist["charges"]:
        event = accounting.event_from_json(row["event"])
        eps = accounting.epsilon(event, float(row["delta_limit"]), accountant=ledger.accountant,
                                 neighbouring=ledger.neighbouring, pld_discretization=ledger.pld_discretization)
        charges.append({
            "seq": int(row["seq"]), "charge_id": row["charge_id"], "job": row["job"],
            "algorithm": row["algorithm"] or UNKNOWN, "params_digest": row["params_digest"] or UNKNOWN,
            "coordinator": row["coordinator"] or UNKNOWN, "time": _iso(row["created_at"]),
            "created_at": float(row["created_at"]), "epsilon": float(eps), "delta": float(row["delta_limit"]),
            "accountant": ledger.accountant, "epsilon_total_after": float(row["epsilon_after"]),
            "event": json.loads(row["event"])})
    answers = [{"job": a["job"], "round": int(a["round"]), "task_digest": a["task_digest"],
                "answer_digest": a["answer_digest"], "time": _iso(a["created_at"]),
                "created_at": float(a["created_at"])} for a in hist["answers"]]
    spent = float(report["total"]["epsilon"])
    return {"party": party, "ledger": str(ledger.path), "accountant": ledger.accountant,
            "neighbouring": ledger.neighbouring,
            "limit": {"epsilon": ledger.epsilon_limit, "delta": ledger.delta_limit},
            "spent": {"epsilon": spent, "delta": ledger.delta_limit},
            "remaining": {"epsilon": max(ledger.epsilon_limit - spent, 0.0), "delta": ledger.delta_limit},
            "jobs": report["jobs"], "charges": charges, "answers": answers}


def report_csv(report: dict[str, Any]) -> str:
    """One row per charge (``kind`` = charge) and per answered round (``kind`` = answer)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for c in report["charges"]:
        w.writerow({"kind": "charge", **{k: c[k] for k in CSV_FIELDS if k in c}})
    for a in report["answers"]:
        w.writerow({"kind": "answer", **a})
    return buf.getvalue()


def report_text(report: dict[str, Any]) -> str:
    """A terminal summary: the budget, then one line per charge; answers counted per job."""
    lim, spent, rem = report["limit"], report["spent"], report["remaining"]
    lines = [f"party {report['party'] or '?'}: ledger {report['ledger']} ({report['accountant']} accountant)",
             f"budget: limit epsilon {lim['epsilon']:.6g} at delta {lim['delta']:.3g}; spent {spent['epsilon']:.6g};"
             f" remaining {rem['epsilon']:.6g}", "",
             f"{'time (UTC)':<21} {'job':<24} {'algorithm':<18} {'epsilon':>9} {'total':>9}  coordinator"]
    for c in report["charges"]:
        alg = c["algorithm"] if c["algorithm"] != UNKNOWN else "?"
        who = c["coordinator"] if c["coordinator"] != UNKNOWN else "?"
        lines.append(f"{c['time']:<21} {c['job'][:24]:<24} {alg[:18]:<18} {c['epsilon']:>9.4g} "
                     f"{c['epsilon_total_after']:>9.4g}  {who}")
    if not report["charges"]:
        lines.append("(no charges: nothing has been released)")
    per_job: dict[str, int] = {}
    for a in report["answers"]:
        per_job[a["job"]] = per_job.get(a["job"], 0) + 1
    lines += ["", "answers (rounds answered, digests in --json / --csv): "
              + (", ".join(f"{j}: {n}" for j, n in per_job.items()) or "none")]
    return "\n".join(lines) + "\n"


_CSS = """body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}th{background:#f0f0f0}
td.num{text-align:right;font-variant-numeric:tabular-nums}code{font-size:12px}.big{font-size:20px}"""


def _table(head: list[str], rows: list[list[str]], num: set[int]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td{" class=num" if i in num else ""}>{v}</td>' for i, v in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def report_html(report: dict[str, Any]) -> str:
    """The report as one self-contained HTML page (no script, no external asset)."""
    esc = html.escape
    lim, spent, rem = report["limit"], report["spent"], report["remaining"]
    chart = step_chart({"cumulative epsilon": [(c["created_at"], c["epsilon_total_after"])
                                               for c in report["charges"]]},
                       title="Cumulative epsilon spent over time", y_label="epsilon",
                       limits={"limit": lim["epsilon"]}, now=time.time())
    charges = [[esc(c["time"]), f"<code>{esc(c['job'])}</code>", esc(c["algorithm"]),
                f"<code>{esc(c['params_digest'][:16])}</code>", esc(c["coordinator"]), f"{c['epsilon']:.6g}",
                f"{c['delta']:.3g}", esc(c["accountant"]), f"{c['epsilon_total_after']:.6g}"]
               for c in report["charges"]]
    answers = [[esc(a["time"]), f"<code>{esc(a['job'])}</code>", str(a["round"]),
                f"<code>{esc(a['task_digest'][:16])}</code>", f"<code>{esc(a['answer_digest'])}</code>"]
               for a in report["answers"]]
    title = f"Privacy ledger of party {report['party']}" if report["party"] else "Privacy ledger"
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{esc(title)}</title>",
        f"<style>{_CSS}</style></head><body>", f"<h1>{esc(title)}</h1>",
        f"<p>Ledger <code>{esc(report['ledger'])}</code>, {esc(report['accountant'])} accountant, "
        f"{esc(report['neighbouring'])} neighbours. Epsilons are measured at delta {lim['delta']:.3g}.</p>",
        f'<p class="big">Spent <b id="spent">{spent["epsilon"]:.6g}</b> of {lim["epsilon"]:.6g}; '
        f'remaining <b id="remaining">{rem["epsilon"]:.6g}</b>.</p>', chart,
        f"<h2>Charges ({len(charges)})</h2>",
        "<p>Each charge is a job's whole plan, committed before anything of the job left this party; "
        "epsilon is the charge alone, the total composes it with everything before.</p>",
        _table(["time (UTC)", "job", "algorithm", "parameters digest", "coordinator", "epsilon", "delta",
                "accountant", "total epsilon after"], charges, {5, 6, 8}),
        f"<h2>Answers ({len(answers)})</h2>",
        "<p>Every round this party answered: the digests of the task received and of the answer sent "
        "(SHA-256; the answer's own bytes are not shown).</p>",
        _table(["time (UTC)", "job", "round", "task digest", "answer digest"], answers, {2}),
        "</body></html>"])
