"""Logistic-regression / linear-SVM job parameters (the table every party validates against) and CLI options.

The command-line flags carry the prefix ``--lm-`` (linear model) so that they never replace GLVQ's
``--epochs`` / ``--clip`` / ``--lr`` (the parser resolves clashes by the last one added); ``--noise`` is
shared (the same choices and default everywhere).
"""
from __future__ import annotations

import argparse
from typing import Any

from dpfed.algorithms import dpsgd
from dpfed.algorithms.dpsgd.options import n_parties, noise_params, optimizer_params, private_param, schedule_params
from dpfed.algorithms.linear_models.defaults import DEFAULTS
from dpfed.algorithms.linear_models.plan import prepare_params
from dpfed.algorithms.params import EPSILON, MEMORY_CAP_BYTES, Param, ParamTable, arg_type, delta_param
from dpfed.core.errors import TaskRejected
from dpfed.data.encoding import encoded_dimension
from dpfed.data.schema import Schema

__all__ = ["PARAMS", "MAX_STEPS", "add_arguments", "params_from_args"]

#: DP-SGD steps T = epochs / sampling_rate at most.
MAX_STEPS = dpsgd.MAX_STEPS
#: Memory estimate of the training state: this many copies of the weights (model, sums, Adam moments, rows).
MEMORY_FACTOR = 16

PARAMS = ParamTable((
    EPSILON, delta_param(1e-5, positive=True),
    *schedule_params(DEFAULTS, {
        "epochs": "DP-SGD epochs E; T = E / q steps (default 10)",
        "sampling_rate": "Poisson sampling rate q (default 0.05; 1: noisy full-batch gradient descent)",
        "clip": "per-record gradient clipping norm C (default 1)"}),
    Param("count_fraction", float, DEFAULTS["count_fraction"], lo=0.0, lo_open=True, hi=0.5,
          help="share of epsilon spent on the noisy record count (default 0.01)"),
    *optimizer_params(DEFAULTS, {"lr": "learning rate (default 0.1, Adam)",
                                 "lr_decay": "SGD rate lr / (1 + decay * (t - 1) / T) (default 0)"}, lr_hi=1000.0),
    Param("l2", float, DEFAULTS["l2"], lo=0.0, hi=1e3, help="L2 regularisation of the weights (bias excluded)"),
    Param("huber", float, DEFAULTS["huber"], lo=0.0, lo_open=True, hi=100.0,
          help="linear SVM: smoothing h of the Huber hinge (Chaudhuri et al. 2011; default 0.5)"),
    private_param(DEFAULTS),
    *noise_params(DEFAULTS, "DP-SGD noise on a public grid with exact rounded-Gaussian noise (floating-point safe; "
                  "slower)", multiplier_hi=1e5),
), check=lambda p, schema: _check_params(p, schema))


def _check_params(p: dict[str, Any], schema: Schema | None) -> None:
    """Cross-checks: steps and memory caps, Adam's betas."""
    dpsgd.check_schedule(p, "linear-model")
    if schema is not None and schema.n_features > 0:
        k = schema.n_classes if schema.n_classes > 2 else 1
        floats = k * (encoded_dimension(schema) + 1)
        if 8 * MEMORY_FACTOR * floats > MEMORY_CAP_BYTES:
            raise TaskRejected(f"linear model of {floats} weights needs more than the memory cap "
                               f"{MEMORY_CAP_BYTES / 2**30:.0f} GiB")


_FLAGS = (("--lm-epochs", "epochs"), ("--lm-sampling-rate", "sampling_rate"), ("--lm-clip", "clip"),
          ("--lm-count-fraction", "count_fraction"), ("--lm-lr", "lr"), ("--lm-lr-decay", "lr_decay"),
          ("--lm-l2", "l2"), ("--lm-huber", "huber"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Command-line options of logistic-regression / linear-svm (shared), typed and ranged from :data:`PARAMS`."""
    for flag, key in _FLAGS:
        p.add_argument(flag, type=arg_type(PARAMS, key), default=DEFAULTS[key], dest=f"lm_{key}",
                       help=PARAMS.get(key).help)
    p.add_argument("--lm-optimizer", choices=dpsgd.OPTIMIZERS, default=DEFAULTS["optimizer"], dest="lm_optimizer",
                   help=PARAMS.get("optimizer").help)
    p.add_argument("--noise", choices=PARAMS.get("noise").choices, default="local", help=PARAMS.get("noise").help)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Job params from the parsed options, with the calibrated noise multiplier."""
    params: dict[str, Any] = {key: getattr(args, f"lm_{key}", DEFAULTS[key]) for _, key in _FLAGS}
    params.update(optimizer=getattr(args, "lm_optimizer", DEFAULTS["optimizer"]),
                  noise=getattr(args, "noise", "local"), parties=n_parties(getattr(args, "parties", 1)))
    delta = getattr(args, "delta", None)
    full = {**params, "epsilon": args.epsilon, "delta": 1e-5 if delta is None else delta}
    PARAMS.validate(full, name=getattr(args, "algorithm", "logistic-regression"))
    if getattr(args, "secure_aggregation", None) in ("on", True) and params["noise"] == "distributed":
        return params  # a secure job is planned by the parties' secure plan (no Gaussian calibration)
    return {k: v for k, v in prepare_params(full).items() if k not in ("epsilon", "delta")}
