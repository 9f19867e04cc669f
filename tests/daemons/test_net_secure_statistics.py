"""A statistics job (several queries, grouped) with distributed noise under secure aggregation over real gRPC
with mutual TLS and five real party daemon processes: it completes, and its answers are the in-process ones
(same seeds: the SecAgg masks cancel exactly, so the decoded sums, hence every value and interval, coincide)."""
from __future__ import annotations

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.data.datasets import split_parties
from dpfed.simulation.grpc_local import run_grpc_simulation
from dpfed.simulation.inprocess import run_inprocess


def test_secure_statistics_over_grpc_matches_in_process(adult, tmp_path):
    data = split_parties(adult.X_train[:8000], adult.y_train[:8000], 5, "iid", np.random.default_rng(0))
    params = {"epsilon": 1.0, "delta": 1e-6, "noise": "distributed", "secure_aggregation": True, "min_survivors": 3,
              "queries": ["count", "mean:age", "var:hours-per-week", "median:education-num", "histogram:sex",
                          "table:sex:race"], "group_by": "class"}
    spec = JobSpec("secure-stats-grpc", "statistics", params, adult.schema)
    net = run_grpc_simulation(spec, data, seed=5, workdir=tmp_path / "sim", timeout=600)
    local = run_inprocess(spec, data, seed=5)
    assert net.summary["secure_aggregation"] is True and net.summary["mechanism"] == "ddlaplace"
    assert net.summary["dropped_rounds"] == 0 and net.rounds == local.rounds == 1
    assert net.epsilon_spent == local.epsilon_spent <= 1.0 * (1 + 1e-9)
    assert net.summary["results"] == local.summary["results"]
    for k in local.model:
        np.testing.assert_array_equal(net.model[k], local.model[k])
    mean_age = next(r for r in local.summary["results"] if r["query"] == "mean(age) by class")
    for c in range(2):
        true = adult.X_train[:8000][adult.y_train[:8000] == c, 0].mean()
        assert abs(mean_age["value"][c] - true) < 6 * mean_age["se"][c] + 1e-3


def test_dpfed_stats_coordinator_with_distributed_noise(tmp_path, capsys):
    """``dpfed stats --coordinator ... --noise distributed`` without ``--records``: a roster with a party that never
    registered (no bound) is refused in one line naming it; the real job's bound is the sum of the parties'
    registered ``public_records`` (party.toml). The real CLI submits to a real coordinator, three real
    party daemon processes (mutual TLS, their own records and ledgers) answer under secure aggregation with Polya
    shares (mechanism auto at epsilon 1: ddlaplace); each party charges the plan once, within epsilon 1; the means'
    and counts' intervals hold the true per-class values of the parties' records (6 se). 40 s measured at
    load 17 on 2 cores (mostly the daemons' start)."""
    import json
    import time

    from dpfed.cli import main
    from dpfed.core.ledger import BudgetLedger
    from dpfed.data.schema import Schema
    from net_helpers import PLUGINS, make_pki, spawn_party, start_coordinator
    from party.config import write_config

    t0 = time.monotonic()
    schema = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)
    names = [f"party-{i}" for i in range(3)]
    public = {"party-0": 400, "party-1": 350, "party-2": 320}  # each holds 300 records
    pki = make_pki(tmp_path, parties=3)
    server = start_coordinator(pki, tmp_path / "state")
    data, procs = [], []
    try:
        for i, name in enumerate(names):
            g = np.random.default_rng(i)
            y = g.integers(0, 2, 300)
            X = np.clip(0.3 + 0.4 * y[:, None] + g.normal(0, 0.1, (300, 3)), 0.0, 1.0)
            data.append((X, y))
            d = tmp_path / name
            d.mkdir()
            np.savez(d / "data.npz", X=X, y=y)
            (d / "schema.json").write_text(schema.to_json())
            f = pki.files(name)
            write_config(d / "party.toml", {
                "name": name, "coordinator": f"127.0.0.1:{server.port}", "data": str(d / "data.npz"),
                "ledger": str(d / "ledger.sqlite"), "epsilon_limit": 10.0, "delta_limit": 1e-5,
                "reconnect_seconds": 0.2, "plugins": list(PLUGINS), "schema_file": str(d / "schema.json"),
                "exit_with_parent": True,
                "public_records": public[name], "tls": {"ca": str(f.ca), "cert": str(f.cert), "key": str(f.key)}})
            procs.append(spawn_party(d / "party.toml"))
        assert server.coordinator.wait_for_parties(names, 60)
        conn = ["--coordinator", f"127.0.0.1:{server.port}", "--cert", str(pki.files("operator").cert)]
        code = main(["stats", *conn, "--parties", "party-0", "ghost", "--epsilon", "1", "--noise", "distributed",
                     "--count"])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, out + err
        assert "ghost" in err and "party-0" not in err and "public_records" in err and "--records" in err
        code = main(["stats", *conn, "--parties", *names, "--epsilon", "1", "--noise", "distributed",
                     "--mean", "x0", "--histogram", "x1:bins=4", "--count", "--group-by", "class", "--json"])
        out, err = capsys.readouterr()
        assert code == 0, out + err
        job = server.coordinator.jobs[json.loads(out)["job_id"]]
        assert job.params["records"] == sum(public.values()) and sorted(job.parties) == names
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=15)
        server.stop(0.5)
    rec = json.loads(out)
    assert rec["transport"] == "coordinator" and rec["noise"] == "distributed" and rec["mechanism"] == "ddlaplace"
    assert set(rec["party_epsilon"]) == set(names)
    assert all(e <= 1.0 * (1 + 1e-9) for e in rec["party_epsilon"].values())
    X = np.concatenate([x for x, _ in data])
    y = np.concatenate([t for _, t in data])
    mean = next(r for r in rec["results"] if r["query"] == "mean(x0) by class")
    count = next(r for r in rec["results"] if r["query"] == "count() by class")
    for c in range(2):
        assert mean["lower"][c] <= mean["value"][c] <= mean["upper"][c]
        assert abs(mean["value"][c] - X[y == c, 0].mean()) < 6 * mean["se"][c] + 1e-6
        assert abs(count["value"][c] - (y == c).sum()) < 6 * count["se"][c] + 1e-6
    for name in names:
        with BudgetLedger(tmp_path / name / "ledger.sqlite", epsilon_limit=10.0, delta_limit=1e-5) as led:
            assert len(led.charge_ids()) == 1 and led.charge_ids()[0].endswith(":plan")
    assert time.monotonic() - t0 < 120
