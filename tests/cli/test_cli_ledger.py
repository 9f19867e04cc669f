"""``dpfed party ledger``: a ledger with known charges and answers prints exactly them.

The JSON and CSV are compared with the SQLite rows read here directly (not through dpfed), each charge's
own epsilon with the Laplace mechanism's exact epsilon 1/b (the PLD accountant is within its grid of it),
and a ledger written before ``job_origin`` existed still loads. Nothing here is random.
"""
from __future__ import annotations

import csv
import io
import json
import re
import sqlite3

import dp_accounting as dpa

from dpfed.cli import main
from dpfed.core.ledger import BudgetLedger

DELTA = 1e-5


def _party(tmp_path, limit=5.0):
    (tmp_path / "party.toml").write_text(
        'name = "clinic-a"\ncoordinator = "127.0.0.1:1"\ndata = "d.csv"\nledger = "state/ledger.sqlite"\n'
        f"epsilon_limit = {limit}\ndelta_limit = {DELTA}\ninsecure = true\n"
        '[schema]\nn_classes = 2\n[[schema.features]]\nname = "x"\nkind = "numeric"\nlower = 0\nupper = 1\n')
    (tmp_path / "state").mkdir()
    return tmp_path / "party.toml", tmp_path / "state" / "ledger.sqlite"


def _fill(db):
    with BudgetLedger(db, epsilon_limit=5.0, delta_limit=DELTA) as led:
        led.charge("job-a", dpa.LaplaceDpEvent(2.0), charge_id="job-a:plan", params_digest="a" * 64,
                   origin=("naive-bayes", "coordinator@10.0.0.1:50051"))
        led.record_answer("job-a", 0, "t0" * 32, "r0" * 32, b"bytes0")
        led.record_answer("job-a", 1, "t1" * 32, "r1" * 32, b"bytes1")
        led.charge("job-b", dpa.LaplaceDpEvent(4.0), charge_id="job-b:plan", params_digest="b" * 64,
                   origin=("kmeans", "coordinator@10.0.0.1:50051"))
        led.record_answer("job-b", 0, "t2" * 32, "r2" * 32, b"bytes2")


def _rows(db):
    con = sqlite3.connect(db)
    try:
        charges = con.execute("SELECT c.charge_id, c.job, c.epsilon_after, c.delta_limit, c.created_at,"
                              " j.params_digest FROM charges c JOIN jobs j USING (job) ORDER BY c.seq").fetchall()
        origin = dict((j, (a, c)) for j, a, c in con.execute("SELECT job, algorithm, coordinator FROM job_origin"))
        answers = con.execute("SELECT job, round, task_digest, answer_digest FROM answers"
                              " ORDER BY job, round").fetchall()
    finally:
        con.close()
    return charges, origin, answers


def test_json_is_exactly_the_ledger_rows(tmp_path, capsys):
    cfg, db = _party(tmp_path)
    _fill(db)
    assert main(["party", "ledger", "--config", str(cfg), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    charges, origin, answers = _rows(db)
    assert [(c["charge_id"], c["job"], c["epsilon_total_after"], c["delta"], c["created_at"], c["params_digest"])
            for c in out["charges"]] == charges
    assert {c["job"]: (c["algorithm"], c["coordinator"]) for c in out["charges"]} == origin
    assert sorted((a["job"], a["round"], a["task_digest"], a["answer_digest"]) for a in out["answers"]) == answers
    # each charge's own epsilon: Laplace(b) at sensitivity 1 is exactly 1/b (the PLD grid is 1e-4 here)
    assert [round(c["epsilon"], 3) for c in out["charges"]] == [0.5, 0.25]
    assert all(c["accountant"] == "pld" for c in out["charges"])
    assert out["spent"]["epsilon"] == charges[-1][2]
    assert abs(out["remaining"]["epsilon"] - (5.0 - charges[-1][2])) < 1e-12
    assert out["limit"] == {"epsilon": 5.0, "delta": DELTA}


def test_csv_and_text_hold_every_charge_and_answer(tmp_path, capsys):
    cfg, db = _party(tmp_path)
    _fill(db)
    assert main(["party", "ledger", "--config", str(cfg), "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    charges, _, answers = _rows(db)
    assert [(r["charge_id"], r["job"], float(r["epsilon_total_after"])) for r in rows if r["kind"] == "charge"] == \
        [(c[0], c[1], c[2]) for c in charges]
    assert sorted((r["job"], int(r["round"]), r["task_digest"], r["answer_digest"])
                  for r in rows if r["kind"] == "answer") == answers
    assert main(["party", "ledger", "--config", str(cfg)]) == 0
    text = capsys.readouterr().out
    assert "job-a" in text and "kmeans" in text and "remaining" in text


def test_html_report_is_self_contained_with_a_plot(tmp_path, capsys):
    cfg, db = _party(tmp_path)
    _fill(db)
    page = tmp_path / "report.html"
    assert main(["party", "ledger", "--config", str(cfg), "--html", str(page)]) == 0
    text = page.read_text()
    assert len(text) > 1000 and "<svg" in text and text.count('class="series"') == 1
    points = re.search(r'class="series"[^>]*points="([^"]+)"', text).group(1).split()
    assert len(points) == 2 * 2 + 1  # two steps (one per charge), then held flat
    assert not re.search(r'\b(src|href)=', text) and "<script" not in text  # no external asset, no script
    assert "r2" * 32 in text and "job-b" in text


def test_a_ledger_from_before_job_origin_still_loads(tmp_path, capsys):
    cfg, db = _party(tmp_path)
    _fill(db)
    con = sqlite3.connect(db)
    con.execute("DROP TABLE job_origin")  # the file as an older dpfed wrote it
    con.commit()
    con.close()
    assert main(["party", "ledger", "--config", str(cfg), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["job"] for c in out["charges"]] == ["job-a", "job-b"]
    assert all(c["algorithm"].startswith("unknown") and c["coordinator"].startswith("unknown") for c in out["charges"])
    assert [c["params_digest"] for c in out["charges"]] == ["a" * 64, "b" * 64]


def test_missing_ledger_is_a_clear_error(tmp_path, capsys):
    cfg, _ = _party(tmp_path)
    assert main(["party", "ledger", "--config", str(cfg)]) == 2
    assert "no ledger" in capsys.readouterr().err
