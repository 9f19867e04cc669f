"""A pseudo-terminal as ``sys.stderr``, for tests of what a command shows on a terminal (progress bars)."""
from __future__ import annotations

import contextlib
import os
import pty
import select
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def terminal_stderr(monkeypatch) -> Iterator[list[str]]:
    """Make ``sys.stderr`` a pseudo-terminal for the block; the yielded list gets what was written to it."""
    master, slave = pty.openpty()
    tty = os.fdopen(slave, "w")
    got: list[str] = []
    try:
        monkeypatch.setattr(sys, "stderr", tty)
        yield got
        tty.flush()
        raw = b""
        while select.select([master], [], [], 0.5)[0]:
            raw += os.read(master, 1 << 16)
        got.append(raw.decode(errors="replace"))
    finally:
        monkeypatch.setattr(sys, "stderr", sys.__stderr__)
        tty.close()
        os.close(master)
