"""Move an existing ledger to another accountant, keeping every recorded charge (``dpfed party ledger migrate``).

A ledger's accountant is fixed in its file (:class:`dpfed.core.ledger.BudgetLedger`), so a site whose PLD
ledger could not account some event, or that wants RDP, had to start a new ledger and lose the record of what
it had spent. A migration keeps the file, its charges, jobs and answers, and changes only the accountant:

1. the spend under the old accountant is computed (at the owner's delta limit, with any earlier floor);
2. every recorded release must be accounted by the new one (else: refused, nothing changed);
3. in one SQLite transaction (atomic and durable as a charge: a ``kill -9`` at any point leaves either the
   old ledger or the migrated one, never a mix), the accountant is switched and ``spend_floor`` is set to the
   old spend: the migrated ledger reports max(new accountant's epsilon, floor), so a migration never lowers a
   recorded spend (both accountants give upper bounds on the same releases; keeping the larger is
   conservative, and later charges compose on top of every recorded release under the new accountant).

The party must be stopped while its ledger migrates (a running daemon keeps the accountant it opened with);
its ``party.toml`` then names the new accountant.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any

from dpfed.core import accounting
from dpfed.core.ledger import BudgetLedger, LedgerError

__all__ = ["migrate_ledger"]

_ACCOUNTANTS = ("pld", "rdp")


def _meta(path: str) -> dict[str, str]:
    conn = sqlite3.connect(path, timeout=30)
    try:
        return dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as exc:
        raise LedgerError(f"{path!r} is not a dpfed ledger: {exc}") from None
    finally:
        conn.close()


def migrate_ledger(path: str | os.PathLike[str], accountant: str, *, epsilon_limit: float,
                   delta_limit: float) -> dict[str, Any]:
    """Switch the ledger at ``path`` to ``accountant`` (module docstring); return what was done:
    ``from``, ``to``, ``charges``, ``spent_before``, ``spent_after`` (>= spent_before) and ``changed``."""
    path = os.fspath(path)
    if accountant not in _ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {', '.join(_ACCOUNTANTS)}, got {accountant!r}")
    if not os.path.isfile(path):
        raise LedgerError(f"no ledger at {path!r}")
    old = _meta(path).get("accountant")
    if old not in _ACCOUNTANTS:
        raise LedgerError(f"{path!r} is not a dpfed ledger (no accountant recorded)")
    with BudgetLedger(path, epsilon_limit=epsilon_limit, delta_limit=delta_limit, accountant=old) as led:
        before, floor_before, charges = led.spent(), led.spend_floor, len(led.charge_ids())
        if old == accountant:
            return {"from": old, "to": accountant, "charges": charges, "spent_before": before,
                    "spent_after": before, "changed": False}
        counts, seq = led.releases()
        grid, neighbouring = led.pld_discretization, led.neighbouring
    try:
        new_eps = accounting.epsilon(accounting.from_counts(counts), delta_limit, accountant=accountant,
                                     neighbouring=neighbouring, pld_discretization=grid) if counts else 0.0
    except accounting.AccountingError as exc:
        raise LedgerError(f"the {accountant} accountant cannot take this ledger's releases, nothing changed: "
                          f"{exc}") from None
    floor = max(before, floor_before)
    conn = sqlite3.connect(path, timeout=120, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            now = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM charges").fetchone()[0]
            have = conn.execute("SELECT value FROM meta WHERE key = 'accountant'").fetchone()
            if now != seq or have is None or have[0] != old:
                raise LedgerError(f"ledger {path!r} changed during the migration (is the party running?); "
                                  "nothing changed: stop the party and try again")
            conn.execute("UPDATE meta SET value = ? WHERE key = 'accountant'", (accountant,))
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('spend_floor', ?)", (repr(float(floor)),))
            log = json.loads(dict(conn.execute("SELECT key, value FROM meta").fetchall()).get("migrations", "[]"))
            log.append({"from": old, "to": accountant, "at": time.time(), "spent_before": before,
                        "delta": delta_limit, "charges": charges})
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('migrations', ?)", (json.dumps(log),))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()
    return {"from": old, "to": accountant, "charges": charges, "spent_before": before,
            "spent_after": max(new_eps, floor), "changed": True}
