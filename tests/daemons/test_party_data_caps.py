"""party.toml's data caps: ``max_rows`` and ``max_bytes`` reach the loading of ``dpfed party check`` and
``dpfed party serve``; a file over a cap is refused with one line naming the cap (exit 2)."""
from __future__ import annotations

import zipfile

import numpy as np
import pytest

import party.config
from dpfed.cli import main
from dpfed.data.files import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS
from net_helpers import party_config
from party.config import ConfigError, PartyConfig


def _with(toml, **keys) -> None:  # top-level keys go before the file's [tables]
    toml.write_text("".join(f"{k} = {v}\n" for k, v in keys.items()) + toml.read_text())


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("command", ["check", "serve"])
@pytest.mark.parametrize("keys, named", [({"max_rows": 49}, "more than the cap of 49 records (max_rows)"),
                                         ({"max_bytes": 1000}, "more than the cap of 1000 bytes (max_bytes)")])
def test_a_file_over_a_cap_is_refused_with_one_line(pki, tmp_path, capsys, command, keys, named):
    X = np.random.default_rng(0).uniform(size=(50, 3))  # 50 records, 1200 bytes of float64
    toml = party_config(pki, tmp_path, "party-0", 1, data=X, write_toml=True)
    _with(toml, **keys)
    assert main(["party", command, "--config", str(toml)]) == 2
    err = _one_line_error(capsys)
    assert named in err and "data.npz" in err


def test_caps_at_the_size_pass_and_defaults_are_documented(pki, tmp_path, capsys):
    X = np.random.default_rng(0).uniform(size=(50, 3))
    toml = party_config(pki, tmp_path, "party-0", 1, data=X, write_toml=True)
    cfg = PartyConfig.load(toml)
    assert (cfg.max_rows, cfg.max_bytes) == (DEFAULT_MAX_ROWS, DEFAULT_MAX_BYTES)
    doc = party.config.__doc__
    assert f"max_rows = {DEFAULT_MAX_ROWS}" in doc and f"max_bytes = {DEFAULT_MAX_BYTES}" in doc
    with zipfile.ZipFile(cfg.data) as zf:  # the arrays as stored: data and .npy headers
        size = sum(i.file_size for i in zf.infolist())
    _with(toml, max_rows=50, max_bytes=size)
    assert main(["party", "check", "--config", str(toml)]) == 0
    assert '"records": 50' in capsys.readouterr().out


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "\"10\"", "true"])
def test_a_bad_cap_is_a_config_error(pki, tmp_path, value):
    toml = party_config(pki, tmp_path, "party-0", 1, write_toml=True)
    _with(toml, max_rows=value)
    with pytest.raises(ConfigError, match="max_rows"):
        PartyConfig.load(toml)
