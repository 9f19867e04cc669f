"""Daemons that stop promptly on SIGTERM / SIGINT: podman (``podman stop -t 2``, ``podman pod stop``) and
Kubernetes send SIGTERM and kill after a grace period (2 s in this project's deployments), so a daemon that
first finishes its current work (a party computing an answer, a coordinator deciding an offer) is killed under
load. The first signal asks the daemon to stop cleanly (``stop``) and starts a timer: if the process is still
there ``seconds`` later, ``close`` runs (a ledger or state store closes after the write in progress: every
charge is one transaction, every job record is written whole) and the process exits 0. Nothing is lost either
way: what was charged or recorded stays on disk, and a job that was running resumes (the party and coordinator
tests of ``kill -9`` cover the harder case)."""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["STOP_SECONDS", "stop_on_signals"]

#: Seconds a daemon gives its current work after the stop signal before the hard stop (within a 2 s grace).
STOP_SECONDS = 1.0


def stop_on_signals(stop: Callable[[], None], close: Callable[[], None], what: str,
                    seconds: float = STOP_SECONDS + 0.3) -> None:
    """Install SIGTERM and SIGINT handlers (call from the main thread): the first signal starts the hard-stop
    timer of ``seconds`` and calls ``stop``; a later one only calls ``stop`` again."""
    started = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:  # noqa: ARG001
        if not started.is_set():
            started.set()
            threading.Thread(target=_exit_if_busy, args=(close, what, seconds), name="dpfed-stop",
                             daemon=True).start()
        stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)


def _exit_if_busy(close: Callable[[], None], what: str, seconds: float) -> None:
    time.sleep(seconds)
    logging.getLogger("dpfed").warning("%s still busy %.1f s after the stop signal: closing and exiting",
                                       what, seconds)
    logging.shutdown()
    close()
    os._exit(0)
