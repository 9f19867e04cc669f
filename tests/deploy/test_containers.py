"""Containers, built and run (issue 29 item 4): the image from deploy/build-image.sh, a coordinator and three
parties played with `podman kube play` of deploy/k8s/*.yaml (deploy/k8s/podman-play.sh, the commands
deploy/README.md gives), each with its own certificate, data volume and ledger volume, mutual TLS between the
containers, the operator on the host. One image build and one deployment serve both jobs (Adult split three ways,
deploy/compose/make_demo_data.py):

- a naive Bayes job (one round);
- a logistic-regression job trained with DP-SGD (21 rounds). Mid-job (party-c's daemon stopped with SIGSTOP
  after two rounds, so the coordinator waits for its answer of round R), the party-b pod and then the
  coordinator pod are stopped (`podman pod stop -t 2`: SIGTERM, SIGKILL after 2 s) and started again; party-c is
  thawed and the job ends.

Checked for each job: the model the operator gets is bit-identical to the same job run in process (the party
sessions and the driver, dpfed.simulation.inprocess) with the same job id, party names, data and per-party noise
seeds (party.toml ``seed``, TESTS ONLY). A party that takes a job up again (after its own restart or the
coordinator's) draws its noise from the stream of the round it resumes at (``PartyContext.rng_for``: a restarted
stream would repeat noise already released); the in-process run takes each party up again at the rounds the
party's own log says it resumed at, so any difference is a fault of the container path (the restarted party's
charge, replayed and later answers, the restored coordinator, the wire). Each party's own ledger, read with
`dpfed party ledger --json` inside its container, holds exactly one charge per job (a restarted party or
coordinator must not charge again); the stopped daemons exit 0 inside the 2 s grace (not killed).
Everything started (pods, containers, volumes, the network) is removed, also on failure. Skipped only when no
podman can run containers here (podman is needed for `kube play`; .ci/run installs it with runc and debootstrap).
Measured on 2 cores shared with six other engineers' work (load average 10 to 14): 396 s with a warm image cache
(the build 12 s, playing 13 s, the three tests: naive Bayes 55 s, logistic regression with the restarts 182 s,
compose 110 s; reading the ledgers with `dpfed` inside the containers is ~40 s of it); 798 s cold (no base image,
wheels or layers: the build 510 s, most of it debootstrap, 3 minutes on an idle host).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import runpy
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator.client import AdminClient
from dpfed.cli import main
from net_helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PARTIES = ("party-a", "party-b", "party-c")
SEED = 7
JOB = "containers-nb"
PUBLIC_RECORDS = 11000  # each demo party holds 10,854 Adult records (deploy/compose/make_demo_data.py)
LR_JOB = "containers-lr"
LR_PARAMS = {"epsilon": 1.0, "epochs": 2, "sampling_rate": 0.1}  # 21 rounds: the initialisation and 20 steps
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
        self.frozen: dict[str, int] = {}  # party -> the host PID of its SIGSTOPped daemon

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

    def job(self, job_id: str = JOB) -> dict | None:
        st = self.status()
        return None if st is None else next((j for j in st["jobs"] if j["job_id"] == job_id), None)

    def connected(self) -> int:
        st = self.status()
        return 0 if st is None else sum(p["connected"] for p in st["parties"])

    def ledger(self, party: str, container: dict[str, str] | None = None) -> dict:
        """The party's ledger as its site reads it: `dpfed party ledger --json` inside its container."""
        name = (container or {}).get(party, f"{POD[party]}-party")
        out = _run(["podman", "exec", name, "dpfed", "party", "ledger", "--config", "/etc/dpfed/party.toml", "--json"],
                   self.env, timeout=120)
        return json.loads(out)

    def ledgers(self, parties=PARTIES, container: dict[str, str] | None = None) -> dict[str, dict]:
        """Every party's ledger at once (each `dpfed` in a container pays ~10 s of imports on a busy host)."""
        with futures.ThreadPoolExecutor(len(parties)) as pool:
            return dict(zip(parties, pool.map(lambda p: self.ledger(p, container), parties), strict=True))

    def logs(self, party: str) -> str:
        """The party container's log, every run of it (podman keeps one log across restarts)."""
        r = subprocess.run(["podman", "logs", f"{POD[party]}-party"], env=self.env, capture_output=True, text=True,
                           timeout=60)
        return r.stdout + r.stderr

    def pid(self, party: str) -> int:
        """The host PID of the party's daemon (its container's PID 1)."""
        return int(_run(["podman", "inspect", "--format", "{{.State.Pid}}", f"{POD[party]}-party"], self.env))

    def freeze(self, party: str, pid: int) -> None:
        """SIGSTOP the party's daemon (``pid``, asked for beforehand): at once, where `podman pod pause` (or
        even `podman inspect`) takes a second or more on a busy host."""
        os.kill(pid, signal.SIGSTOP)
        self.frozen[party] = pid

    def thaw(self, party: str) -> None:
        pid = self.frozen.pop(party, None)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def state(self, container: str) -> list[str]:
        return _run(["podman", "inspect", "--format", "{{.State.Status}} {{.State.StartedAt}}", container],
                    self.env).strip().split(" ", 1)

    def restart(self, who: str) -> float:
        """Stop the pod (SIGTERM, SIGKILL after 2 s), wait until it has stopped, start it again once, and
        wait until it runs as a new process (a second start only if it is still stopped 20 s later). Returns
        the seconds `podman pod stop` took; the daemon must have exited 0 (not killed after the grace)."""
        pod = POD[who]
        container = f"{pod}-{'coordinator' if who == 'coordinator' else 'party'}"
        before = self.state(container)[1]
        t0 = time.monotonic()
        _run(["podman", "pod", "stop", "-t", "2", pod], self.env)
        took = time.monotonic() - t0
        self.wait(f"{container} to stop", lambda: self.state(container)[0] in ("exited", "stopped"), 120)
        code = _run(["podman", "inspect", "--format", "{{.State.ExitCode}}", container], self.env).strip()
        assert code == "0", f"{container} exited {code} on SIGTERM (137: killed after the 2 s grace)"
        _run(["podman", "pod", "start", pod], self.env)
        last = time.monotonic()
        deadline = last + 120
        while (state := self.state(container)) and not (state[0] == "running" and state[1] != before):
            assert time.monotonic() < deadline, f"{container} did not start again: {state}"
            if state[0] in ("exited", "stopped", "created") and time.monotonic() - last > 20:
                _run(["podman", "pod", "start", pod], self.env)
                last = time.monotonic()
            time.sleep(1)
        return took

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
           "DPFED_SEED": str(SEED), "PYTHON": sys.executable,
           "DPFED_PUBLIC_RECORDS": str(PUBLIC_RECORDS)}  # podman-play.sh writes it into each party.toml
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
        fed.thaw("party-c")
        _run(["bash", play, "down", *PARTIES, "--volumes"], env, timeout=300, check=False)
        left = _run(["podman", "ps", "-a", "-q", "--filter", "name=dpfed-"], env, check=False).strip()
        vols = [v for v in _run(["podman", "volume", "ls", "-q"], env, check=False).split() if v.startswith("dpfed-")]
        assert not left and not vols, f"left behind: containers {left!r}, volumes {vols}"
        _note(t0, "all removed")


def _in_process_model(root: Path, algorithm: str, job_id: str, params: dict[str, Any],
                      resumes: dict[str, set[int]] | None = None) -> dict[str, np.ndarray]:
    """The job run in process (party sessions and driver) on the same data, names and seeds; a party of
    ``resumes`` takes the job up again (a new session from its ledger, as after a restart) before the rounds
    listed for it, so its noise comes from the stream of the round it resumed at, as in the containers."""
    from dpfed.algorithms import get_algorithm
    from dpfed.algorithms.contract import Aggregate, JobSpec
    from dpfed.algorithms.driver import drive
    from dpfed.data.schema import Schema
    from dpfed.federation.session import answer_hosted, decide
    from dpfed.simulation.inprocess import make_parties, open_sessions

    algo = get_algorithm(algorithm)
    schema = Schema.from_json((root / "data/schema.json").read_text())
    data = []
    for p in PARTIES:
        with np.load(root / f"data/{p}.npz") as z:
            data.append((z["X"], z["y"]))
    spec = JobSpec(job_id, algorithm, params, schema)  # the job record's params: what the parties were offered
    parties = make_parties(spec, data, seed=SEED, party_names=list(PARTIES))
    sessions = open_sessions(spec, parties)
    coord = algo.coordinator(spec, list(PARTIES))

    def gather(task):
        for i, party in enumerate(parties):
            if task.round in (resumes or {}).get(party.name, ()):
                last = party.ledger.last_answer(job_id, with_data=False)
                assert (0 if last is None else last.round + 1) == task.round, (party.name, task.round, last)
                sessions[i] = decide(party, spec).session
        return [Aggregate(a, (s.party.name,)) for s, a in zip(sessions, answer_hosted(sessions, task), strict=True)]

    drive(coord, gather, algo.combine)
    return coord.model()


def _assert_same_model(got_file: Path, want: dict[str, np.ndarray]) -> None:
    with np.load(got_file) as z:
        got = {k: z[k] for k in z.files}
    assert set(want) <= set(got), (sorted(got), sorted(want))  # the file may add its own metadata (a model file)
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], np.asarray(value), err_msg=key)


def _note(t0: float, what: str) -> None:
    print(f"[{time.monotonic() - t0:6.1f} s] {what}", file=sys.stderr)


def test_naive_bayes_in_containers_matches_in_process(federation: Federation):
    fed = federation
    t0 = time.monotonic()
    fed.wait("three parties connected", lambda: fed.connected() == 3)
    _note(t0, "three parties connected")
    # each party published the bound podman-play.sh put in its party.toml, and registered with it
    assert {p["name"]: p.get("public_records") for p in fed.status()["parties"]} == dict.fromkeys(PARTIES,
                                                                                                   PUBLIC_RECORDS)
    fed.cli("job", "submit", "--algorithm", "naive-bayes", "--epsilon", "1", "--job-id", JOB)
    job = fed.wait("the job to end", lambda: (j := fed.job()) and j["state"] not in ACTIVE and j)
    assert job["state"] == "done", job
    fed.cli("model", "get", JOB, "-o", str(fed.root / "nb.npz"))
    _assert_same_model(fed.root / "nb.npz", _in_process_model(fed.root, "naive-bayes", JOB, job["params"]))
    for party, ledger in fed.ledgers().items():
        assert [c["job"] for c in ledger["charges"]] == [JOB], party
    _note(t0, "naive Bayes: done, same model, one charge each")


def _resumed_rounds(log: str, job_id: str) -> set[int]:
    """The rounds at which a party took the job up again, from its own log (dpfed.federation.session)."""
    return {int(r) for r in re.findall(rf"job {re.escape(job_id)} resumed at round (\d+)", log)}


def test_a_multi_round_job_survives_party_and_coordinator_restarts(federation: Federation):
    fed = federation
    t0 = time.monotonic()
    fed.wait("three parties connected", lambda: fed.connected() == 3)
    pid = fed.pid("party-c")
    fed.cli("job", "submit", "--algorithm", "logistic-regression", "--epsilon", "1", "--job-id", LR_JOB,
            *[a for k, v in LR_PARAMS.items() if k != "epsilon" for a in ("--param", f"{k}={v}")])
    # party-c stopped (SIGSTOP to its daemon, from the host) the moment the job has done two rounds (a watch
    # stream): `podman pod pause` takes a second or more on a busy host, the whole job a few seconds
    with AdminClient(f"127.0.0.1:{fed.port}", cert=fed.conn[-1]) as adm:
        for rec in adm.watch(LR_JOB, timeout=300):
            if rec["rounds"] >= 2 or rec["state"] not in ACTIVE:
                fed.freeze("party-c", pid)
                break
    seen: list[int] = []
    # the job stands still at round R (party-c's answer missing): the same count twice, 2 s apart
    fed.wait("the job to wait for party-c", lambda: seen.append(fed.job(LR_JOB)["rounds"]) or seen[-2:-1] == seen[-1:],
             step=2.0)
    job = fed.job(LR_JOB)
    assert job["state"] in ACTIVE and 2 <= job["rounds"] < 21, job  # mid-job, with rounds before and after
    before = {p: [c for c in led["charges"] if c["job"] == LR_JOB]
              for p, led in fed.ledgers(("party-a", "party-b")).items()}
    _note(t0, f"party-c frozen at round {job['rounds']}")

    stops = {"party-b": fed.restart("party-b")}
    _note(t0, "party-b restarted")
    stops["coordinator"] = fed.restart("coordinator")
    job = fed.wait("the coordinator back with the job", lambda: fed.job(LR_JOB), timeout=120)
    assert job["state"] in ACTIVE, job
    _note(t0, "coordinator restarted")
    fed.thaw("party-c")
    job = fed.wait("the job to end", lambda: (j := fed.job(LR_JOB)) and j["state"] not in ACTIVE and j)
    assert job["state"] == "done" and job["rounds"] == 21, job
    _note(t0, f"job done; podman pod stop took {stops}")

    resumes = {p: _resumed_rounds(fed.logs(p), LR_JOB) for p in PARTIES}
    assert all(resumes.values()), resumes  # every party took the job up again after the coordinator's restart
    fed.cli("model", "get", LR_JOB, "-o", str(fed.root / "lr.npz"))
    _assert_same_model(fed.root / "lr.npz", _in_process_model(fed.root, "logistic-regression", LR_JOB, job["params"],
                                                              resumes))
    _note(t0, f"model fetched, same as in process with the resumes {resumes}")
    for party, ledger in fed.ledgers().items():  # one charge each; party-a's and b's: made before the restarts
        mine = [c for c in ledger["charges"] if c["job"] == LR_JOB]
        assert len(mine) == 1 and ledger["jobs"][LR_JOB]["charges"] == 1, (party, ledger["charges"])
        if party in before:
            assert mine == before[party], (party, mine, before[party])
    _note(t0, "ledgers read: one charge each")


def test_compose_runs_the_same_federation(federation: Federation):
    """deploy/compose/compose.yaml (+ compose.small-ulimits.yaml) with podman-compose, the image built above: the
    commands deploy/README.md gives, in a copy of deploy/compose with its own certificates (the coordinator named
    `coordinator`, the service the parties dial) and data. A secure naive Bayes job from the host (`--noise
    distributed`, its record bound summed from the parties' registrations) ends done with one charge in each
    party's ledger; `podman-compose stop -t 2 party-b` stops it with exit status 0 (SIGTERM, inside
    the grace) and `start party-b` brings it back. Everything is removed with `down -v`."""
    from dpfed.federation.certs import init_ca, issue

    if not shutil.which("podman-compose"):
        pytest.skip("podman-compose is not installed (Debian: apt-get install podman-compose)")
    t0 = time.monotonic()
    d = fed_root = federation.root / "compose"
    shutil.copytree(DEPLOY / "compose", d, ignore=shutil.ignore_patterns("data", "certs"))
    shutil.copytree(federation.root / "data", d / "data")
    init_ca(d / "certs/ca")
    issue("coordinator", d / "certs/ca", d / "certs/coordinator", role="coordinator", sans=["coordinator"])
    issue("operator", d / "certs/ca", d / "certs/operator", role="operator")
    for p in PARTIES:
        issue(p, d / "certs/ca", d / f"certs/{p}", role="party")
    for sub in ("coordinator", *PARTIES):  # the image's user reads its key (deploy/README.md: chown -R 10001)
        _run(["chown", "-R", "10001:10001", str(d / "certs" / sub)], federation.env)
    _run(["chmod", "-R", "a+rX", str(d / "data")], federation.env)
    project = f"dpfc{os.getpid()}"
    fed = Federation(fed_root, free_port(), {**federation.env, "COMPOSE_PROJECT_NAME": project})
    fed.env["DPFED_PORT"] = str(fed.port)
    compose = ["podman-compose", "-p", project, "-f", str(d / "compose.yaml"), "-f",
               str(d / "compose.small-ulimits.yaml")]
    container = {n: f"{project}_{n}_1" for n in ("coordinator", *PARTIES)}
    try:
        _run([*compose, "up", "-d", "--no-build"], fed.env, timeout=300)
        _note(t0, "compose up")
        fed.wait("three parties connected", lambda: fed.connected() == 3)
        # a secure job as documented: --noise distributed, the record bound from the parties' registrations
        # (public_records = 11000 in each compose party.toml), secure aggregation between the containers
        fed.cli("job", "submit", "--algorithm", "naive-bayes", "--epsilon", "1", "--noise", "distributed",
                "--job-id", JOB)
        job = fed.wait("the job to end", lambda: (j := fed.job()) and j["state"] not in ACTIVE and j)
        assert job["state"] == "done" and job["summary"]["secure_aggregation"] is True, job
        assert job["params"]["records"] == 3 * 11000, job["params"]
        fed.cli("model", "get", JOB, "-o", str(d / "model.npz"))
        for p, ledger in fed.ledgers(container=container).items():
            assert [c["job"] for c in ledger["charges"]] == [JOB], (p, ledger["charges"])
        _note(t0, "compose: job done, one charge each")
        _run([*compose, "stop", "-t", "2", "party-b"], fed.env, timeout=120)
        code = _run(["podman", "inspect", "--format", "{{.State.ExitCode}}", container["party-b"]], fed.env).strip()
        assert code == "0", f"party-b exited {code} on SIGTERM (137: killed after the 2 s grace)"
        _run([*compose, "start", "party-b"], fed.env, timeout=120)
        fed.wait("party-b back", lambda: fed.connected() == 3)
        _note(t0, "compose: party-b stopped (exit 0) and started")
    finally:
        _run([*compose, "down", "-v"], fed.env, timeout=300, check=False)
        left = _run(["podman", "ps", "-a", "-q", "--filter", f"name={project}"], fed.env, check=False).strip()
        vols = [v for v in _run(["podman", "volume", "ls", "-q"], fed.env, check=False).split()
                if v.startswith(project)]
        _note(t0, "compose down")
    assert not left and not vols, f"left behind: containers {left!r}, volumes {vols}"
