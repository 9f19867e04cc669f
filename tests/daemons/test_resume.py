"""Jobs resume after faults at no extra privacy cost (issue 10), over real sockets with mutual TLS.

- ``kill -9`` of the coordinator process mid-job, then a restart: the job continues from its
  checkpointed round by itself, finishes with exactly the planned number of rounds, its model
  agrees with an uninterrupted run of the same job within the noise, and every party's ledger (and
  the coordinator's global budget) holds exactly one charge for it.
- ``kill -9`` of a party process mid-job, then a restart: the job does not fail, it continues.
- A party that accepts and then stays silent ends the job within the configured timeout, with
  resume available; ``dpfed job resume`` continues it.
- The coordinator records the plan it computes itself and refuses a party's mismatching event.

Tolerances: the models of two runs differ by Laplace noise only; the bound below is 8 standard
deviations of that difference, computed from the job's public parameters (false-alarm rate below
1e-9 per comparison, Chebyshev-free: a sum of 2 R Laplace draws is close to Gaussian).
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dp_accounting as dpa
import grpc
import numpy as np
import pytest

from dpfed.algorithms.contract import JobSpec
from dpfed.cli import main
from dpfed.core import accounting
from dpfed.core.ledger import BudgetLedger
from net_helpers import (
    ThreadParty,
    admin,
    free_port,
    party_config,
    raw_stub,
    register,
    spawn_party,
    start_coordinator,
    subprocess_env,
    wait_until,
)
from net_noisy_mean import NoisyMeanParty
from protos import dpfed_pb2 as pb
from protos.codec import PROTOCOL_VERSION

ROUNDS, EPSILON, WIDTH, N_RECORDS = 150, 100.0, 3, 200


def _ledger_ids(path) -> list[str]:
    with BudgetLedger(path, epsilon_limit=1e6, delta_limit=1e-6) as led:
        return led.charge_ids()




def _coordinator_toml(pki, root: Path, port: int, **extra) -> Path:
    f = pki.files("coordinator")
    lines = [f'listen = "127.0.0.1:{port}"', f'state_dir = "{root / "state"}"', 'plugins = ["net_noisy_mean"]',
             *[f"{k} = {json.dumps(v)}" for k, v in extra.items()],
             "[tls]", f'ca = "{f.ca}"', f'cert = "{f.cert}"', f'key = "{f.key}"']
    path = root / "coordinator.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _spawn_coordinator(toml: Path, log: Path) -> subprocess.Popen:
    """``dpfed coordinator serve`` as a real process; returns once it listens."""
    with open(log, "ab") as err:
        proc = subprocess.Popen([sys.executable, "-m", "dpfed.cli", "coordinator", "serve", "--config", str(toml),
                                 "--log-level", "INFO"], env=subprocess_env(), stdout=subprocess.PIPE, stderr=err,
                                text=True)
    line = proc.stdout.readline()
    assert "listening on port" in line, f"coordinator did not start: {line!r}; see {log}"
    return proc


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _tolerance(parties: int) -> float:
    """8 sd of the difference of two runs' noisy means (one run: R rounds, each party adds Laplace of
    scale b = (1 + W) R / eps to every entry; the model is (average sum) / (average count))."""
    b = (1 + WIDTH) * ROUNDS / EPSILON
    sd_avg_sum = math.sqrt(parties * 2 * b * b / ROUNDS)
    count = parties * N_RECORDS
    # x2 on the variance for a resumed run whose seeded party streams restarted (correlated noise)
    return 8 * math.sqrt(2 + 2) * sd_avg_sum / count


def _wait_connected(adm, names, timeout=60.0) -> None:
    wait_until(lambda: {p["name"] for p in adm.status()["parties"] if p["connected"]} >= set(names),
               timeout=timeout, what=f"parties {names} to connect")


def _run_until(adm, job: str, rounds: int) -> int:
    for rec in adm.watch(job, timeout=120):
        assert rec["state"] not in ("done", "failed", "refused", "cancelled"), rec
        if rec["rounds"] >= rounds:
            return rec["rounds"]
    raise AssertionError("watch ended early")


def _check_resumed(rec: dict, seen: int) -> None:
    assert rec["state"] == "done", rec
    assert rec["rounds"] == ROUNDS and rec["summary"]["rounds"] == ROUNDS, rec
    # The checkpoint is written before each round leaves: a crash re-asks at most the last completed round
    # (whose stored answers the parties replay), never an older one.
    assert rec["resumes"] >= 1 and seen - 1 <= rec["resumed_at"][0] < ROUNDS, rec


def test_coordinator_killed_mid_job_resumes_at_no_extra_charge(pki, tmp_path):
    port = free_port()
    toml = _coordinator_toml(pki, tmp_path, port, answer_timeout=60.0, accept_timeout=60.0)
    log = tmp_path / "coordinator.log"
    coord = _spawn_coordinator(toml, log)
    parties = [spawn_party(party_config(pki, tmp_path, f"party-{i}", port, epsilon_limit=1e5, write_toml=True))
               for i in range(2)]
    params = {"rounds": ROUNDS, "width": WIDTH}
    try:
        with admin(pki, port) as adm:
            _wait_connected(adm, ["party-0", "party-1"])
            ref = adm.submit_job("noisy-mean", params, epsilon=EPSILON, delta=0.0, job_id="reference")
            adm.wait(ref, timeout=120)
            ref_model, _ = adm.get_model(ref)
            job = adm.submit_job("noisy-mean", params, epsilon=EPSILON, delta=0.0, job_id="killed")
            seen = _run_until(adm, job, 20)
        os.kill(coord.pid, signal.SIGKILL)
        coord.wait(timeout=10)
        coord = _spawn_coordinator(toml, log)   # the job resumes by itself
        with admin(pki, port) as adm:
            rec = adm.wait(job, timeout=180)
            model, _ = adm.get_model(job)
        _check_resumed(rec, seen)
        assert np.max(np.abs(model["mean"] - ref_model["mean"])) < _tolerance(2)
        for i in range(2):  # exactly one charge per job, at the party and in the global budget
            assert _ledger_ids(tmp_path / f"party-{i}" / "ledger.sqlite") == [f"{ref}:plan", f"{job}:plan"]
            assert _ledger_ids(tmp_path / "state" / "budget" / f"party-{i}.sqlite") == [f"{ref}:plan", f"{job}:plan"]
        assert not (tmp_path / "state" / "checkpoints" / f"{job}.pkl").exists()
    finally:
        for p in parties:
            _stop(p)
        _stop(coord)


def test_party_killed_mid_job_comes_back_and_the_job_continues(pki, tmp_path):
    server = start_coordinator(pki, tmp_path / "state", task_timeout=60.0)
    p0 = ThreadParty(party_config(pki, tmp_path, "party-0", server.port, epsilon_limit=1e5))
    toml = party_config(pki, tmp_path, "party-1", server.port, epsilon_limit=1e5, write_toml=True)
    proc = spawn_party(toml)
    params = {"rounds": ROUNDS, "width": WIDTH}
    try:
        assert server.coordinator.wait_for_parties(["party-0", "party-1"], 60)
        with admin(pki, server.port) as adm:
            ref = adm.submit_job("noisy-mean", params, epsilon=EPSILON, delta=0.0, job_id="reference")
            adm.wait(ref, timeout=120)
            ref_model, _ = adm.get_model(ref)
            job = adm.submit_job("noisy-mean", params, epsilon=EPSILON, delta=0.0, job_id="party-killed")
            _run_until(adm, job, 20)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            time.sleep(0.5)
            assert adm.status()["jobs"][-1]["state"] == "running"   # waiting for the party, not failed
            proc = spawn_party(toml)
            rec = adm.wait(job, timeout=180)
            model, _ = adm.get_model(job)
        assert rec["rounds"] == ROUNDS and rec["summary"]["rounds"] == ROUNDS, rec
        assert np.max(np.abs(model["mean"] - ref_model["mean"])) < _tolerance(2)
        for name in ("party-0", "party-1"):
            assert _ledger_ids(tmp_path / name / "ledger.sqlite") == [f"{ref}:plan", f"{job}:plan"]
            assert _ledger_ids(tmp_path / "state" / "budget" / f"{name}.sqlite") == [f"{ref}:plan", f"{job}:plan"]
        assert p0.error is None
    finally:
        _stop(proc)
        p0.stop()
        server.stop(0.5)


class _SilentParty:
    """A party speaking the real protocol that accepts the offer (with the right event, or ``event``)
    and then never answers; or, with ``accept=False``, never answers the offer."""

    def __init__(self, pki, port: int, name: str = "party-1", accept: bool = True, event_epsilon: float | None = None):
        self.ch, self.stub = raw_stub(pki, port, name)
        self.token = register(self.stub, name)
        self.stream = self.stub.TaskStream(pb.StreamRequest(version=PROTOCOL_VERSION, session=self.token))
        self.accept, self.event_epsilon = accept, event_epsilon
        self.error: BaseException | None = None
        self.tasks: list[int] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for msg in self.stream:
                body = msg.WhichOneof("body")
                if body == "offer" and self.accept:
                    spec = JobSpec.from_json(msg.offer.spec_json)
                    if self.event_epsilon is not None:
                        spec = JobSpec(spec.job_id, spec.algorithm, {**spec.params, "epsilon": self.event_epsilon},
                                       spec.schema)
                    event = accounting.event_to_json(NoisyMeanParty().job_event(spec))
                    try:
                        self.stub.RespondJob(pb.JobResponse(version=PROTOCOL_VERSION, session=self.token,
                                                            job_id=msg.job_id, round=-1, accept=True,
                                                            event_json=event, epsilon_job=1.0), timeout=10)
                    except grpc.RpcError as exc:
                        self.error = exc
                elif body == "task":
                    self.tasks.append(msg.round)
        except grpc.RpcError:
            pass

    def close(self) -> None:
        self.stream.cancel()
        self.ch.close()
        self.thread.join(timeout=10)


def test_a_silent_party_ends_the_job_in_time_and_resume_continues_it(pki, tmp_path, capsys):
    server = start_coordinator(pki, tmp_path / "state", task_timeout=2.0, offer_timeout=5.0)
    p0 = ThreadParty(party_config(pki, tmp_path, "party-0", server.port))
    silent = _SilentParty(pki, server.port)
    p1 = None
    try:
        assert server.coordinator.wait_for_parties(["party-0", "party-1"], 20)
        with admin(pki, server.port) as adm:
            t0 = time.monotonic()
            job = adm.submit_job("noisy-mean", {"rounds": 3}, epsilon=1.0, delta=0.0, job_id="silent")
            behind = adm.submit_job("noisy-mean", {"rounds": 1}, epsilon=1.0, delta=0.0, parties=["party-0"])
            rec = adm.wait(job, timeout=30, raise_on_failure=False)
            elapsed = time.monotonic() - t0
            assert rec["state"] == "failed" and rec["resumable"], rec
            assert "timed out after 2 s waiting for results of round 0 from party-1" in rec["reason"], rec
            assert "dpfed job resume silent" in rec["reason"]
            assert elapsed < 2.0 + 5.0, elapsed                           # not task_timeout's old hour
            assert silent.tasks == [0]
            assert adm.wait(behind, timeout=30)["state"] == "done"        # the queue moved on
            silent.close()
            p1 = ThreadParty(party_config(pki, tmp_path, "party-1", server.port))
            assert server.coordinator.wait_for_parties(["party-1"], 20)
            cert = str(pki.files("operator").cert)
            code = main(["job", "resume", job, "--wait", "--coordinator", f"127.0.0.1:{server.port}", "--cert", cert])
            out = capsys.readouterr().out
            assert code == 0, out
            final = json.loads(out[out.index("{"):])
            assert final["state"] == "done" and final["rounds"] == 3
            assert adm.status()["jobs"][0]["resumed_at"] == [0]
            # resuming a finished job is refused with a clear reason
            assert main(["job", "resume", job, "--coordinator", f"127.0.0.1:{server.port}", "--cert", cert]) == 1
            assert "only failed, cancelled or refused jobs can be resumed" in capsys.readouterr().err
        assert _ledger_ids(tmp_path / "party-0" / "ledger.sqlite") == [f"{job}:plan", f"{behind}:plan"]
        assert _ledger_ids(tmp_path / "party-1" / "ledger.sqlite") == [f"{job}:plan"]
        assert _ledger_ids(tmp_path / "state" / "budget" / "party-1.sqlite") == [f"{job}:plan"]
    finally:
        silent.close()
        if p1 is not None:
            p1.stop()
        p0.stop()
        server.stop(0.5)


def test_a_party_silent_at_the_offer_ends_the_job_in_time(pki, tmp_path):
    server = start_coordinator(pki, tmp_path / "state", offer_timeout=2.0)
    p0 = ThreadParty(party_config(pki, tmp_path, "party-0", server.port))
    silent = _SilentParty(pki, server.port, accept=False)
    try:
        assert server.coordinator.wait_for_parties(["party-0", "party-1"], 20)
        with admin(pki, server.port) as adm:
            t0 = time.monotonic()
            job = adm.submit_job("noisy-mean", {"rounds": 3}, epsilon=1.0, delta=0.0)
            rec = adm.wait(job, timeout=30, raise_on_failure=False)
            assert time.monotonic() - t0 < 2.0 + 5.0
            assert rec["state"] == "failed" and rec["resumable"], rec
            assert "timed out after 2 s waiting for an answer to the offer from party-1" in rec["reason"]
    finally:
        silent.close()
        p0.stop()
        server.stop(0.5)


def test_the_coordinator_refuses_a_mismatching_event(pki, tmp_path):
    server = start_coordinator(pki, tmp_path / "state")
    p0 = ThreadParty(party_config(pki, tmp_path, "party-0", server.port))
    liar = _SilentParty(pki, server.port, event_epsilon=0.01)  # reports a much smaller spend than the plan's
    try:
        assert server.coordinator.wait_for_parties(["party-0", "party-1"], 20)
        with admin(pki, server.port) as adm:
            job = adm.submit_job("noisy-mean", {"rounds": 3}, epsilon=1.0, delta=0.0)
            rec = adm.wait(job, timeout=30, raise_on_failure=False)
        wait_until(lambda: liar.error is not None, what="the refusal")
        assert liar.error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "differs from the job's plan" in liar.error.details()
        assert rec["state"] == "failed" and "party 'party-1'" in rec["reason"] and "differs" in rec["reason"], rec
        assert liar.tasks == []                                   # no task was ever sent
        assert server.coordinator.store.spent("party-1") == 0.0
        # the honest party's charge is the plan, built here from the parameters: 3 Laplace rounds of eps 1/3
        # composed, as the party's own ledger does, on the PLD grid of the party's limit (10, registered)
        want = accounting.epsilon(dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(3 / 1.0), 3), 1e-6,
                                  pld_discretization=accounting.pld_grid(10.0))
        assert want == pytest.approx(1.0, rel=1e-3)  # basic composition; PLD rounds up by its grid
        assert server.coordinator.store.spent("party-0") == pytest.approx(want, rel=1e-9)
    finally:
        liar.close()
        p0.stop()
        server.stop(0.5)
