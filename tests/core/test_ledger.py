"""The durable budget ledger (runtime budget: < 60 s on a loaded 2-core machine).

Randomness (kill instants) comes from a fixed-seed numpy generator; nothing here is a
statistical test, so there is no false-alarm rate: every assertion is exact.
"""
from __future__ import annotations

import multiprocessing
import os
import select
import signal
import sqlite3
import threading
import time

import dp_accounting as dpa
import numpy as np
import pytest

from dpfed.core import accounting as A
from dpfed.core.ledger import BudgetExceededError, BudgetLedger, LedgerError

DELTA = 1e-5
G = dpa.GaussianDpEvent(20.0)   # cheap under PLD: n copies are one Gaussian of sigma 20/sqrt(n)
LAP = dpa.LaplaceDpEvent(40.0)  # pure eps 0.025


def _max_charges(event, limit: float) -> int:
    """Largest n with epsilon(n copies) <= limit, by the same accountant the ledger uses."""
    n = 0
    while A.epsilon(A.compose([event] * (n + 1)), DELTA) <= limit:
        n += 1
    return n


def test_charge_spent_and_report(tmp_path):
    with BudgetLedger(tmp_path / "l.db", epsilon_limit=3.0, delta_limit=DELTA) as led:
        assert led.spent() == 0.0
        t1 = led.charge("a", G)
        t2 = led.charge("b", LAP)
        t3 = led.charge("a", A.dp_sgd_event(5.0, 0.01, 100))
        assert 0 < t1 < t2 < t3 <= 3.0
        everything = A.compose([G, LAP, A.dp_sgd_event(5.0, 0.01, 100)])
        assert led.spent() == pytest.approx(A.epsilon(everything, DELTA), rel=1e-12)
        assert t3 == led.spent()
        assert led.spent("a") == pytest.approx(
            A.epsilon(A.compose([G, A.dp_sgd_event(5.0, 0.01, 100)]), DELTA), rel=1e-12)
        assert led.spent("b") == pytest.approx(A.epsilon(LAP, DELTA), rel=1e-12)
        assert led.spent("nobody") == 0.0
        rep = led.report()
        assert rep["limit"] == {"epsilon": 3.0, "delta": DELTA}
        assert rep["total"]["epsilon"] == led.spent() and rep["total"]["charges"] == 3
        assert rep["jobs"]["a"]["charges"] == 2 and rep["jobs"]["b"]["charges"] == 1
        assert rep["jobs"]["b"]["epsilon"] == led.spent("b")
        assert led.remaining() == pytest.approx(3.0 - led.spent())


def test_over_limit_refuses_names_amounts_and_records_nothing(tmp_path):
    led = BudgetLedger(tmp_path / "l.db", epsilon_limit=0.5, delta_limit=DELTA)
    led.charge("a", G)
    before = led.report()
    big = dpa.GaussianDpEvent(1.0)
    assert led.would_exceed(big)
    with pytest.raises(BudgetExceededError) as info:
        led.charge("a", big, charge_id="big")
    err = info.value
    assert err.limit == (0.5, DELTA)
    assert err.spent == pytest.approx(before["total"]["epsilon"])
    assert err.requested == pytest.approx(A.epsilon(A.compose([G, big]), DELTA))
    msg = str(err)
    assert "limit" in msg and "0.5" in msg and f"{err.spent:.6g}" in msg and f"{err.requested:.6g}" in msg
    assert led.report() == before
    assert "big" not in led.charge_ids()
    led.close()
    with BudgetLedger(tmp_path / "l.db", epsilon_limit=0.5, delta_limit=DELTA) as again:
        assert again.report() == before
    with pytest.raises(BudgetExceededError):  # a non-private release can never be charged
        BudgetLedger(":memory:", epsilon_limit=100.0, delta_limit=DELTA).charge("a", dpa.NonPrivateDpEvent())


def test_idempotent_on_charge_id():
    led = BudgetLedger(":memory:", epsilon_limit=5.0, delta_limit=DELTA)
    first = led.charge("a", G, charge_id="round-1")
    assert led.charge("a", G, charge_id="round-1") == first
    assert led.report()["total"]["charges"] == 1
    with pytest.raises(ValueError, match="different"):
        led.charge("a", LAP, charge_id="round-1")
    with pytest.raises(ValueError, match="different"):
        led.charge("b", G, charge_id="round-1")
    assert led.report()["total"]["charges"] == 1
    led.charge("a", G, charge_id="round-2")
    assert led.charge_ids() == ["round-1", "round-2"]


def test_would_exceed_is_a_dry_run():
    led = BudgetLedger(":memory:", epsilon_limit=1.0, delta_limit=DELTA)
    n = _max_charges(G, 1.0)
    for _ in range(n - 1):
        assert not led.would_exceed(G)
        led.charge("a", G)
    assert not led.would_exceed(G)
    assert led.report()["total"]["charges"] == n - 1
    led.charge("a", G)
    assert led.would_exceed(G)
    assert led.report()["total"]["charges"] == n


def test_bad_input_loses_nothing(tmp_path):
    led = BudgetLedger(tmp_path / "l.db", epsilon_limit=1.0, delta_limit=DELTA)
    led.charge("a", G)
    rr = dpa.dp_event.RandomizedResponseDpEvent(0.5, 2)  # needs replace_one
    with pytest.raises(A.AccountingError):
        led.charge("a", rr)
    with pytest.raises(TypeError):
        led.charge("a", "gaussian")
    with pytest.raises(ValueError):
        led.charge("", G)
    assert led.report()["total"]["charges"] == 1
    led.close()
    with pytest.raises(LedgerError, match="accountant"):
        BudgetLedger(tmp_path / "l.db", epsilon_limit=1.0, delta_limit=DELTA, accountant="rdp")
    with pytest.raises(LedgerError, match="neighbouring"):
        BudgetLedger(tmp_path / "l.db", epsilon_limit=1.0, delta_limit=DELTA, neighbouring="replace_one")
    for bad in ({"epsilon_limit": -1.0, "delta_limit": DELTA}, {"epsilon_limit": 1.0, "delta_limit": 0.0}):
        with pytest.raises(ValueError):
            BudgetLedger(":memory:", **bad)
    with pytest.raises(LedgerError, match="closed"):
        led.spent()


def test_durable_and_wal(tmp_path):
    path = tmp_path / "l.db"
    with BudgetLedger(path, epsilon_limit=2.0, delta_limit=DELTA) as led:
        led.charge("a", G, charge_id="x")
        spent = led.spent()
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()
    with BudgetLedger(path, epsilon_limit=2.0, delta_limit=DELTA) as led:
        assert led.spent() == spent and led.charge_ids() == ["x"]


def test_replace_one_ledger_accepts_randomized_response():
    led = BudgetLedger(":memory:", epsilon_limit=3.0, delta_limit=DELTA, neighbouring="replace_one")
    rr = dpa.dp_event.RandomizedResponseDpEvent(0.5, 2)
    assert led.charge("a", rr) == pytest.approx(np.log(3), rel=1e-3)
    assert led.charge("a", rr) == pytest.approx(2 * np.log(3), rel=1e-3)
    with pytest.raises(BudgetExceededError):
        led.charge("a", rr)


# ------------------------------------------------------------------ concurrency

def _charge_until_refused(path: str, limit: float, job: str, shared: BudgetLedger | None = None) -> int:
    led = shared or BudgetLedger(path, epsilon_limit=limit, delta_limit=DELTA)
    accepted = 0
    try:
        while True:
            led.charge(job, G)
            accepted += 1
    except BudgetExceededError:
        return accepted
    finally:
        if shared is None:
            led.close()


def test_threads_never_overspend(tmp_path):
    limit = 1.0
    n_max = _max_charges(G, limit)
    path = str(tmp_path / "l.db")
    shared = BudgetLedger(path, epsilon_limit=limit, delta_limit=DELTA)
    results: list[int] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        n = _charge_until_refused(path, limit, f"t{i}", shared if i % 2 else None)
        with lock:
            results.append(n)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 6
    assert sum(results) == n_max  # every slot used once, none twice
    assert shared.spent() <= limit
    assert shared.report()["total"]["charges"] == n_max
    shared.close()


def _process_worker(path: str, limit: float, job: str, queue) -> None:
    queue.put(_charge_until_refused(path, limit, job))


def test_processes_never_overspend(tmp_path):
    limit = 1.0
    n_max = _max_charges(G, limit)
    path = str(tmp_path / "l.db")
    BudgetLedger(path, epsilon_limit=limit, delta_limit=DELTA).close()  # create the schema
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_process_worker, args=(path, limit, f"p{i}", queue)) for i in range(4)]
    for p in procs:
        p.start()
    counts = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert sum(counts) == n_max
    with BudgetLedger(path, epsilon_limit=limit, delta_limit=DELTA) as led:
        assert led.spent() <= limit
        assert led.report()["total"]["charges"] == n_max
        assert sum(j["charges"] for j in led.report()["jobs"].values()) == n_max


# ------------------------------------------------------------------ kill -9

def _kill_child(path: str, limit: float, round_no: int, write_fd: int) -> None:
    """Charge in a loop; report each charge id on the pipe only AFTER charge() returned."""
    led = BudgetLedger(path, epsilon_limit=limit, delta_limit=DELTA)
    events = (G, LAP)
    i = 0
    while True:
        cid = f"r{round_no}-{i}"
        try:
            led.charge(f"job{round_no % 3}", events[i % 2], charge_id=cid)
        except BudgetExceededError:
            os.write(write_fd, b"EXHAUSTED\n")
            os._exit(0)
        os.write(write_fd, cid.encode() + b"\n")
        i += 1


def test_sigkill_at_random_points_never_loses_an_acknowledged_charge(tmp_path):
    path = str(tmp_path / "l.db")
    limit = 2.0
    BudgetLedger(path, epsilon_limit=limit, delta_limit=DELTA).close()
    rng = np.random.default_rng(7)
    ctx = multiprocessing.get_context("fork")
    acked: set[str] = set()
    kills = 0
    exhausted = False
    for round_no in range(40):
        r, w = os.pipe()
        child = ctx.Process(target=_kill_child, args=(path, limit, round_no, w), daemon=True)
        child.start()
        os.close(w)
        # Kill after a random delay (0-60 ms after the first acknowledgement, or even before it).
        deadline = None if rng.random() < 0.8 else time.monotonic() + rng.uniform(0, 0.2)
        buf = b""
        done = False
        while not done:
            timeout = 0.5 if deadline is None else max(deadline - time.monotonic(), 0)
            ready, _, _ = select.select([r], [], [], timeout)
            if ready:
                chunk = os.read(r, 4096)
                if not chunk:
                    done = True
                buf += chunk
                if deadline is None and b"\n" in buf:
                    deadline = time.monotonic() + rng.uniform(0, 0.06)
            if deadline is not None and time.monotonic() >= deadline:
                break
        if child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
            kills += 1
        child.join(10)
        buf += _drain(r)
        os.close(r)
        lines = buf.decode().split("\n")
        complete = lines[:-1]  # a torn last line was not an acknowledgement
        acked.update(x for x in complete if x and x != "EXHAUSTED")
        if "EXHAUSTED" in complete:
            exhausted = True
            break
    assert kills >= 10
    with BudgetLedger(path, epsilon_limit=limit, delta_limit=DELTA) as led:
        recorded = set(led.charge_ids())
        assert acked <= recorded, f"lost acknowledged charges: {sorted(acked - recorded)[:5]}"
        assert led.spent() <= limit
        assert len(recorded) >= len(acked) > 0
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    raw.close()
    assert exhausted or len(acked) > 20


def _drain(fd: int) -> bytes:
    out = b""
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        out += chunk
    return out


#: Charges as the release before the rename of dpfed's events stored them (output of that release's
#: ``event_to_json``, copied verbatim): the classes were then called EpsilonDeltaDpEvent and
#: DiscreteGaussianDpEvent.
_OLD_PLAN = ('{"class_name":"ComposedDpEvent","events":[{"class_name":"SelfComposedDpEvent","count":2,"event":'
             '{"class_name":"DiscreteGaussianDpEvent","sensitivity":2,"sigma":30.0}},'
             '{"class_name":"EpsilonDeltaDpEvent","delta":1e-07,"epsilon":0.5}]}')
_OLD_EPSILON = 0.8080134920247021  # that release's ledger total at delta 1e-5, grid 1e-4


def test_ledger_of_the_previous_release_still_loads(tmp_path):
    """A ledger written before EpsilonDeltaDpEvent / DiscreteGaussianDpEvent were renamed is read with the
    new classes: the same total as that release computed, a repeat of its charge id with the same event
    (now spelled with the new names) is recognised as the same charge, and new charges compose with it."""
    path = tmp_path / "old.db"
    BudgetLedger(path, epsilon_limit=5.0, delta_limit=1e-5).close()  # the schema (unchanged since)
    with sqlite3.connect(path) as c:
        c.execute("INSERT INTO charges (charge_id, job, event, epsilon_after, epsilon_limit, delta_limit, created_at)"
                  " VALUES ('j:plan', 'j', ?, ?, 5.0, 1e-5, 0.0)", (_OLD_PLAN, _OLD_EPSILON))
    plan = A.compose([A.EpsilonDeltaBoundDpEvent(0.5, 1e-7), A.ScalarDiscreteGaussianDpEvent(30.0, 2),
                      A.ScalarDiscreteGaussianDpEvent(30.0, 2)])
    assert "EpsilonDeltaDpEvent" not in A.event_to_json(plan)  # written under the new names only
    with BudgetLedger(path, epsilon_limit=5.0, delta_limit=1e-5) as led:
        assert led.spent() == pytest.approx(_OLD_EPSILON, rel=1e-12)
        assert led.charge("j", plan, charge_id="j:plan") == pytest.approx(_OLD_EPSILON, rel=1e-12)
        assert led.charge_ids() == ["j:plan"]  # the repeat charged nothing
        with pytest.raises(ValueError, match="different job or event"):
            led.charge("j", A.EpsilonDeltaBoundDpEvent(0.5, 1e-7), charge_id="j:plan")
        after = led.charge("k", A.EpsilonDeltaBoundDpEvent(0.5, 1e-7))
        assert after == pytest.approx(A.epsilon(A.compose([plan, A.EpsilonDeltaBoundDpEvent(0.5, 1e-7)]), 1e-5))
