"""``dpfed job submit --algorithm NAME`` works for every registered algorithm (issue 10, finding 11:
``glvq``/``gmlvq`` raised TypeError on ``int()`` of the ``--parties`` list).

Real CLI (``dpfed.cli.main``), a real coordinator over mutual TLS and two real party daemon
processes holding small labelled data; every algorithm's job must end ``done`` with a model and
one charge per party.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from dpfed.algorithms import algorithm_names, get_algorithm, load_model
from dpfed.algorithms.model_file import read_model_file
from dpfed.cli import main
from dpfed.core.ledger import BudgetLedger
from dpfed.data.schema import Feature, Schema
from net_helpers import PLUGINS, make_pki, spawn_party, start_coordinator
from party.config import write_config

SCHEMA = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)
#: the parties of the learners of a numeric target (``label_kind == "numeric"``): the same records, the 0/1 label
#: as a regression target
REGRESSION = Schema(SCHEMA.features, target=Feature("t", "numeric", lower=0.0, upper=1.0))
SMALL = {  # small settings so that each job takes a few seconds
    "naive-bayes": [],
    "glvq": ["--epochs", "1", "--sampling-rate", "0.1"],
    "gmlvq": ["--epochs", "1", "--sampling-rate", "0.1"],
    "kmeans": ["--k", "2"],
    "logistic-regression": ["--lm-epochs", "1", "--lm-sampling-rate", "0.2"],
    "linear-svm": ["--lm-epochs", "1", "--lm-sampling-rate", "0.2"],
}


def _labelled(seed: int, n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = np.clip(0.3 + 0.4 * y[:, None] + rng.normal(0, 0.08, (n, 3)), 0.0, 1.0)
    return X, y


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    yield from _deploy(tmp_path_factory.mktemp("submit"), SCHEMA)


@pytest.fixture(scope="module")
def regression_deployment(tmp_path_factory):
    yield from _deploy(tmp_path_factory.mktemp("submit-regression"), REGRESSION)


def _deploy(root, schema: Schema):
    pki = make_pki(root, parties=2)
    server = start_coordinator(pki, root / "state")
    procs = []
    for i in range(2):
        d = root / f"party-{i}"
        d.mkdir()
        X, y = _labelled(i)
        np.savez(d / "data.npz", X=X, y=y)
        (d / "schema.json").write_text(schema.to_json())
        f = pki.files(f"party-{i}")
        write_config(d / "party.toml", {
            "name": f"party-{i}", "coordinator": f"127.0.0.1:{server.port}", "data": str(d / "data.npz"),
            "ledger": str(d / "ledger.sqlite"), "epsilon_limit": 100.0, "delta_limit": 1e-4,
            "reconnect_seconds": 0.2, "plugins": list(PLUGINS), "schema_file": str(d / "schema.json"),
            "exit_with_parent": True, "tls": {"ca": str(f.ca), "cert": str(f.cert), "key": str(f.key)}})
        procs.append(spawn_party(d / "party.toml"))
    try:
        assert server.coordinator.wait_for_parties(["party-0", "party-1"], 60)
        yield root, ["--coordinator", f"127.0.0.1:{server.port}", "--cert", str(pki.files("operator").cert)]
    finally:
        for p in procs:  # all at once: each daemon takes up to its shutdown grace to exit
            p.terminate()
        for p in procs:
            p.wait(timeout=15)
        server.stop(0.5)


@pytest.mark.parametrize("algorithm", algorithm_names())
def test_job_submit_works_for_every_algorithm(request, algorithm, capsys):
    numeric = get_algorithm(algorithm).label_kind == "numeric"
    root, conn = request.getfixturevalue("regression_deployment" if numeric else "deployment")
    job = f"cli-{algorithm}"
    t0 = time.monotonic()
    code = main(["job", "submit", "--algorithm", algorithm, "--epsilon", "2", "--parties", "party-0", "party-1",
                 "--job-id", job, "--wait", *SMALL.get(algorithm, []), *conn])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    rec = json.loads(out[out.index("{"):])
    assert out.splitlines()[0] == job and rec["state"] == "done", rec
    assert set(rec["party_epsilon"]) == {"party-0", "party-1"}
    assert main(["model", "get", job, "-o", str(root / f"{job}.npz"), *conn]) == 0
    with np.load(root / f"{job}.npz") as z:
        assert str(z["algorithm"]) in (algorithm, algorithm.replace("-", "_"), algorithm.replace("-", ""))
    algo = get_algorithm(algorithm)
    if algo.estimator:  # the fetched model file predicts on raw features as the job's own evaluation (issue 29)
        model, meta = read_model_file(root / f"{job}.npz")
        schema = REGRESSION if numeric else SCHEMA
        assert meta["algorithm"] == algorithm and Schema.from_dict(meta["schema"]) == schema
        X, y = _labelled(7, 200)
        est, ev = load_model(root / f"{job}.npz"), algo.evaluate(model, X, y if algo.needs_labels else None, schema)
        if numeric:
            assert est.score(X, y) == pytest.approx(ev["r2"], abs=1e-12)
        elif algo.needs_labels:
            assert est.score(X, y) == pytest.approx(ev["test_accuracy"], abs=1e-12)
        elif "captured_variance" in ev:  # PCA: its score is the captured variance
            assert est.score(X) == pytest.approx(ev["captured_variance"], rel=1e-12)
        else:
            assert -est.score(X) == pytest.approx(ev["inertia"], rel=1e-12)
    for i in range(2):
        with BudgetLedger(root / f"party-{i}" / "ledger.sqlite", epsilon_limit=100.0, delta_limit=1e-4) as led:
            assert led.charge_ids().count(f"{job}:plan") == 1
    assert time.monotonic() - t0 < 120


def test_dpfed_stats_against_a_coordinator(deployment, capsys):
    """``dpfed stats --coordinator``: the same job through the coordinator and the two party daemons (their own
    records and ledgers), answers with intervals in the JSON; a distributed job without --records is refused in
    one line before anything is sent (two parties are too few for SecAgg's threshold: secure statistics over
    daemons are tested in test_net_secure_statistics.py)."""
    root, conn = deployment
    assert main(["stats", *conn, "--epsilon", "1", "--mean", "x0", "--noise", "distributed"]) == 2
    assert "--records N" in capsys.readouterr().err
    code = main(["stats", *conn, "--parties", "party-0", "party-1", "--epsilon", "2", "--mean", "x0",
                 "--median", "x1", "--count", "--group-by", "class", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    rec = json.loads(out)
    assert rec["transport"] == "coordinator" and set(rec["party_epsilon"]) == {"party-0", "party-1"}
    mean = next(r for r in rec["results"] if r["query"] == "mean(x0) by class")
    X = np.concatenate([_labelled(i)[0] for i in range(2)])
    y = np.concatenate([_labelled(i)[1] for i in range(2)])
    for c in range(2):
        assert mean["lower"][c] <= mean["value"][c] <= mean["upper"][c]
        assert abs(mean["value"][c] - X[y == c, 0].mean()) < 6 * mean["se"][c] + 1e-6
