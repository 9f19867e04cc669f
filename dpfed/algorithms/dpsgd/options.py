"""The job parameters every DP-SGD learner shares, ranged once: the schedule (epochs E, Poisson rate q, clip norm
C; Abadi et al. 2016, Alg. 1) and noise placement, the optimiser, the noise options, ``private``. A learner gives
its defaults and the help texts that name them, and lists these groups in its own table (order kept)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.dpsgd.optimizer import OPTIMIZERS
from dpfed.algorithms.params import Param

__all__ = ["schedule_params", "optimizer_params", "noise_params", "private_param", "n_parties"]

NOISE_HELP = ("local: full noise per party; distributed: noise shares whose sum carries the central noise "
              "(under secure aggregation, or simulation only without it)")


def schedule_params(defaults: Mapping[str, Any], helps: Mapping[str, str]) -> tuple[Param, ...]:
    """``epochs``, ``sampling_rate``, ``clip`` (help texts from ``helps``), ``noise``, ``parties``."""
    return (
        Param("epochs", float, defaults["epochs"], lo=0.0, lo_open=True, hi=10_000.0, help=helps["epochs"]),
        Param("sampling_rate", float, defaults["sampling_rate"], lo=0.0, lo_open=True, hi=1.0,
              help=helps["sampling_rate"]),
        Param("clip", float, defaults["clip"], lo=0.0, lo_open=True, hi=1e6, help=helps["clip"]),
        Param("noise", str, defaults["noise"], choices=("local", "distributed"), help=NOISE_HELP),
        Param("parties", int, defaults["parties"], lo=1, hi=100_000, help="number of parties (distributed noise)"),
    )


def optimizer_params(defaults: Mapping[str, Any], helps: Mapping[str, str], *, lr_hi: float) -> tuple[Param, ...]:
    """``lr`` (at most ``lr_hi``), ``lr_decay`` (help texts from ``helps``), ``optimizer``, ``adam_betas``."""
    return (
        Param("lr", float, defaults["lr"], lo=0.0, lo_open=True, hi=lr_hi, help=helps["lr"]),
        Param("lr_decay", float, defaults["lr_decay"], lo=0.0, hi=1e6, help=helps["lr_decay"]),
        Param("optimizer", str, defaults["optimizer"], choices=OPTIMIZERS, help="optimiser"),
        Param("adam_betas", list, defaults["adam_betas"], help="Adam's (beta1, beta2), each in [0, 1)"),
    )


def private_param(defaults: Mapping[str, Any]) -> Param:
    """``private``: False only for a local estimator's non-private baseline."""
    return Param("private", bool, defaults["private"], help="False only inside a local estimator, never at a party")


def noise_params(defaults: Mapping[str, Any], exact_help: str, *, multiplier_hi: float) -> tuple[Param, ...]:
    """``exact_noise`` (help ``exact_help``), ``noise_multiplier`` (at most ``multiplier_hi``), then the secure
    aggregation parameters (:mod:`dpfed.algorithms.secure_noise`) with the rounding option."""
    return (
        Param("exact_noise", bool, defaults["exact_noise"], help=exact_help),
        Param("noise_multiplier", float, None, lo=0.05, hi=multiplier_hi, optional=True,
              help="DP-SGD noise multiplier (calibrated from epsilon when absent)"),
        *sn.SECURE_PARAMS,
        sn.SECURE_ROUNDING_PARAM,
    )


def n_parties(parties: Any) -> int:
    """``--parties`` is a count in ``dpfed simulate`` and a list of names in ``dpfed job submit``."""
    if isinstance(parties, (list, tuple)):
        return max(len(parties), 1)
    return int(parties or 1)
