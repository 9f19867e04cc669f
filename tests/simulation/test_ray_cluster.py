"""A real two-node Ray cluster on loopback: ``ray start --head`` plus ``ray start --address``, each node
with one CPU and its own temporary directory, joined by ``dpfed simulate --ray-address`` (many parties
simulated) and by ``dpfed coordinator serve --ray-address`` (the coordinator's ingress shards, one on
each node, serving real party daemon processes over mutual TLS).

The nodes run as ``ray start --block`` in their own process groups, and only those groups are
stopped afterwards (``ray stop`` would stop every Ray process on the machine, other people's too),
always, even when the test fails. The cluster uses token authentication with a token made here.
Checked: the many-party job's result (accuracy on held-out data, the spend within the target), and
that the two worker actors ran on two different nodes.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

import dpfed  # noqa: E402

REPO = Path(dpfed.__file__).resolve().parent.parent
SUPPORT = REPO / "tests" / "support"
START_TIMEOUT = 240.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group(pgid: int, program: str = "") -> list[int]:
    """Live processes in process group ``pgid`` (from /proc); only those running ``program`` if given."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    with open(f"/proc/{entry}/cmdline", "rb") as fh:
                        if not program or fh.read().split(b"\0")[0].endswith(b"/" + program.encode()):
                            out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each node's raylet (the object store's owner) while the GCS still runs: it unregisters and exits
    within a second; then SIGKILL each node's whole process group and reap. (``ray start --block`` and the GCS
    server do not exit on SIGTERM: a group-wide SIGTERM always waited out its 20 s grace period, and raylets
    cut off from their GCS took 10 s.)"""
    for p in procs:
        for pid in _group(p.pid, "raylet"):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_group(p.pid, "raylet") for p in procs):
        time.sleep(0.1)
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _start_node(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "wb") as fh:  # the child keeps its own descriptor
        return subprocess.Popen(["ray", "start", "--block", "--disable-usage-stats", *args], env=env, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _wait_started(proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "Ray runtime started" in text:
            return
        if proc.poll() is not None:
            pytest.fail(f"ray start exited with {proc.returncode}:\n{text[-3000:]}")
        time.sleep(0.5)
    pytest.fail(f"ray start did not finish within {START_TIMEOUT:.0f} s:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def loopback_cluster(tmp_path_factory):
    """(address, env) of a running two-node cluster (shared by this module's tests); both nodes are
    stopped afterwards, whatever happens."""
    tmp_path = tmp_path_factory.mktemp("cluster")
    # Ray's Unix socket paths live under the temporary directory and must stay short: /tmp/dprXXXX.
    head_tmp = tempfile.mkdtemp(prefix="dprh", dir="/tmp")
    node_tmp = tempfile.mkdtemp(prefix="dprn", dir="/tmp")
    port = _free_port()
    env = dict(os.environ)
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), RAY_USAGE_STATS_ENABLED="0",
               PYTHONPATH=os.pathsep.join([str(REPO), str(SUPPORT),
                                           *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]))
    procs: list[subprocess.Popen] = []
    try:
        head_log, node_log = tmp_path / "head.log", tmp_path / "node.log"
        procs.append(_start_node(["--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=1",
                                  f"--temp-dir={head_tmp}", "--include-dashboard=false"], env, head_log))
        _wait_started(procs[0], head_log)
        procs.append(_start_node([f"--address=127.0.0.1:{port}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                                  f"--temp-dir={node_tmp}"], env, node_log))
        _wait_started(procs[1], node_log)
        yield f"127.0.0.1:{port}", env
    finally:
        _stop(procs)
        leftover = [pid for p in procs for pid in _group(p.pid)]
        shutil.rmtree(head_tmp, ignore_errors=True)
        shutil.rmtree(node_tmp, ignore_errors=True)
        assert not leftover, f"processes of the test cluster still running: {leftover}"


@pytest.mark.timeout(900)
def test_many_parties_run_across_two_ray_nodes(loopback_cluster):
    address, env = loopback_cluster
    proc = subprocess.run([sys.executable, "-m", "dpfed.cli", "simulate", "--algorithm", "naive-bayes",
                           "--dataset", "mushroom", "--parties", "400", "--epsilon", "1", "--seed", "0",
                           "--transport", "ray", "--ray-address", address, "--json"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert res["transport"] == "ray" and res["parties"] == 400
    assert res["ray_workers"] == 2 and res["ray_nodes"] == 2  # one worker per node's CPU, on both nodes
    assert res["epsilon_spent"] <= 1 + 1e-9 and res["test_accuracy"] > 0.85


@pytest.mark.timeout(900)
def test_a_coordinator_on_the_cluster_serves_party_daemons(loopback_cluster, tmp_path):
    """``dpfed coordinator serve --ray-address``: two ingress shards, one per node; six party daemon
    processes register with the coordinator and stream through their shards; a job finishes with the
    parties' mean (Laplace noise: the bound is far above 8 standard deviations)."""
    import numpy as np

    from coordinator.client import AdminClient
    from net_helpers import make_pki, party_config, party_data, spawn_party, wait_until

    address, env = loopback_cluster
    pki = make_pki(tmp_path / "pki", parties=6)
    port = _free_port()
    f = pki.files("coordinator")
    (tmp_path / "coordinator.toml").write_text(
        f'listen = "127.0.0.1:{port}"\nstate_dir = "{tmp_path}/state"\nplugins = ["net_noisy_mean"]\n'
        f'shard_host = "127.0.0.1"\nshard_advertise = "127.0.0.1"\n'
        f'[tls]\nca = "{f.ca}"\ncert = "{f.cert}"\nkey = "{f.key}"\n')
    log = tmp_path / "coordinator.log"
    with open(log, "wb") as fh:
        coord = subprocess.Popen([sys.executable, "-m", "dpfed.cli", "coordinator", "serve", "--config",
                                  str(tmp_path / "coordinator.toml"), "--ray-address", address, "--shards", "2",
                                  "--log-level", "WARNING"], env=env, stdout=fh, stderr=subprocess.STDOUT)
    parties = []
    try:
        deadline = time.monotonic() + 180
        while "ingress shard(s) on Ray" not in log.read_text(errors="replace"):
            assert coord.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        parties = [spawn_party(party_config(pki, tmp_path, f"party-{i}", port, write_toml=True)) for i in range(6)]
        with AdminClient(f"127.0.0.1:{port}", tls=pki.files("operator"), timeout=30) as client:
            wait_until(lambda: sum(p["connected"] for p in client.status()["parties"]) == 6, 180, "six parties")
            shards = client.status()["shards"]
            assert len(shards) == 2 and len({s["node"] for s in shards}) == 2, shards  # one shard per node
            assert sorted(len(s["parties"]) for s in shards) == [3, 3], shards
            job = client.submit_job("noisy-mean", {"rounds": 20, "width": 3, "epsilon": 8.0},
                                    parties=[f"party-{i}" for i in range(6)])
            rec = client.wait(job, timeout=300)
            assert rec["state"] == "done" and rec["rounds"] == 20, rec
            model, _ = client.get_model(job)
        X = np.concatenate([party_data(seed=sum(map(ord, f"party-{i}"))) for i in range(6)])
        assert np.allclose(model["mean"], X.mean(axis=0), atol=0.1), (model["mean"], X.mean(axis=0))
    finally:
        for p in parties:
            p.terminate()
        coord.send_signal(signal.SIGTERM)
        try:
            coord.wait(timeout=30)
        except subprocess.TimeoutExpired:
            coord.kill()
            coord.wait()
        for p in parties:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
