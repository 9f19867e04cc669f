"""``dpfed privacy epsilon|noise``: the users' quick DP-SGD budget check.

Like TF Privacy's ``compute_dp_sgd_privacy``: Poisson sampling rate q, T steps, Gaussian noise
multiplier sigma, add/remove-one neighbours. PLD uses dp-accounting's default grid
(``dpfed.core.accounting.PLD_VALUE_DISCRETIZATION`` = 1e-4), so the epsilon printed equals
``PLDAccountant()``'s; ``--pld-discretization`` trades accuracy for speed.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

from dpfed.core import accounting
from dpfed.core.accountant_choice import AccountantChoice, choose_accountant

__all__ = ["add_commands"]


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return value


def _probability(text: str) -> float:
    value = _positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text!r}")
    return value


def _open_probability(text: str) -> float:
    value = _probability(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text!r}")
    return value


def _steps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sampling-rate", type=_probability, required=True, metavar="Q",
                   help="Poisson sampling probability per step, in (0, 1]")
    p.add_argument("--steps", type=_steps, required=True, metavar="T", help="number of steps")
    p.add_argument("--delta", type=_open_probability, required=True, metavar="D",
                   help="target delta, in (0, 1)")
    p.add_argument("--accountant", choices=("pld", "rdp"), default="pld",
                   help="privacy accountant (default: pld, the tighter)")
    p.add_argument("--pld-discretization", type=_positive_float,
                   default=accounting.PLD_VALUE_DISCRETIZATION, metavar="H",
                   help="PLD privacy-loss grid width (default %(default)g; coarser is faster "
                        "and more pessimistic)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``privacy epsilon`` and ``privacy noise``."""
    privacy = subparsers.add_parser("privacy", help="DP-SGD privacy accounting",
                                    description=__doc__.splitlines()[0])
    sub = privacy.add_subparsers(dest="privacy_command", metavar="{epsilon,noise}")
    privacy.set_defaults(func=lambda args: (privacy.print_help(), 2)[1])

    eps = sub.add_parser("epsilon", help="epsilon spent by DP-SGD with a given noise multiplier")
    eps.add_argument("--noise-multiplier", type=_positive_float, required=True, metavar="S",
                     help="Gaussian noise std / clipping norm, > 0 (0 would be non-private)")
    _common(eps)
    eps.set_defaults(func=_cmd_epsilon)

    noise = sub.add_parser("noise", help="smallest noise multiplier meeting (epsilon, delta)")
    noise.add_argument("--epsilon", type=_positive_float, required=True, metavar="E",
                       help="target epsilon")
    _common(noise)
    noise.set_defaults(func=_cmd_noise)


def _emit(args: argparse.Namespace, epsilon: float, sigma: float, primary: float, choice: AccountantChoice) -> int:
    if args.json:
        out = {"epsilon": epsilon, "noise_multiplier": sigma, "delta": args.delta,
               "sampling_rate": args.sampling_rate, "steps": args.steps, "accountant": choice.accountant}
        if choice.accountant == "pld":
            out["pld_discretization"] = choice.pld_discretization
        if choice.reason:
            out["accountant_reason"] = choice.reason
        print(json.dumps(out))
    else:
        if choice.reason:
            print(f"dpfed privacy: note: {choice.reason}", file=sys.stderr)
        print(repr(float(primary)))
    return 0


def _cmd_epsilon(args: argparse.Namespace) -> int:
    choice = choose_accountant(args.accountant, args.steps, noise_multiplier=args.noise_multiplier,
                               sampling_rate=args.sampling_rate, delta=args.delta,
                               pld_discretization=args.pld_discretization)
    eps = accounting.dp_sgd_epsilon(args.noise_multiplier, args.sampling_rate, args.steps,
                                    args.delta, accountant=choice.accountant,
                                    pld_discretization=choice.pld_discretization)
    return _emit(args, eps, args.noise_multiplier, eps, choice)


def _cmd_noise(args: argparse.Namespace) -> int:
    choice = choose_accountant(args.accountant, args.steps, epsilon=args.epsilon,
                               pld_discretization=args.pld_discretization)
    try:
        sigma = accounting.calibrate_noise_multiplier(
            args.epsilon, args.delta, args.sampling_rate, args.steps,
            accountant=choice.accountant, pld_discretization=choice.pld_discretization)
    except ValueError as exc:
        print(f"dpfed privacy noise: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    eps = accounting.dp_sgd_epsilon(sigma, args.sampling_rate, args.steps, args.delta,
                                    accountant=choice.accountant,
                                    pld_discretization=choice.pld_discretization)
    return _emit(args, eps, sigma, sigma, choice)
