"""``dpfed privacy epsilon|noise`` through the real console script and ``dpfed.cli.main``
(runtime budget: < 40 s; each subprocess pays ~1.5 s of imports)."""
from __future__ import annotations

import json
import shutil
import subprocess

import dp_accounting as dpa
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpfed.cli import main
from dpfed.core import accounting as A

KEYS = {"epsilon", "noise_multiplier", "delta", "sampling_rate", "steps", "accountant"}


def _reference(sigma: float, q: float, steps: int, delta: float, accountant: str) -> float:
    """dp-accounting itself, with its defaults."""
    acc = (pld_privacy_accountant.PLDAccountant() if accountant == "pld"
           else rdp_privacy_accountant.RdpAccountant())
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps))
    return acc.get_epsilon(delta)


def _run(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("dpfed")
    assert exe, "the dpfed console script is not installed"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("accountant,anchor", [("pld", 2.17), ("rdp", 2.37)])
def test_console_script_epsilon_equals_dp_accounting(accountant, anchor):
    argv = ["privacy", "epsilon", "--noise-multiplier", "1.5", "--sampling-rate", "0.01",
            "--steps", "5000", "--delta", "1e-5", "--json"]
    if accountant == "rdp":
        argv += ["--accountant", "rdp"]
    proc = _run(*argv)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert KEYS <= set(out)  # keys are a contract: kept, others may be added (pld_discretization)
    ref = _reference(1.5, 0.01, 5000, 1e-5, accountant)
    assert out["epsilon"] == pytest.approx(ref, rel=1e-6)
    assert out["epsilon"] == pytest.approx(anchor, abs=0.01)
    assert {k: out[k] for k in KEYS} == {"epsilon": out["epsilon"], "noise_multiplier": 1.5, "delta": 1e-5,
                                         "sampling_rate": 0.01, "steps": 5000, "accountant": accountant}
    assert out.get("pld_discretization", 1e-4) == 1e-4  # the default grid at this epsilon


def test_console_script_noise_plain():
    proc = _run("privacy", "noise", "--epsilon", "2.17", "--delta", "1e-5",
                "--sampling-rate", "0.01", "--steps", "5000")
    assert proc.returncode == 0, proc.stderr
    sigma = float(proc.stdout.strip())
    assert sigma == pytest.approx(1.5, rel=2e-3)  # the anchor, inverted
    assert _reference(sigma, 0.01, 5000, 1e-5, "pld") <= 2.17
    assert _reference(sigma * 0.999, 0.01, 5000, 1e-5, "pld") > 2.17


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
@pytest.mark.parametrize("sigma,q,steps,delta", [(0.9, 0.05, 300, 1e-5), (2.5, 1.0, 20, 1e-6)])
def test_main_epsilon_plain_equals_dp_accounting(capsys, accountant, sigma, q, steps, delta):
    code = main(["privacy", "epsilon", "--noise-multiplier", str(sigma), "--sampling-rate", str(q),
                 "--steps", str(steps), "--delta", str(delta), "--accountant", accountant])
    assert code == 0
    printed = float(capsys.readouterr().out.strip())
    assert printed == pytest.approx(_reference(sigma, q, steps, delta, accountant), rel=1e-6)


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_main_noise_json_meets_target(capsys, accountant):
    code = main(["privacy", "noise", "--epsilon", "1.0", "--delta", "1e-5", "--sampling-rate", "0.05",
                 "--steps", "200", "--accountant", accountant, "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert KEYS <= set(out)  # keys are a contract: kept, others may be added (pld_discretization)
    assert (out["delta"], out["sampling_rate"], out["steps"], out["accountant"]) == (1e-5, 0.05, 200, accountant)
    sigma = out["noise_multiplier"]
    assert out["epsilon"] == pytest.approx(_reference(sigma, 0.05, 200, 1e-5, accountant), rel=1e-6)
    assert out["epsilon"] <= 1.0
    assert _reference(sigma * 0.999, 0.05, 200, 1e-5, accountant) > 1.0
    assert sigma == pytest.approx(A.calibrate_noise_multiplier(1.0, 1e-5, 0.05, 200, accountant=accountant))


def test_pld_discretization_option_is_documented_tradeoff(capsys):
    base = ["privacy", "epsilon", "--noise-multiplier", "1.0", "--sampling-rate", "0.05",
            "--steps", "100", "--delta", "1e-5"]
    assert main(base) == 0
    fine = float(capsys.readouterr().out)
    assert main(base + ["--pld-discretization", "1e-2"]) == 0
    coarse = float(capsys.readouterr().out)
    assert coarse > fine  # coarser grid: pessimistic, never below


@pytest.mark.parametrize("bad", [
    ["--sampling-rate", "1.5"], ["--sampling-rate", "0"], ["--steps", "0"], ["--steps", "2.5"],
    ["--delta", "1"], ["--delta", "abc"], ["--noise-multiplier", "-1"], ["--noise-multiplier", "0"],
    ["--noise-multiplier", "inf"], ["--accountant", "moments"],
])
def test_bad_input_is_a_clear_usage_error(capsys, bad):
    argv = {"--noise-multiplier": "1.0", "--sampling-rate": "0.01", "--steps": "10", "--delta": "1e-5"}
    argv[bad[0]] = bad[1]
    flat = ["privacy", "epsilon"] + [x for kv in argv.items() for x in kv]
    with pytest.raises(SystemExit) as info:
        main(flat)
    assert info.value.code == 2
    assert bad[0] in capsys.readouterr().err


def test_missing_arguments_and_bare_privacy(capsys):
    with pytest.raises(SystemExit) as info:
        main(["privacy", "noise", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "10"])
    assert info.value.code == 2 and "--epsilon" in capsys.readouterr().err
    assert main(["privacy"]) == 2


@pytest.mark.parametrize("argv,accountant", [
    (["epsilon", "--noise-multiplier", "0.01", "--steps", "5000"], "rdp"),     # used to run for minutes
    (["epsilon", "--noise-multiplier", "1", "--steps", "100000000"], "rdp"),
    (["noise", "--epsilon", "10000", "--steps", "5000"], "rdp"),
    (["noise", "--epsilon", "5", "--steps", "50"], "pld"),
])
def test_extreme_inputs_say_which_accountant(capsys, argv, accountant):
    """Issue 13: PLD where it is cheap, else RDP with the reason, reported in the JSON (times: bench)."""
    code = main(["privacy", *argv, "--sampling-rate", "0.01", "--delta", "1e-5", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["accountant"] == accountant
    assert ("accountant_reason" in out) == (accountant == "rdp")
    sigma = out["noise_multiplier"]
    ref = A.dp_sgd_epsilon(sigma, 0.01, out["steps"], 1e-5, accountant=accountant,
                           pld_discretization=out.get("pld_discretization", 1e-4))
    assert out["epsilon"] == pytest.approx(ref, rel=1e-9)
