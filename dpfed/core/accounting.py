"""Privacy accounting of dpfed, one import for its callers: compose ``DpEvent``s and convert them to
(epsilon, delta), calibrate noise, serialise events.

The pieces live in modules named for what they hold, as dp-accounting keeps ``dp_event``,
accountants and calibration apart:

================================  =====================================================================
:mod:`dpfed.core.events`          dpfed's event classes and the distributed discrete Gaussian's RDP bound
:mod:`dpfed.core.event_json`      the canonical, exact JSON of events (what ledgers store)
:mod:`dpfed.core.composition`     composition (canonical multisets, basic, advanced) and plan coverage
:mod:`dpfed.core.accountants`     PLD / RDP accountants, epsilon, delta, the PLD grid rule
:mod:`dpfed.core.rdp_accountant`  dp-accounting's RDP accountant extended to dpfed's events
:mod:`dpfed.core.calibration`     noise calibration (never overshoots its target), DP-SGD events
:mod:`dpfed.core.offer_cost`      cheap bounds that decide an offer before any expensive PLD
================================  =====================================================================
"""
from __future__ import annotations

from dp_accounting.dp_event import DpEvent

from dpfed.core.accountants import (
    MAX_PLD_STEPS,
    PLD_MAX_GRID,
    PLD_VALUE_DISCRETIZATION,
    RELATIVE_GRID,
    Accountant,
    AccountingError,
    Neighbouring,
    delta,
    epsilon,
    guarded_grid,
    loss_scale,
    make_accountant,
    parallel_epsilon,
    pld_grid,
)
from dpfed.core.calibration import (
    MAX_CALIBRATION_EVALUATIONS,
    calibrate,
    calibrate_noise_multiplier,
    dp_sgd_epsilon,
    dp_sgd_event,
    gaussian_delta,
    gaussian_noise_multiplier,
)
from dpfed.core.composition import (
    advanced_composition,
    compose,
    dominated,
    flatten,
    from_counts,
    sequential_basic,
    within,
)
from dpfed.core.event_json import event_from_json, event_to_json
from dpfed.core.offer_cost import epsilon_lower_bound, exceeds
from dpfed.core.events import (
    DistributedDiscreteGaussianDpEvent,
    EpsilonDeltaBoundDpEvent,
    ScalarDiscreteGaussianDpEvent,
)

__all__ = [
    "Neighbouring", "Accountant", "PLD_VALUE_DISCRETIZATION", "AccountingError",
    "make_accountant", "pld_grid", "RELATIVE_GRID", "PLD_MAX_GRID", "epsilon", "delta", "compose", "flatten",
    "from_counts", "parallel_epsilon", "sequential_basic", "advanced_composition", "dp_sgd_event", "dp_sgd_epsilon",
    "calibrate", "calibrate_noise_multiplier", "gaussian_noise_multiplier", "gaussian_delta",
    "MAX_CALIBRATION_EVALUATIONS", "within", "dominated", "event_to_json", "event_from_json", "DpEvent",
    "EpsilonDeltaBoundDpEvent", "ScalarDiscreteGaussianDpEvent", "DistributedDiscreteGaussianDpEvent",
    "MAX_PLD_STEPS", "loss_scale", "guarded_grid", "epsilon_lower_bound", "exceeds",
]
