"""``dpfed simulate``'s progress: a bar on a terminal (a pseudo-terminal here), and, anywhere else, exactly
the lines it printed before the bar existed (``[label] x%  t s``, one per 2% of the job). In process, one
single-round naive Bayes job each (cheap). Nothing random is asserted on. ``dpfed job wait``'s bar is checked
against a live coordinator in tests/daemons/test_console_metrics.py."""
from __future__ import annotations

import json
import os
import pty
import re

from dpfed.cli import main
from dpfed.cli.progress import wants_bar
from tty_capture import terminal_stderr

ARGS = ["simulate", "--algorithm", "naive-bayes", "--dataset", "nursery", "--parties", "2", "--epsilon", "1",
        "--transport", "inproc"]
LINE = r"\[naive-bayes\] +\d+\.\d%  +\d+\.\ds"


def test_not_a_terminal_gets_the_lines_it_always_got(capsys):
    assert main([*ARGS, "--json"]) == 0
    cap = capsys.readouterr()
    json.loads(cap.out)
    lines = [x for x in cap.err.splitlines() if x.strip()]
    assert lines and all(re.fullmatch(LINE, x) for x in lines), lines
    assert lines[-1].startswith("[naive-bayes] 100.0%") and "\r" not in cap.err


def test_a_terminal_gets_a_bar_and_stdout_is_unchanged(capsys, monkeypatch):
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        assert wants_bar(tty) and not wants_bar(tty, json_output=True)
    os.close(master)
    with terminal_stderr(monkeypatch) as got:
        assert main(ARGS) == 0
    err = got[0]
    out = capsys.readouterr().out
    assert out.startswith("key")  # the table on stdout, as before
    assert "naive-bayes: 100%|" in err and "\r" in err and "[naive-bayes]" not in err
    monkeypatch.setenv("DPFED_PROGRESS", "0")
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty2:
        assert not wants_bar(tty2)
    os.close(master)
