"""Which accountant, and which PLD grid, answers a DP-SGD question within seconds.

The PLD accountant (dp-accounting) is tight but its cost grows with the privacy-loss range divided by
the grid width and with the number of steps: at epsilon 10^4, at noise multiplier 0.01 or at 10^8
steps it runs for minutes and gigabytes. :func:`choose_accountant` keeps PLD where it is cheap, with
the grid of :func:`dpfed.core.accounting.pld_grid` for the epsilon involved (the one rule, shared with
calibration and the ledger; never finer than the requested grid), and otherwise falls back to RDP
(Mironov 2017; an upper bound, looser), saying why.
"""
from __future__ import annotations

from dataclasses import dataclass

from dpfed.core import accounting

__all__ = ["AccountantChoice", "choose_accountant", "PLD_MAX_EPSILON", "PLD_MAX_STEPS", "RELATIVE_GRID"]

#: PLD is used only for epsilons (the target, or RDP's estimate) at most this large ...
PLD_MAX_EPSILON = 20.0
#: ... and at most this many steps.
PLD_MAX_STEPS = 1_000_000
#: PLD grid width relative to the epsilon, at most (the rule is :func:`accounting.pld_grid`).
RELATIVE_GRID = accounting.RELATIVE_GRID


@dataclass(frozen=True)
class AccountantChoice:
    """``accountant`` ("pld" or "rdp"), the PLD grid, and why RDP was used instead of PLD (or "")."""

    accountant: str
    pld_discretization: float
    reason: str = ""


def choose_accountant(requested: str, steps: int, *, epsilon: float | None = None,
                      noise_multiplier: float | None = None, sampling_rate: float | None = None,
                      delta: float | None = None,
                      pld_discretization: float = accounting.PLD_VALUE_DISCRETIZATION) -> AccountantChoice:
    """The accountant for a question about ``steps`` DP-SGD steps: with a target ``epsilon`` (calibration)
    or a ``noise_multiplier`` (whose RDP epsilon at ``sampling_rate``, ``delta`` is the estimate)."""
    if requested == "rdp":
        return AccountantChoice("rdp", pld_discretization)
    if steps > PLD_MAX_STEPS:
        return AccountantChoice("rdp", pld_discretization,
                                f"PLD composition of more than {PLD_MAX_STEPS} steps is slow; RDP used")
    if epsilon is None:
        if noise_multiplier is None or sampling_rate is None or delta is None:
            raise ValueError("choose_accountant needs a target epsilon or the noise multiplier, rate and delta")
        epsilon = accounting.dp_sgd_epsilon(noise_multiplier, sampling_rate, steps, delta, accountant="rdp")
    if not epsilon <= PLD_MAX_EPSILON:
        return AccountantChoice("rdp", pld_discretization,
                                f"epsilon {epsilon:.4g} > {PLD_MAX_EPSILON:g} is beyond PLD's cheap range; RDP used")
    return AccountantChoice("pld", max(pld_discretization, accounting.pld_grid(epsilon)))
