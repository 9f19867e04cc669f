"""Lint and type check as part of the suite: ``ruff check`` and ``mypy`` (configured in pyproject.toml:
strict for dpfed.core) must report nothing. mypy keeps its cache in the system temporary directory,
so after the first run (~17 s of CPU) a run takes about a second."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed: python -m pip install -e '.[test]'")


def test_ruff_finds_nothing() -> None:
    _require("ruff")
    res = _run(sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy_finds_nothing() -> None:
    _require("mypy")
    cache = Path(tempfile.gettempdir()) / "dpfed-mypy-cache"
    res = _run(sys.executable, "-m", "mypy", "--cache-dir", str(cache), "--no-error-summary")
    assert res.returncode == 0, res.stdout + res.stderr
