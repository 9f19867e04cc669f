"""``dpfed stats``: the JSON keys (a contract), the five-hospital example's shape, and one-line errors."""
from __future__ import annotations

import json

import pytest

from dpfed.cli import main

KEYS = {"dataset", "job_id", "epsilon", "delta", "noise", "mechanism", "confidence", "secure_aggregation", "parties",
        "transport", "rounds", "epsilon_spent", "party_epsilon", "results"}
RESULT_KEYS = {"query", "stat", "column", "by", "groups", "value", "se", "lower", "upper"}


@pytest.mark.filterwarnings("ignore")
def test_stats_json_keys_and_grouped_answers(capsys):
    code = main(["stats", "--dataset", "adult", "--parties", "5", "--epsilon", "1", "--noise", "distributed",
                 "--mean", "age", "--median", "age", "--quantile", "age:0.9", "--variance", "age", "--count",
                 "--histogram", "age:bins=4", "--table", "sex:race", "--group-by", "class", "--seed", "2", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rec = json.loads(out)
    assert set(rec) == KEYS
    assert rec["mechanism"] == "ddlaplace" and rec["secure_aggregation"] is True and rec["parties"] == 5
    assert rec["epsilon_spent"] <= 1.0 * (1 + 1e-9) and len(rec["party_epsilon"]) == 5
    queries = [r["query"] for r in rec["results"]]
    assert queries == ["count() by class", "mean(age) by class", "var(age) by class", "median(age) by class",
                       "quantile(age, 0.9) by class", "histogram(age, bins=4) by class", "table(sex, race) by class"]
    for r in rec["results"]:
        assert RESULT_KEYS <= set(r) and r["groups"] == ["<=50K", ">50K"]
        for lo, v, hi in zip(r["lower"], r["value"], r["upper"], strict=True):
            if isinstance(v, list):
                assert all(a <= b <= c for a, b, c in zip(lo, v, hi, strict=True))
            else:
                assert lo <= v <= hi
    assert rec["results"][5]["edges"] == [16.0, 37.0, 58.0, 79.0, 100.0]


def test_stats_errors_are_one_line(capsys):
    assert main(["stats", "--dataset", "adult", "--epsilon", "1"]) == 2
    assert "name at least one query" in capsys.readouterr().err
    assert main(["stats", "--dataset", "adult", "--epsilon", "1", "--mean", "sex"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "categorical, needs numeric" in err
    assert main(["stats", "--dataset", "adult", "--epsilon", "1", "--mean", "age", "--group-by", "nope"]) == 2
    assert "no column 'nope'" in capsys.readouterr().err
