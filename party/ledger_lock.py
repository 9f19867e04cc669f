"""One party daemon per ledger: a daemon holds an exclusive lock on ``LEDGER.lock`` (beside its ledger) for as
long as it runs, so that a second daemon of the same party started by mistake on the same machine (a service
and a manual start, two containers on one volume) stops at once with the first one's process id, instead of
running: two daemons of one party take each other's session in turn at the coordinator (each registration
closes the other's), so the party's jobs stall. ``flock``: the kernel releases the lock when the process ends,
``kill -9`` included, so a restart never finds a stale lock. Reading the ledger (``dpfed party ledger``,
``dpfed party check``) takes no lock."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from dpfed.core.ledger import LedgerError

__all__ = ["hold_ledger"]


def hold_ledger(ledger: Path) -> IO[str]:
    """Take the daemon's lock for ``ledger`` (closing the returned file releases it); :class:`LedgerError` naming
    the holder's process id if another daemon has it."""
    lock = Path(f"{ledger}.lock")
    f = open(lock, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the daemon's lifetime
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip()[:40] or "unknown"
        f.close()
        raise LedgerError(f"another party daemon (pid {holder}) is running with the ledger {ledger}: stop it first "
                          "(two daemons of one party would take each other's session at the coordinator)") from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f
