"""``dpfed simulate``: the JSON contract, cross-validation, transports and clear errors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dpfed.cli import main

BASE_KEYS = {"algorithm", "dataset", "parties", "epsilon", "delta", "epsilon_spent", "wall_seconds"}


def _run(capsys, *argv):
    code = main(["simulate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_naive_bayes_inproc_json_contract(capsys):
    code, out, _ = _run(capsys, "--algorithm", "naive-bayes", "--dataset", "nursery", "--parties", "3",
                        "--epsilon", "1", "--seed", "0", "--transport", "inproc", "--json")
    assert code == 0
    res = json.loads(out)  # exactly one JSON object on stdout
    assert BASE_KEYS | {"test_accuracy"} <= set(res)
    assert res["parties"] == 3 and res["delta"] == 1e-6  # the algorithm's default delta
    assert 0.99 * 1 <= res["epsilon_spent"] <= 1 + 1e-9
    assert res["test_accuracy"] > 0.85  # non-private NB: 0.91 on this split


def test_seed_makes_simulations_reproducible(capsys):
    argv = ["--algorithm", "naive-bayes", "--dataset", "mushroom", "--parties", "2", "--epsilon", "0.2",
            "--seed", "3", "--transport", "inproc", "--json"]
    a = json.loads(_run(capsys, *argv)[1])
    b = json.loads(_run(capsys, *argv)[1])
    assert a["test_accuracy"] == b["test_accuracy"]


def test_cross_validation_reports_mean_std_and_folds(capsys):
    code, out, _ = _run(capsys, "--algorithm", "naive-bayes", "--dataset", "nursery", "--parties", "2",
                        "--epsilon", "2", "--seed", "1", "--transport", "inproc", "--cv", "3", "--json")
    res = json.loads(out)
    assert code == 0 and res["folds"] == 3 and "test_accuracy_std" in res and res["test_accuracy_std"] >= 0
    code, out, _ = _run(capsys, "--algorithm", "naive-bayes", "--dataset", "nursery", "--parties", "2",
                        "--epsilon", "2", "--seed", "1", "--transport", "inproc", "--cv", "3",
                        "--cv-train-on-one", "--json")
    assert code == 0 and json.loads(out)["cv_train_on_one"] is True


def test_kmeans_blobs_json_has_inertia_keys(capsys):
    code, out, _ = _run(capsys, "--algorithm", "kmeans", "--method", "sample-aggregate", "--k", "3",
                        "--dataset", "blobs:n=6000,d=2,k=3,seed=0", "--parties", "1", "--epsilon", "1",
                        "--delta", "1e-6", "--seed", "0", "--transport", "inproc", "--json")
    res = json.loads(out)
    assert code == 0 and BASE_KEYS | {"inertia", "inertia_nonprivate"} <= set(res)
    assert res["inertia"] >= res["inertia_nonprivate"] * 0.99


def test_kmeans_distributed_noise_under_secure_aggregation_with_dropout(capsys):
    """Five parties in process, 30 % dropout, P_min 3: the secure job finishes, reports its secure-aggregation
    keys, some rounds lost parties, and the centers are close to scikit-learn's (seeded: deterministic)."""
    code, out, _ = _run(capsys, "--algorithm", "kmeans", "--dataset", "blobs:n=20000,d=4,k=5,seed=0", "--k", "5",
                        "--parties", "5", "--epsilon", "1", "--noise", "distributed", "--dropout", "0.3",
                        "--min-survivors", "3", "--seed", "2", "--transport", "inproc", "--json")
    res = json.loads(out)
    assert code == 0 and BASE_KEYS | {"secure_aggregation", "bits", "survivors_min", "dropped_rounds"} <= set(res)
    assert res["secure_aggregation"] is True and res["bits"] == 16 and res["survivors_min"] == 3
    assert res["dropped_rounds"] >= 1 and res["noise_placement"] == "distributed (secure aggregation)"
    assert 0.99 <= res["epsilon_spent"] <= 1 + 1e-9
    assert res["inertia"] / res["inertia_nonprivate"] < 1.1


def test_table_output_and_clear_errors(capsys):
    code, out, _ = _run(capsys, "--algorithm", "naive-bayes", "--dataset", "mushroom", "--parties", "2",
                        "--epsilon", "1", "--seed", "0", "--transport", "inproc")
    assert code == 0 and "test_accuracy" in out and "epsilon_spent" in out
    code, out, err = _run(capsys, "--algorithm", "naive-bayes", "--dataset", "no-such-set", "--epsilon", "1",
                          "--transport", "inproc")
    assert code == 2 and out == "" and "not found" in err
    code, _, err = _run(capsys, "--algorithm", "naive-bayes", "--dataset", "mushroom", "--epsilon", "-1",
                        "--transport", "inproc")
    assert code == 2 and "epsilon" in err
    code, _, err = _run(capsys, "--algorithm", "naive-bayes", "--dataset", "mushroom", "--epsilon", "1",
                        "--split", "shards", "--transport", "inproc")
    assert code == 2 and "split" in err
    with pytest.raises(SystemExit):
        main(["simulate", "--algorithm", "nope", "--dataset", "adult", "--epsilon", "1"])


def test_grpc_transport_through_the_console_script():
    """The README's main job, shortened: real processes, mutual TLS, one JSON object on stdout."""
    proc = subprocess.run([sys.executable, "-m", "dpfed.cli", "simulate", "--algorithm", "naive-bayes",
                           "--dataset", "mushroom", "--parties", "2", "--epsilon", "1", "--seed", "0", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout)
    assert res["transport"] == "grpc" and res["test_accuracy"] > 0.85 and res["epsilon_spent"] <= 1 + 1e-9


def test_ray_transport_runs_party_actors(capsys):
    """Real Ray (a local cluster started for the test): the same halves as Ray actors."""
    code, out, _ = _run(capsys, "--algorithm", "naive-bayes", "--dataset", "mushroom", "--parties", "3",
                        "--epsilon", "1", "--seed", "0", "--transport", "ray", "--json")
    res = json.loads(out)
    assert code == 0 and res["transport"] == "ray" and res["test_accuracy"] > 0.85
    assert res["epsilon_spent"] <= 1 + 1e-9
