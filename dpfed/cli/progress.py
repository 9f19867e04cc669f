"""Progress bars on a terminal for ``dpfed simulate`` and ``dpfed job wait`` (tqdm, on stderr).

Only when stderr is a terminal and the command was not asked for ``--json``: anything else (a pipe, a
file, a CI log) gets exactly what it got before (``dpfed simulate``'s ``[label] x%`` lines, nothing for
``dpfed job wait``). ``DPFED_PROGRESS=0`` turns the bars off on a terminal too.
"""
from __future__ import annotations

import os
import sys
from typing import IO, Any

__all__ = ["wants_bar", "FractionBar", "RoundsBar"]


def wants_bar(stream: IO[str] | None = None, json_output: bool = False) -> bool:
    """A bar goes to ``stream`` (stderr) only if it is a terminal, no JSON was asked for, and not turned off."""
    stream = sys.stderr if stream is None else stream
    if json_output or os.environ.get("DPFED_PROGRESS", "1") == "0":
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _shape(stream: IO[str]) -> tuple[int, int]:
    """The terminal's (columns, rows); (80, 24) when it does not say, e.g. a pseudo-terminal nobody sized
    (tqdm would otherwise draw nothing on a terminal of 0 rows)."""
    try:
        size = os.get_terminal_size(stream.fileno())
        return size.columns or 80, size.lines or 24
    except (OSError, ValueError, AttributeError):
        return 80, 24


def _bar(label: str, total: float, unit: str, stream: IO[str] | None) -> Any:
    from tqdm import tqdm

    out = sys.stderr if stream is None else stream
    cols, rows = _shape(out)
    return tqdm(total=total, desc=label, unit=unit, file=out, ncols=min(cols, 120), nrows=rows, leave=True,
                mininterval=0.2, bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix} [{elapsed}<{remaining}]")


class FractionBar:
    """A bar fed the fraction of the job done (``dpfed simulate``'s progress callback); time left from tqdm."""

    def __init__(self, label: str, stream: IO[str] | None = None) -> None:
        self.bar = _bar(label, 1000, "‰", stream)

    def __call__(self, fraction: float) -> None:
        n = int(round(min(max(fraction, 0.0), 1.0) * 1000))
        if n > self.bar.n:
            self.bar.update(n - self.bar.n)
        if n >= 1000:
            self.close()

    def close(self) -> None:
        self.bar.close()


class RoundsBar:
    """A bar fed job records (``dpfed job wait``): round r of T, the job's state, time left."""

    def __init__(self, job_id: str, stream: IO[str] | None = None) -> None:
        self.bar = _bar(job_id, 1, "round", stream)

    def __call__(self, record: dict[str, Any]) -> None:
        rounds, p = int(record.get("rounds", 0)), float(record.get("progress", 0.0))
        total = max(int(round(rounds / p)), rounds) if p > 0 else None
        if total and total != self.bar.total:
            self.bar.total = total
        if rounds > self.bar.n:
            self.bar.update(rounds - self.bar.n)
        self.bar.set_postfix_str(f"round {rounds} of {total or '?'}, {record.get('state', '?')}", refresh=True)

    def close(self) -> None:
        self.bar.close()
