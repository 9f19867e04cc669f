"""A secure-aggregation job survives ``kill -9`` of the coordinator mid-job (issue 11).

Four party daemon processes and a coordinator process over mutual TLS run distributed-noise GLVQ
under SecAgg. The coordinator is killed in the middle of the job and started again on the same state
directory: it resumes from its checkpoint and re-runs the interrupted round. The parties come back
with new sessions, hence new SecAgg keys (re-advertised in the next round), and each refuses to release a second masked
input for a round whose masked input already left (its ledger holds one per round, ever): so the
interrupted round is aborted with nothing unmasked (at most one aborted round), and every later round
completes. Checked: the job ends with every planned round, at most one round aborted, one charge per
party, **at most one recorded answer per round at every party** (no second masked input), **no round
whose unmask step ran in both coordinator processes** (from the coordinator's debug log of its
broadcasts), finite prototypes, and **what every party's ledger recorded before the kill stands** (the
same task and answer digests per round at the end: the round in flight, whose masked inputs had left,
was not answered again for the restarted coordinator). The kill lands right after a consistency step
was sent, so that round's masked inputs are recorded at every party and it is the round resumed.
That last check is the one that fails when the ledger's refusal of another task for an answered round
(``BudgetLedger.record_answer``, AnswerConflictError) is removed: the coordinator-log check alone did not.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from dpfed.core.ledger import BudgetLedger
from dpfed.data.datasets import split_parties
from net_helpers import admin, free_port, make_pki, subprocess_env, wait_until
from party.config import write_config

PARTIES, EPOCHS, RATE = 4, 2.0, 0.05
ROUNDS = int(EPOCHS / RATE) + 1  # the initialisation round and the DP-SGD steps


def _spawn_coordinator(toml: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as err:
        proc = subprocess.Popen([sys.executable, "-m", "dpfed.cli", "coordinator", "serve", "--config", str(toml),
                                 "--log-level", "DEBUG"],
                                env=subprocess_env(), stdout=subprocess.PIPE, stderr=err, text=True)
    line = proc.stdout.readline()
    assert "listening on port" in line, f"coordinator did not start: {line!r}; see {log}"
    return proc


def _unmasked_rounds(log: str) -> tuple[set[int], set[int]]:
    """Rounds with an unmask step sent by the first coordinator process, and by the restarted one (its
    debug log line per broadcast; the two processes append to one file, each starting with 'listening')."""
    runs = log.split("coordinator listening on")[1:]
    assert len(runs) == 2, f"{len(runs)} coordinator starts in the log"
    pattern = re.compile(r"job secure-killed round (\d+): \S*unmask\S* sent to")
    return tuple({int(r) for r in pattern.findall(run)} for run in runs)  # type: ignore[return-value]


def _wait_for_consistency_step(log: Path, min_round: int, timeout: float = 300.0) -> int:
    """Poll the coordinator's debug log until it has sent the consistency step of a round >= ``min_round``
    (that round's masked inputs are recorded at the parties; its unmask step follows within milliseconds)."""
    pattern = re.compile(rb"job secure-killed round (\d+): secagg/consistency sent to")
    deadline, seen = time.monotonic() + timeout, 0
    with open(log, "rb") as f:
        while time.monotonic() < deadline:
            chunk = f.read()
            rounds = [int(r) for r in pattern.findall(chunk)]
            if rounds and max(rounds) >= min_round:
                return max(rounds)
            seen += len(chunk)
            f.seek(max(0, seen - 200))  # a line cut at the end of a read is read again whole
            seen = f.tell()
            time.sleep(0.002)
    raise AssertionError(f"no consistency step of round >= {min_round} within {timeout} s")


def _answered(ledger: Path) -> list[tuple[int, str, str]]:
    """(round, task digest, answer digest) the party's ledger holds for the job (read while the party runs)."""
    with BudgetLedger(ledger, epsilon_limit=2.0, delta_limit=1e-5, accountant="rdp") as led:
        return led.answered_rounds("secure-killed")


def test_a_secure_job_resumes_after_the_coordinator_is_killed(segmentation, tmp_path):
    ds = segmentation
    pki = make_pki(tmp_path / "pki", parties=PARTIES)
    port = free_port()
    f = pki.files("coordinator")
    toml = tmp_path / "coordinator.toml"
    toml.write_text(f'listen = "127.0.0.1:{port}"\nstate_dir = "{tmp_path}/state"\n'
                    f'[tls]\nca = "{f.ca}"\ncert = "{f.cert}"\nkey = "{f.key}"\n')
    (tmp_path / "schema.json").write_text(ds.schema.to_json())
    names = [f"party-{i}" for i in range(PARTIES)]
    data = split_parties(ds.X, ds.y, PARTIES, "iid", np.random.default_rng(0))
    coord = _spawn_coordinator(toml, tmp_path / "coordinator.log")
    parties = []
    try:
        for name, (X, y) in zip(names, data, strict=True):
            pdir = tmp_path / name
            pdir.mkdir()
            np.savez(pdir / "data.npz", X=X, y=y)
            pf = pki.files(name)
            write_config(pdir / "party.toml", {
                "name": name, "coordinator": f"127.0.0.1:{port}", "data": str(pdir / "data.npz"),
                "ledger": str(pdir / "ledger.sqlite"), "epsilon_limit": 2.0, "delta_limit": 1e-5,
                "accountant": "rdp", "reconnect_seconds": 0.2, "schema_file": str(tmp_path / "schema.json"),
                "exit_with_parent": True, "seed": 3, "min_survivors": 3,
                "tls": {"ca": str(pf.ca), "cert": str(pf.cert), "key": str(pf.key)}})
            parties.append(subprocess.Popen([sys.executable, "-m", "party.daemon", "--config",
                                             str(pdir / "party.toml"), "--log-level", "WARNING"], env=subprocess_env(),
                                            stdout=subprocess.DEVNULL, stderr=open(pdir / "party.log", "wb")))
        with admin(pki, port) as adm:
            wait_until(lambda: sum(p["connected"] for p in adm.status()["parties"]) == PARTIES, 120, "parties")
            job = adm.submit_job("glvq", {"epsilon": 1.5, "delta": 1e-5, "epochs": EPOCHS, "sampling_rate": RATE,
                                          "noise": "distributed", "secure_aggregation": True, "min_survivors": 3,
                                          "bits": 16, "records": len(ds.X)}, parties=names, job_id="secure-killed")

            _wait_for_consistency_step(tmp_path / "coordinator.log", ROUNDS // 3)
        os.kill(coord.pid, signal.SIGKILL)  # mid-round: the round's masked inputs left, its unmask step is near
        coord.wait(timeout=10)
        before_kill = {name: _answered(tmp_path / name / "ledger.sqlite") for name in names}
        coord = _spawn_coordinator(toml, tmp_path / "coordinator.log")
        with admin(pki, port) as adm:
            rec = adm.wait(job, timeout=600, raise_on_failure=False)
            model, _ = adm.get_model(job) if rec["state"] == "done" else ({}, None)
    finally:
        for p in parties:
            p.terminate()
        if coord.poll() is None:
            coord.terminate()
            coord.wait(timeout=10)
        for p in parties:
            p.wait(timeout=10)
    assert rec["state"] == "done" and rec["rounds"] == ROUNDS, rec
    assert rec["resumes"] >= 1 or rec["resumed_at"], rec
    assert rec["summary"]["aborted_rounds"] <= 1 and rec["summary"]["secure_aggregation"] is True, rec["summary"]
    assert np.all(np.isfinite(model["prototypes"]))
    # no round unmasked twice: the rounds whose unmask step ran before the kill and after the restart differ
    log = (tmp_path / "coordinator.log").read_text(errors="replace")
    before, after = _unmasked_rounds(log)
    assert before and after and not before & after, (sorted(before), sorted(after))
    for name in names:
        with BudgetLedger(tmp_path / name / "ledger.sqlite", epsilon_limit=2.0, delta_limit=1e-5,
                          accountant="rdp") as led:
            assert led.charge_ids() == ["secure-killed:plan"], name
            answered = led.answered_rounds("secure-killed")
        rounds = [r for r, _, _ in answered]
        assert len(rounds) == len(set(rounds)) and max(rounds) == ROUNDS - 1, (name, rounds)
        # what the party recorded before the kill stands: no round whose masked input left to the first
        # process was answered again (another task, another input) for the restarted one
        old = before_kill[name]
        assert old and answered[:len(old)] == old, (name, old[-2:], answered[len(old) - 2:len(old) + 1])
    # the round in flight at the kill (its masked inputs recorded) is the round the restarted coordinator resumes at
    resumed = int(re.search(r"job secure-killed resumes at round (\d+)", log).group(1))  # type: ignore[union-attr]
    print(f"\nkilled with the parties' last recorded rounds {sorted({a[-1][0] for a in before_kill.values()})}; "
          f"resumed at round {resumed}; unmasked before {max(before)}, after from {min(after)}")
