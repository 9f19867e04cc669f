"""GLVQ / GMLVQ job parameters (the table every party validates against) and command-line options."""
from __future__ import annotations

import argparse
from typing import Any

from dpfed.algorithms import dpsgd
from dpfed.algorithms.dpsgd.options import n_parties, noise_params, optimizer_params, private_param, schedule_params
from dpfed.algorithms.lvq.defaults import DEFAULTS
from dpfed.algorithms.lvq.plan import prepare_params
from dpfed.algorithms.params import EPSILON, MEMORY_CAP_BYTES, Param, ParamTable, arg_type, delta_param
from dpfed.core.errors import TaskRejected
from dpfed.data.schema import Schema

__all__ = ["PARAMS", "MAX_STEPS", "MEMORY_FACTOR", "add_arguments", "params_from_args"]

#: DP-SGD steps T = epochs / sampling_rate at most (the paper's settings: 5,000).
MAX_STEPS = dpsgd.MAX_STEPS
#: Memory estimate of one party's training state: MEMORY_FACTOR copies (model, gradient sums, optimiser
#: moments, per-chunk gradients) of the model's floats, prototypes k*ppc*d plus Omega rank*d.
MEMORY_FACTOR = 16

PARAMS = ParamTable((
    EPSILON, delta_param(1e-5, positive=True),
    *schedule_params(DEFAULTS, {"epochs": "DP-SGD epochs E; T = E / q steps (default 50)",
                                "sampling_rate": "Poisson sampling rate q (default 0.01)",
                                "clip": "per-record gradient clipping norm C (paper: 0.5)"}),
    *optimizer_params(DEFAULTS, {"lr": "learning rate (default 0.05)",
                                 "lr_decay": "SGD rate lr / (1 + decay * t / T) (default 9)"}, lr_hi=100.0),
    Param("init", str, DEFAULTS["init"], choices=("gaussian", "laplace", "zero"),
          help="prototype initialisation mechanism (paper: laplace)"),
    Param("init_fraction", float, DEFAULTS["init_fraction"], lo=0.0, lo_open=True, hi=1.0, hi_open=True,
          help="epsilon_1 / epsilon (paper: 0.2)"),
    Param("count_fraction", float, DEFAULTS["count_fraction"], lo=0.0, lo_open=True, hi=1.0, hi_open=True,
          help="share of the initialisation budget spent on the class counts"),
    Param("init_center", str, DEFAULTS["init_center"], choices=("mid", "lower"),
          help="public centre of the initialisation sums: box centre, or lower corner (sparse data)"),
    Param("init_clip", float, DEFAULTS["init_clip"], lo=0.0, hi=1e6,
          help="L2-clip the centred records to this norm for the Gaussian initialisation (0: none)"),
    Param("prototypes_per_class", int, DEFAULTS["prototypes_per_class"], lo=1, cap=100,
          help="prototypes per class"),
    Param("omega_rank", int, DEFAULTS["omega_rank"], lo=0, cap=100_000, help="GMLVQ: rows of Omega (0 = full, d)"),
    Param("omega_scale", float, DEFAULTS["omega_scale"], lo=0.0, lo_open=True, hi=1e3,
          help="GMLVQ: Frobenius norm of Omega (sets the clip budget split prototypes/Omega)"),
    Param("phi", str, DEFAULTS["phi"], choices=("identity", "logistic"), help="the GLVQ cost's phi"),
    Param("beta", float, DEFAULTS["beta"], lo=0.0, lo_open=True, hi=1e3, help="slope of the logistic phi"),
    private_param(DEFAULTS),
    Param("allow_missing_classes", bool, DEFAULTS["allow_missing_classes"],
          help="accepted for compatibility: a party lacking a class always answers (a count of 0 plus noise), "
               "since a refusal would reveal the absence"),
    *noise_params(DEFAULTS, "DP-SGD noise on a public grid with exact rounded-Gaussian noise (floating-point safe; "
                  "slower per step for a full Omega). Initialisation noise is always exact", multiplier_hi=1e4),
), check=lambda p, schema: _check_params(p, schema))


def _check_params(p: dict[str, Any], schema: Schema | None) -> None:
    """Cross-checks: steps and memory caps, Adam's betas, the Laplace initialisation without clipping."""
    dpsgd.check_schedule(p, "LVQ")
    if p["init"] == "laplace" and p["init_clip"] > 0:
        raise TaskRejected("LVQ parameter 'init_clip' must be 0 with init laplace (it applies to the Gaussian "
                           "initialisation only)")
    if schema is not None and schema.n_features > 0:
        d, k = schema.n_features, max(schema.n_classes, 1)
        rank = min(p["omega_rank"] or d, d)
        floats = k * p["prototypes_per_class"] * d + rank * d
        need = 8 * MEMORY_FACTOR * floats
        if need > MEMORY_CAP_BYTES:
            raise TaskRejected(f"LVQ model of {floats} floats (classes {k} x prototypes_per_class "
                               f"{p['prototypes_per_class']} x d {d} + omega_rank {rank} x d) needs about "
                               f"{need / 2**30:.1f} GiB, more than the cap {MEMORY_CAP_BYTES / 2**30:.0f} GiB")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Command-line options of glvq / gmlvq (shared), typed and ranged from :data:`PARAMS`."""
    def num(flag: str, key: str, **kw: Any) -> None:
        p.add_argument(flag, type=arg_type(PARAMS, key), default=DEFAULTS[key], help=PARAMS.get(key).help, **kw)

    def choice(flag: str, key: str) -> None:
        p.add_argument(flag, choices=PARAMS.get(key).choices, default=DEFAULTS[key], help=PARAMS.get(key).help)

    num("--epochs", "epochs")
    num("--sampling-rate", "sampling_rate")
    num("--clip", "clip")
    choice("--noise", "noise")
    num("--lr", "lr")
    num("--lr-decay", "lr_decay")
    choice("--optimizer", "optimizer")
    choice("--init", "init")
    num("--init-fraction", "init_fraction")
    num("--count-fraction", "count_fraction")
    choice("--init-center", "init_center")
    num("--init-clip", "init_clip")
    num("--prototypes-per-class", "prototypes_per_class")
    num("--omega-rank", "omega_rank")
    num("--omega-scale", "omega_scale")
    choice("--phi", "phi")
    num("--beta", "beta")
    p.add_argument("--allow-missing-classes", action="store_true", help=PARAMS.get("allow_missing_classes").help)
    p.add_argument("--exact-noise", action="store_true", help=PARAMS.get("exact_noise").help)


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Job params from the parsed options, with the calibrated noise multiplier."""
    params = {"epochs": args.epochs, "sampling_rate": args.sampling_rate, "clip": args.clip, "noise": args.noise,
              "lr": args.lr, "lr_decay": args.lr_decay, "optimizer": args.optimizer, "init": args.init,
              "init_fraction": args.init_fraction, "count_fraction": args.count_fraction,
              "init_center": args.init_center, "init_clip": args.init_clip,
              "prototypes_per_class": args.prototypes_per_class, "omega_rank": args.omega_rank,
              "omega_scale": args.omega_scale, "phi": args.phi, "beta": args.beta,
              "allow_missing_classes": bool(args.allow_missing_classes), "parties": n_parties(getattr(args, "parties", 1)),
              "exact_noise": bool(getattr(args, "exact_noise", False))}
    delta = getattr(args, "delta", None)
    PARAMS.validate({**params, "epsilon": args.epsilon, "delta": 1e-5 if delta is None else delta},
                    name=getattr(args, "algorithm", "lvq"))
    full = prepare_params({**params, "epsilon": args.epsilon, "delta": 1e-5 if delta is None else delta})
    return {k: v for k, v in full.items() if k not in ("epsilon", "delta")}
