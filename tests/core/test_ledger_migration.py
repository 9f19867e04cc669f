"""``dpfed party ledger migrate`` (issue 29 item 1): an existing ledger moves to another accountant keeping
every recorded charge, never lowering the recorded spend; a ``kill -9`` in the middle of the migration's
transaction leaves the old ledger intact; a release the new accountant cannot take is refused with nothing
changed. The spends are compared with dp-accounting's own accountants on the same events, computed here."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import dp_accounting as dpa
import pytest

from dpfed.cli import main
from dpfed.core.events import DistributedDiscreteGaussianDpEvent as DDG
from dpfed.core.ledger import BudgetLedger, LedgerError
from dpfed.core.ledger_migration import migrate_ledger

DELTA = 1e-5
EVENTS = [dpa.GaussianDpEvent(3.0),
          dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.05, dpa.GaussianDpEvent(1.2)), 40),
          DDG(2.0, 3, 1.0, 1.0, 1)]


def _fill(db, accountant: str) -> list[str]:
    with BudgetLedger(db, epsilon_limit=20.0, delta_limit=DELTA, accountant=accountant) as led:
        for i, ev in enumerate(EVENTS):
            led.charge(f"job-{i}", ev, charge_id=f"job-{i}:plan", params_digest=f"{i}" * 64)
            led.record_answer(f"job-{i}", 0, "t" * 64, "a" * 64, b"answer")
        return led.charge_ids()


def _meta(db) -> dict[str, str]:
    con = sqlite3.connect(db)
    try:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())
    finally:
        con.close()


def test_rdp_to_pld_keeps_every_charge_and_never_lowers_the_spend(tmp_path):
    db = tmp_path / "ledger.sqlite"
    ids = _fill(db, "rdp")
    with BudgetLedger(db, epsilon_limit=20.0, delta_limit=DELTA, accountant="rdp") as led:
        rdp_spent = led.spent()
    done = migrate_ledger(db, "pld", epsilon_limit=20.0, delta_limit=DELTA)
    assert done["changed"] and done["charges"] == 3 and done["spent_before"] == pytest.approx(rdp_spent)
    with BudgetLedger(db, epsilon_limit=20.0, delta_limit=DELTA, accountant="pld") as led:
        assert led.charge_ids() == ids and led.last_answer("job-2").data == b"answer"
        assert led.params_digest("job-1") == "1" * 64
        # the PLD total of these releases is below the RDP one: the recorded (RDP) spend stays the floor
        assert led._epsilon(led.releases()[0]) < rdp_spent
        assert led.spent() == pytest.approx(rdp_spent, rel=1e-12) and led.spent() >= rdp_spent
        after = led.charge("job-new", dpa.GaussianDpEvent(2.0))
        assert after >= rdp_spent
    with pytest.raises(LedgerError, match="accountant"):  # the file now says pld
        BudgetLedger(db, epsilon_limit=20.0, delta_limit=DELTA, accountant="rdp")
    back = migrate_ledger(db, "rdp", epsilon_limit=20.0, delta_limit=DELTA)
    assert back["spent_after"] >= back["spent_before"] >= rdp_spent


def test_a_release_the_new_accountant_cannot_take_is_refused_and_nothing_changes(tmp_path):
    db = tmp_path / "ledger.sqlite"
    with BudgetLedger(db, epsilon_limit=5.0, delta_limit=DELTA) as led:  # RDP has no subsampled Laplace
        led.charge("job", dpa.PoissonSampledDpEvent(0.1, dpa.LaplaceDpEvent(2.0)))
    before = _meta(db)
    with pytest.raises(LedgerError, match="nothing changed"):
        migrate_ledger(db, "rdp", epsilon_limit=5.0, delta_limit=DELTA)
    assert _meta(db) == before


_PAUSED_MIGRATION = textwrap.dedent("""
    import sqlite3, sys, time
    from pathlib import Path
    import dpfed.core.ledger_migration as lm

    class Pausing:  # the real connection; after switching the accountant (inside the transaction) it waits
        def __init__(self, conn):
            self.conn = conn
        def __getattr__(self, name):
            return getattr(self.conn, name)
        def execute(self, sql, *args):
            out = self.conn.execute(sql, *args)
            if sql.startswith("UPDATE meta"):
                Path(sys.argv[2]).write_text("paused")
                time.sleep(120)
            return out

    class Shim:
        DatabaseError = sqlite3.DatabaseError
        @staticmethod
        def connect(*a, **kw):
            return Pausing(sqlite3.connect(*a, **kw))

    lm.sqlite3 = Shim
    lm.migrate_ledger(sys.argv[1], "rdp", epsilon_limit=20.0, delta_limit=1e-5)
""")


def test_kill_9_inside_the_migration_leaves_the_old_ledger_intact(tmp_path):
    db, flag = tmp_path / "ledger.sqlite", tmp_path / "paused"
    ids = _fill(db, "pld")
    with BudgetLedger(db, epsilon_limit=20.0, delta_limit=DELTA) as led:
        spent = led.spent()
    proc = subprocess.Popen([sys.executable, "-c", _PAUSED_MIGRATION, str(db), str(flag)], env=os.environ.copy())
    try:
        t0 = time.monotonic()
        while not flag.exists():
            assert proc.poll() is None and time.monotonic() - t0 < 120, "the migration never reached its transaction"
            time.sleep(0.05)
        assert _meta(db)["accountant"] == "pld"  # another connection sees the committed state only
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    meta = _meta(db)
    assert meta["accountant"] == "pld" and "spend_floor" not in meta and "migrations" not in meta
    with BudgetLedger(db, epsilon_limit=20.0, delta_limit=DELTA) as led:
        assert led.charge_ids() == ids and led.spent() == spent
    assert migrate_ledger(db, "rdp", epsilon_limit=20.0, delta_limit=DELTA)["changed"]  # and it can still move


def test_cli_migrate_moves_the_ledger_and_the_config(tmp_path, capsys):
    (tmp_path / "party.toml").write_text(
        'name = "clinic-a"\ncoordinator = "127.0.0.1:1"\ndata = "d.csv"\nledger = "ledger.sqlite"\n'
        f'epsilon_limit = 20.0\ndelta_limit = {DELTA}\naccountant = "pld"   # was the default\ninsecure = true\n'
        '[schema]\nn_classes = 2\n[[schema.features]]\nname = "x"\nkind = "numeric"\nlower = 0\nupper = 1\n')
    ids = _fill(tmp_path / "ledger.sqlite", "pld")
    cfg = str(tmp_path / "party.toml")
    assert main(["party", "ledger", "migrate", "--config", cfg, "--accountant", "rdp"]) == 0
    out = capsys.readouterr().out
    assert "from pld to rdp" in out and "3 charges kept" in out
    assert 'accountant = "rdp"' in (tmp_path / "party.toml").read_text()
    assert main(["party", "ledger", "--config", cfg, "--json"]) == 0  # opens with the new accountant
    capsys.readouterr()
    with BudgetLedger(tmp_path / "ledger.sqlite", epsilon_limit=20.0, delta_limit=DELTA, accountant="rdp") as led:
        assert led.charge_ids() == ids
