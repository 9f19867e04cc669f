"""End to end over real sockets and processes: the gRPC simulation runner (clean shutdown, even on
KeyboardInterrupt), and a deployment driven only through the CLI (coordinator serve, party serve,
job submit, status, model get)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dpfed.algorithms.contract import JobSpec
from dpfed.cli import main
from dpfed.simulation.grpc_local import SimulationError, run_grpc_simulation
from net_helpers import PLUGINS, SCHEMA, SUPPORT, make_pki, party_config

EPS = 1.0


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if text in (d / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


def _data(parties: int, n: int = 2000) -> list[tuple[np.ndarray, None]]:
    rng = np.random.default_rng(7)
    return [(rng.beta(2.0, 5.0, size=(n, 3)), None) for _ in range(parties)]


def test_grpc_simulation_runs_and_shuts_down(tmp_path):
    data = _data(3)
    spec = JobSpec("sim-e2e", "noisy-mean", {"epsilon": EPS, "delta": 0.0, "rounds": 5}, SCHEMA)
    seen: list[float] = []
    res = run_grpc_simulation(spec, data, seed=0, plugins=PLUGINS, workdir=tmp_path / "w", progress=seen.append)
    truth = np.concatenate([X for X, _ in data]).mean(axis=0)
    # Laplace noise of scale 20 on sums of ~1700 per party: error far below 0.05 (fixed seed)
    assert np.abs(res.model["mean"] - truth).max() < 0.05
    assert res.rounds == 5 and seen[-1] == 1.0 and seen == sorted(seen)
    assert set(res.party_epsilon) == {"party-0", "party-1", "party-2"}
    assert res.epsilon_spent == pytest.approx(EPS, rel=1e-4) and res.epsilon_spent <= EPS * (1 + 1e-9)
    assert not _processes_mentioning(str(tmp_path / "w"))


def test_keyboard_interrupt_leaves_no_process_and_no_tempdir(tmp_path):
    spec = JobSpec("sim-int", "noisy-mean", {"epsilon": EPS, "delta": 0.0, "rounds": 1_000_000}, SCHEMA)

    def interrupt(fraction: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_grpc_simulation(spec, _data(2, 50), seed=0, plugins=PLUGINS, workdir=tmp_path / "w",
                            progress=interrupt)
    assert not _processes_mentioning(str(tmp_path / "w"))


def test_a_party_with_bad_data_stops_the_simulation_with_its_reason(tmp_path):
    data = _data(2, 50)
    data[1][0][:4, 2] = np.nan
    spec = JobSpec("sim-bad", "noisy-mean", {"epsilon": EPS, "delta": 0.0}, SCHEMA)
    with pytest.raises(SimulationError, match=r"party-1 exited with code 2(.|\n)*column 'x2': 4 NaN"):
        run_grpc_simulation(spec, data, seed=0, plugins=PLUGINS, workdir=tmp_path / "w")
    assert not _processes_mentioning(str(tmp_path / "w"))


def test_deployment_through_the_cli(tmp_path, capsys):
    """Daemons are started as commands in their own processes; operator commands run through dpfed.cli.main."""
    pki = make_pki(tmp_path, parties=2)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SUPPORT), *[p for p in sys.path if p]]))
    c = pki.files("coordinator")
    (tmp_path / "coordinator.toml").write_text(
        f'listen = "127.0.0.1:0"\nstate_dir = "state"\nplugins = {json.dumps(list(PLUGINS))}\n'
        f'[tls]\nca = "{c.ca}"\ncert = "{c.cert}"\nkey = "{c.key}"\n')
    coord = subprocess.Popen([sys.executable, "-m", "dpfed.cli", "coordinator", "serve", "--config",
                              str(tmp_path / "coordinator.toml"), "--log-level", "WARNING"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [coord]
    try:
        line = coord.stdout.readline()
        assert "listening on port" in line, coord.stderr.read()
        port = int(line.split("port")[1].split()[0])
        for i in range(2):
            toml = party_config(pki, tmp_path, f"party-{i}", port, write_toml=True)
            procs.append(subprocess.Popen([sys.executable, "-m", "dpfed.cli", "party", "serve", "--config", str(toml),
                                           "--log-level", "WARNING"], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        conn = ["--coordinator", f"127.0.0.1:{port}", "--cert", str(pki.files("operator").cert)]
        deadline = time.monotonic() + 60
        while True:
            assert main(["status", "--json", *conn]) == 0
            st = json.loads(capsys.readouterr().out)
            if sum(p["connected"] for p in st["parties"]) == 2:
                break
            assert time.monotonic() < deadline, st
            time.sleep(0.2)
        code = main(["job", "submit", "--algorithm", "noisy-mean", "--epsilon", "1", "--delta", "0",
                     "--param", "rounds=3", "--job-id", "cli-job", "--wait", *conn])
        out = capsys.readouterr().out
        assert code == 0 and out.splitlines()[0] == "cli-job" and '"state": "done"' in out
        assert main(["model", "get", "cli-job", "-o", str(tmp_path / "model.npz"), *conn]) == 0
        with np.load(tmp_path / "model.npz") as z:
            assert str(z["algorithm"]) == "noisy-mean" and z["mean"].shape == (3,)
        capsys.readouterr()
        assert main(["status", *conn]) == 0
        table = capsys.readouterr().out
        assert "cli-job" in table and "done" in table and "/ 10" in table
        assert main(["model", "get", "nope", "-o", str(tmp_path / "x.npz"), *conn]) == 1
        assert "unknown job id 'nope'" in capsys.readouterr().err
        with pytest.raises(SystemExit, match="operator certificate is required"):
            main(["status", "--coordinator", f"127.0.0.1:{port}", "--cert", ""])
    finally:
        for p in procs[::-1]:
            p.terminate()
        for p in procs:
            p.wait(timeout=15)
    assert coord.returncode == 0


def test_naive_bayes_on_adult_over_grpc(adult):
    """The issue's main job: 5 party processes, mutual TLS, naive Bayes on adult at epsilon 1."""
    pytest.importorskip("dpfed.core.mechanisms")
    from dpfed.algorithms import get_algorithm
    from dpfed.data.datasets import split_parties

    algo = get_algorithm("naive-bayes")
    ds = adult
    data = split_parties(ds.X_train, ds.y_train, 5, "iid", np.random.default_rng(0))
    spec = JobSpec("nb-e2e", "naive-bayes", {"epsilon": 1.0, "delta": algo.default_delta}, ds.schema)
    res = run_grpc_simulation(spec, data, seed=0)
    assert res.epsilon_spent <= 1.0 * (1 + 1e-9) and res.epsilon_spent > 0.9
    # non-private naive Bayes reaches about 0.836; at epsilon 1 with seed 0 we measured 0.83
    assert algo.evaluate(res.model, ds.X_test, ds.y_test, ds.schema)["test_accuracy"] > 0.80
