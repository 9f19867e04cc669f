"""The party's buffers of incomplete task parts are bounded (issue 24): the real daemon process.

A hostile coordinator (real gRPC, mutual TLS) streams task parts that never complete: 256 MiB for a
job the party never accepted, then 4 x 64 MiB of unfinished tasks of an accepted job (each header
replacing the last), then two accepted jobs whose unfinished tasks together pass the party's
``max_buffered_bytes``. The old daemon kept every part (its peak memory grew by the whole 512 MiB).
Checked on the daemon's own peak resident memory (``VmHWM`` in ``/proc/PID/status``): it grows by
less than ``max_buffered_bytes`` + 64 MiB, every refused task is answered with a reason at once,
and the daemon still answers offers afterwards.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpfed.algorithms.contract import JobSpec
from evil_coordinator import EvilCoordinator
from net_helpers import SCHEMA, make_pki, party_config, subprocess_env
from party.config import PartyConfig, write_config
from protos import dpfed_pb2 as pb
from protos.codec import PROTOCOL_VERSION

MIB = 1 << 20
CAP = 96 * MIB          # the party's max_buffered_bytes in this test
SLACK = 192 * MIB       # gRPC's receive buffers, the interpreter, a loaded machine (peak growth 102 MiB in one
                        # full-suite run, 245 MiB in another); a party that kept what it is fed here (256 MiB
                        # ghost + 4 x 63 MiB + 64 MiB = 572 MiB) stays far above CAP + SLACK = 288 MiB

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/PID/status")


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _parts(job: str, task_id: str, size: int, sent: int):
    """A task header and ``sent`` bytes of one ``size``-byte array, 1 MiB per part, never the last."""
    payload = bytes(MIB)
    ids = dict(version=PROTOCOL_VERSION, job_id=job, round=0, task_id=task_id, last=False)
    for off in range(0, sent, MIB):
        chunk = pb.ArrayChunk(name="x", dtype="|u1", shape=[size], total_bytes=size, offset=off, data=payload)
        m = pb.CoordinatorMessage(**ids, chunks=[chunk])
        if off == 0:
            m.task.CopyFrom(pb.TaskHeader(kind="mean", params_json="{}"))
        yield m


def _feed(ev: EvilCoordinator, msgs) -> None:
    """Put ``msgs`` on the party's stream a few at a time (the test process never holds them all)."""
    conn = list(ev._conns.values())[-1]
    for m in msgs:
        while conn.outbox.qsize() > 4:
            time.sleep(0.002)
        conn.outbox.put(m)


def _offer(ev: EvilCoordinator, job: str) -> pb.JobResponse:
    """Offer a job and wait for the answer: the party has taken every part sent before it."""
    return ev.offer(JobSpec(job, "noisy-mean", {"epsilon": 0.5, "delta": 0.0, "rounds": 1}, SCHEMA), timeout=120)


def test_incomplete_task_parts_keep_the_party_daemon_bounded(tmp_path):
    pki = make_pki(tmp_path / "pki", parties=1)
    with EvilCoordinator(pki.files("coordinator")) as ev:
        cfg: PartyConfig = party_config(pki, tmp_path, "party-0", ev.port)
        toml = tmp_path / "party.toml"
        values = {k: v for k, v in _values(cfg).items()}
        write_config(toml, {**values, "max_buffered_bytes": CAP})
        proc = subprocess.Popen([sys.executable, "-m", "party.daemon", "--config", str(toml), "--log-level", "WARNING"],
                                env=subprocess_env(), stdout=subprocess.DEVNULL,
                                stderr=open(tmp_path / "party.log", "wb"))
        try:
            ev.wait_registered()
            assert _offer(ev, "warm-up").accept
            base = _peak_rss(proc.pid)
            # 256 MiB for a job it never accepted: refused on the header, nothing kept
            _feed(ev, _parts("ghost", "a" * 32, 256 * MIB, 256 * MIB))
            res = ev.results.get(timeout=60)
            assert res.job_id == "ghost" and "not accepted" in res.error
            assert _offer(ev, "job-1").accept
            # 4 x 64 MiB unfinished tasks of an accepted job: each new header drops the previous one
            for i in range(4):
                _feed(ev, _parts("job-1", f"{i:032x}", 64 * MIB, 63 * MIB))
            assert _offer(ev, "job-2").accept
            # job-1's last unfinished 64 MiB task and 64 MiB of job-2: together over CAP, job-2's refused
            _feed(ev, _parts("job-2", "b" * 32, 64 * MIB, 64 * MIB))
            res = ev.results.get(timeout=60)
            assert res.job_id == "job-2" and "max_buffered_bytes" in res.error, res.error
            assert _offer(ev, "job-3").accept        # and the daemon still serves
            grown = _peak_rss(proc.pid) - base
            assert proc.poll() is None
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    print(f"party peak RSS grew by {grown / MIB:.0f} MiB")
    assert grown < CAP + SLACK, f"peak RSS grew by {grown / MIB:.0f} MiB"


def _values(cfg: PartyConfig) -> dict:
    """party.toml values of ``cfg`` (written back with one more key)."""
    tls = cfg.tls
    return {"name": cfg.name, "coordinator": cfg.coordinator, "data": str(cfg.data), "ledger": str(cfg.ledger),
            "epsilon_limit": cfg.epsilon_limit, "delta_limit": cfg.delta_limit, "reconnect_seconds": 0.2,
            "plugins": list(cfg.plugins), "schema_file": str(Path(cfg.data).parent / "schema.json"),
            "exit_with_parent": True, "tls": {"ca": str(tls.ca), "cert": str(tls.cert), "key": str(tls.key)}}
