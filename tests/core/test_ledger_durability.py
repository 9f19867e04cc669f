"""The ledger's durability (issue 10): its settings, and kill -9 of a process that charges.

Exact assertions only (no statistical test); kill instants come from a fixed-seed generator.
"""
from __future__ import annotations

import multiprocessing
import os
import select
import signal
import sqlite3
import time

import dp_accounting as dpa
import numpy as np

from dpfed.core.ledger import BudgetLedger

DELTA = 1e-5
EVENTS = (dpa.GaussianDpEvent(200.0), dpa.LaplaceDpEvent(4000.0))  # cheap: never near the limit
KILLS = 200


def test_ledger_is_wal_with_synchronous_full(tmp_path):
    """WAL journal, and synchronous=FULL (2) on the ledger's own connection (a per-connection setting):
    a commit returns only after the WAL is fsync'd."""
    with BudgetLedger(tmp_path / "l.db", epsilon_limit=1.0, delta_limit=DELTA) as led:
        led.charge("a", EVENTS[0], charge_id="x")
        conn = led._db()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    raw = sqlite3.connect(tmp_path / "l.db")  # the journal mode is stored in the file itself
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()


def _child(path: str, tag: str, ack_fd: int, go_fd: int) -> None:
    """Charge; acknowledge each charge on ``ack_fd`` only after ``charge()`` returned; then pause until
    the parent writes a byte on ``go_fd``."""
    led = BudgetLedger(path, epsilon_limit=1e4, delta_limit=DELTA)
    i = 0
    while True:
        cid = f"{tag}-{i}"
        led.charge(f"job{i % 3}", EVENTS[i % 2], charge_id=cid)
        os.write(ack_fd, cid.encode() + b"\n")
        if not os.read(go_fd, 1):
            os._exit(0)
        i += 1


def _read_line(fd: int, buf: bytearray, timeout: float) -> bool:
    """Read from ``fd`` until ``buf`` holds a complete line (True) or ``timeout`` passes or EOF (False)."""
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return False
        chunk = os.read(fd, 4096)
        if not chunk:
            return False
        buf += chunk
    return True


def test_kill_9_after_acknowledged_charges_loses_none(tmp_path):
    """At least 200 SIGKILLs: mostly while the child sits right after an acknowledgement, else a random
    0-4 ms into its next charge (inside the transaction or the fsync). Every acknowledged charge is
    on disk afterwards, the file is intact, and at most one unacknowledged charge per kill exists."""
    path = str(tmp_path / "l.db")
    BudgetLedger(path, epsilon_limit=1e4, delta_limit=DELTA).close()
    rng = np.random.default_rng(10)
    ctx = multiprocessing.get_context("fork")
    acked: list[str] = []
    kills = mid_charge = 0
    child_no = 0
    while kills < KILLS:
        ack_r, ack_w = os.pipe()
        go_r, go_w = os.pipe()
        child = ctx.Process(target=_child, args=(path, f"c{child_no}", ack_w, go_r), daemon=True)
        child.start()
        os.close(ack_w)
        os.close(go_r)
        buf = bytearray()
        for _ in range(int(rng.integers(1, 4))):      # let it charge 1-3 times, pausing after each
            if not _read_line(ack_r, buf, 30.0):
                break
            if rng.random() < 0.7:
                os.write(go_w, b"g")                  # on to the next charge
        if rng.random() < 0.3:                        # kill inside the next charge rather than at a pause
            os.write(go_w, b"g")
            time.sleep(rng.uniform(0, 0.004))
            mid_charge += 1
        os.kill(child.pid, signal.SIGKILL)
        kills += 1
        child.join(10)
        while select.select([ack_r], [], [], 0)[0]:
            chunk = os.read(ack_r, 4096)
            if not chunk:
                break
            buf += chunk
        os.close(ack_r)
        os.close(go_w)
        acked += [x for x in bytes(buf).decode().split("\n")[:-1] if x]  # a torn last line was no ack
        child_no += 1
    assert kills >= KILLS and mid_charge >= 30 and len(acked) >= KILLS
    with BudgetLedger(path, epsilon_limit=1e4, delta_limit=DELTA) as led:
        recorded = set(led.charge_ids())
    lost = set(acked) - recorded
    assert not lost, f"{len(lost)} acknowledged charge(s) lost, e.g. {sorted(lost)[:3]}"
    assert len(recorded - set(acked)) <= kills        # at most the one in flight per kill
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    raw.close()
