"""``dpfed job submit --param`` overrides: a job whose epochs are overridden spends what it asks for.

Before, ``--param epochs=5`` replaced the epochs after the options' noise multiplier had been calibrated for
the default 50 epochs: the job carried ~2x the noise its epsilon needed (a GMLVQ job at epsilon 1 was charged
0.47). The spend is checked with dp_accounting's own PLD accountant on the DP-SGD steps built here."""
from __future__ import annotations

import argparse

import dp_accounting
import pytest

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.lvq.plan import privacy_plan
from dpfed.cli.job_params import parse_param_overrides, with_overrides


def _options(algorithm: str) -> dict:
    algo = get_algorithm(algorithm)
    parser = argparse.ArgumentParser(conflict_handler="resolve")
    algo.add_arguments(parser)
    args = parser.parse_args([])
    ns = argparse.Namespace(**{**vars(args), "epsilon": 1.0, "delta": 1e-5, "parties": 3, "algorithm": algorithm})
    return {"epsilon": 1.0, "delta": 1e-5, **algo.params_from_args(ns)}


@pytest.mark.parametrize("algorithm", ["gmlvq", "glvq"])
def test_overriding_epochs_recalibrates_the_noise_to_the_target(algorithm):
    params = _options(algorithm)
    assert "noise_multiplier" in params  # calibrated for the default epochs
    final = with_overrides(params, parse_param_overrides(["epochs=5", "sampling_rate=0.02"]))
    plan = privacy_plan(final)
    assert plan.steps == 250
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(plan.init_event)
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.02, dp_accounting.GaussianDpEvent(plan.noise_multiplier)), 250))
    eps = acc.get_epsilon(1e-5)
    assert 0.99 <= eps <= 1.0 + 1e-6, eps  # spends its target: neither over nor far under
    assert "noise_multiplier" not in final  # each party calibrates it from the final params


def test_an_override_that_changes_nothing_or_names_the_multiplier_keeps_it():
    params = _options("gmlvq")
    same = with_overrides(params, parse_param_overrides([f"epochs={params['epochs']}"]))
    assert same["noise_multiplier"] == params["noise_multiplier"]
    mine = with_overrides(params, parse_param_overrides(["epochs=5", "noise_multiplier=3"]))
    assert mine["noise_multiplier"] == 3


def test_a_malformed_param_is_one_line():
    assert parse_param_overrides(["epochs"]) == "--param needs KEY=VALUE, got 'epochs'"
