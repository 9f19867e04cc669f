"""Containers, built and run (issue 29 item 4): the image from deploy/build-image.sh, a coordinator and three
parties played with `podman kube play` of deploy/k8s/*.yaml (deploy/k8s/podman-play.sh, the commands
deploy/README.md gives), each with its own certificate, data volume and ledger volume, mutual TLS between the
containers, the operator on the host.

One naive Bayes job on Adult split three ways (deploy/compose/make_demo_data.py). Mid-job (party-c frozen with
`podman pod pause` holds the offer open after party-a and party-b have charged it), the party-b pod and then the
coordinator pod are stopped and started again; party-c is thawed and the job ends. Checked:
- the model the operator gets is bit-identical to the same job run in process (dpfed.simulation.inprocess) with
  the same job id, party names, data and per-party noise seeds (party.toml ``seed``, TESTS ONLY): the seeded
  generators make both runs draw the same noise, so any difference is a fault of the container path (the
  restarted party-b's charge and answer, the restored coordinator, the wire);
- each party's own ledger, read with `dpfed party ledger --json` inside its container, holds exactly one charge
  for the job (a restarted party or coordinator must not charge again).
Everything started (pods, containers, volumes, the network) is removed, also on failure. Skipped only when no
podman can run containers here (podman is needed for `kube play`; .ci/run installs it with runc and debootstrap).
Measured on 2 cores shared with other work: 97 s with a warm image cache (145 s at load average 17); 252 s cold
(no base image, wheels or layers: debootstrap base, wheels and build 188 s of it).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dpfed.cli import main
from net_helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PARTIES = ("party-a", "party-b", "party-c")
SEED = 7
JOB = "containers-nb"
ACTIVE = ("queued", "offering", "running")  # a job not ended yet
POD = {"coordinator": "dpfed-coordinator-pod-0", **{p: f"dpfed-{p}-pod-0" for p in PARTIES}}

pytestmark = pytest.mark.timeout(1500)


def _podman_env() -> dict[str, str]:
    env = dict(os.environ)
    if "CONTAINERS_CONF" not in env and shutil.which("runc"):
        env["CONTAINERS_CONF"] = str(DEPLOY / "podman/containers.conf")  # runc, cgroupfs, ulimits a sandbox takes
    return env


def _engine_or_skip(env: dict[str, str]) -> None:
    if not shutil.which("podman"):
        reason = "docker only (podman kube play is needed)" if shutil.which("docker") else "no container engine"
        pytest.skip(f"{reason}: install podman and runc (.ci/run does: apt-get install podman runc debootstrap)")
    info = subprocess.run(["podman", "info"], env=env, capture_output=True, text=True, timeout=120)
    if info.returncode != 0:
        pytest.skip(f"podman cannot run here: {info.stderr.strip()[-300:]}")


def _run(args: list[str], env: dict[str, str], timeout: float = 300, check: bool = True) -> str:
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


class Federation:
    def __init__(self, root: Path, port: int, env: dict[str, str]):
        self.root, self.port, self.env = root, port, env
        self.conn = ["--coordinator", f"127.0.0.1:{port}", "--cert", str(root / "certs/operator/operator.crt")]

    def cli(self, *args: str) -> str:
        """The operator's `dpfed` on the host (in process: a subprocess pays ~10 s of imports on a busy box)."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            try:
                rc = main([*args, *self.conn])
            except SystemExit as e:
                rc = e.code
        if rc != 0:
            raise RuntimeError(f"dpfed {' '.join(args)} exited {rc}")
        return out.getvalue()

    def status(self) -> dict | None:
        try:
            return json.loads(self.cli("status", "--json"))
        except RuntimeError:  # the coordinator is (re)starting
            return None

    def job(self) -> dict | None:
        st = self.status()
        return None if st is None else next((j for j in st["jobs"] if j["job_id"] == JOB), None)

    def connected(self) -> int:
        st = self.status()
        return 0 if st is None else sum(p["connected"] for p in st["parties"])

    def ledger(self, party: str) -> dict:
        out = _run(["podman", "exec", f"{POD[party]}-party", "dpfed", "party", "ledger", "--config",
                    "/etc/dpfed/party.toml", "--json"], self.env, timeout=120)
        return json.loads(out)

    def charges(self, party: str) -> list[dict]:
        return [c for c in self.ledger(party)["charges"] if c["job"] == JOB]

    def state(self, container: str) -> list[str]:
        return _run(["podman", "inspect", "--format", "{{.State.Status}} {{.State.StartedAt}}", container],
                    self.env).strip().split(" ", 1)

    def restart(self, who: str) -> None:
        """Stop the pod (SIGTERM, SIGKILL after 2 s), wait until it has stopped, start it again once, and
        wait until it runs as a new process (a second start only if it is still stopped 20 s later)."""
        pod = POD[who]
        container = f"{pod}-{'coordinator' if who == 'coordinator' else 'party'}"
        before = self.state(container)[1]
        _run(["podman", "pod", "stop", "-t", "2", pod], self.env)
        self.wait(f"{container} to stop", lambda: self.state(container)[0] in ("exited", "stopped"), 120)
        _run(["podman", "pod", "start", pod], self.env)
        last = time.monotonic()
        deadline = last + 120
        while (state := self.state(container)) and not (state[0] == "running" and state[1] != before):
            assert time.monotonic() < deadline, f"{container} did not start again: {state}"
            if state[0] in ("exited", "stopped", "created") and time.monotonic() - last > 20:
                _run(["podman", "pod", "start", pod], self.env)
                last = time.monotonic()
            time.sleep(1)

    def wait(self, what: str, predicate, timeout: float = 300, step: float = 1.0):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(step)


def _certificates(out: Path) -> None:
    """The layout deploy/provision-certs.sh writes (tests/daemons/test_deploy.py runs the script itself),
    made in process: DIR/ca, DIR/NAME/{NAME.crt, NAME.key, ca.crt}; the coordinator names dpfed-coordinator."""
    from dpfed.federation.certs import init_ca, issue

    init_ca(out / "ca")
    issue("coordinator", out / "ca", out / "coordinator", role="coordinator", sans=["dpfed-coordinator"])
    issue("operator", out / "ca", out / "operator", role="operator")
    for p in PARTIES:
        issue(p, out / "ca", out / p, role="party")


@pytest.fixture(scope="module")
def federation(tmp_path_factory) -> Iterator[Federation]:
    env = _podman_env()
    _engine_or_skip(env)
    t0 = time.monotonic()
    _run(["bash", str(DEPLOY / "build-image.sh"), "--engine", "podman"], env, timeout=1200)
    _note(t0, "image built")
    leftover = _run(["podman", "pod", "ps", "-q", "--filter", f"name={POD['coordinator']}"], env).strip()
    assert not leftover, ("a dpfed federation already runs on this host (pod dpfed-coordinator-pod-0): "
                          "stop it with deploy/k8s/podman-play.sh down party-a party-b party-c")
    root = tmp_path_factory.mktemp("containers")
    with contextlib.redirect_stdout(io.StringIO()):  # in process: each `dpfed` process costs ~5-10 s of imports
        runpy.run_path(str(DEPLOY / "compose/make_demo_data.py"), run_name="not_main")["main"](str(root / "data"))
    _certificates(root / "certs")
    fed = Federation(root, free_port(), env)
    env = {**env, "DPFED_PORT": str(fed.port), "DPFED_NETWORK": f"dpfed-test-{os.getpid()}",
           "DPFED_SEED": str(SEED), "PYTHON": sys.executable}
    fed.env = env
    play = str(DEPLOY / "k8s/podman-play.sh")
    try:
        _run(["bash", play, "up", str(root), *PARTIES], env)
        _note(t0, "federation played")
        yield fed
    finally:
        for name in ("coordinator", *PARTIES):  # the daemons' own words (pytest shows them on a failure)
            suffix = "coordinator" if name == "coordinator" else "party"
            r = subprocess.run(["podman", "logs", "--tail", "12", f"{POD[name]}-{suffix}"], env=env,
                               capture_output=True, text=True, timeout=60)
            print(f"--- {name} ---\n{r.stdout}{r.stderr}", file=sys.stderr)
        subprocess.run(["podman", "pod", "unpause", POD["party-c"]], env=env, capture_output=True, timeout=60)
        _run(["bash", play, "down", *PARTIES, "--volumes"], env, timeout=300, check=False)
        left = _run(["podman", "ps", "-a", "-q", "--filter", "name=dpfed-"], env, check=False).strip()
        vols = [v for v in _run(["podman", "volume", "ls", "-q"], env, check=False).split() if v.startswith("dpfed-")]
        assert not left and not vols, f"left behind: containers {left!r}, volumes {vols}"
        _note(t0, "all removed")


def _in_process_model(root: Path) -> dict[str, np.ndarray]:
    from dpfed.algorithms import get_algorithm
    from dpfed.algorithms.contract import JobSpec
    from dpfed.data.schema import Schema
    from dpfed.simulation.inprocess import run_inprocess

    schema = Schema.from_json((root / "data/schema.json").read_text())
    data = []
    for p in PARTIES:
        with np.load(root / f"data/{p}.npz") as z:
            data.append((z["X"], z["y"]))
    spec = JobSpec(JOB, "naive-bayes", {"epsilon": 1.0, "delta": get_algorithm("naive-bayes").default_delta}, schema)
    return run_inprocess(spec, data, seed=SEED, party_names=list(PARTIES)).model


def _note(t0: float, what: str) -> None:
    print(f"[{time.monotonic() - t0:6.1f} s] {what}", file=sys.stderr)


def test_federation_in_containers_survives_restarts_and_matches_in_process(federation: Federation):
    fed = federation
    t0 = time.monotonic()
    fed.wait("three parties connected", lambda: fed.connected() == 3)
    _note(t0, "three parties connected")
    _run(["podman", "pod", "pause", POD["party-c"]], fed.env)
    fed.cli("job", "submit", "--algorithm", "naive-bayes", "--epsilon", "1", "--job-id", JOB)
    fed.wait("party-a and party-b to charge the job",
             lambda: len(fed.charges("party-a")) == 1 and len(fed.charges("party-b")) == 1, step=0.5)
    before = {p: fed.charges(p) for p in ("party-a", "party-b")}
    job = fed.job()
    assert job is not None and job["state"] in ACTIVE, job  # mid-job: party-c holds the offer
    _note(t0, "party-a and party-b charged, party-c frozen")

    fed.restart("party-b")
    _note(t0, "party-b restarted")
    fed.restart("coordinator")
    job = fed.wait("the coordinator back with the job", fed.job, timeout=120)
    assert job["state"] in ACTIVE, job
    _note(t0, "coordinator restarted")
    _run(["podman", "pod", "unpause", POD["party-c"]], fed.env)
    job = fed.wait("the job to end", lambda: (j := fed.job()) and j["state"] not in ACTIVE and j)
    assert job["state"] == "done", job
    _note(t0, "job done")

    model_file = fed.root / "model.npz"
    fed.cli("model", "get", JOB, "-o", str(model_file))
    with np.load(model_file) as z:
        got = {k: z[k] for k in z.files}
    want = _in_process_model(fed.root)
    _note(t0, "model fetched, in-process run done")
    assert set(want) <= set(got), (sorted(got), sorted(want))  # the file may add its own metadata (a model file)
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], np.asarray(value), err_msg=key)

    for party in PARTIES:  # one charge each; party-b's (and party-a's) is the one made before the restarts
        ledger = fed.ledger(party)
        mine = [c for c in ledger["charges"] if c["job"] == JOB]
        assert len(mine) == 1, (party, ledger["charges"])
        assert ledger["jobs"][JOB]["charges"] == 1
        if party in before:
            assert mine == before[party], (party, mine, before[party])
    _note(t0, "ledgers read: one charge each")
