"""Cheap bounds that decide a privacy question before any expensive PLD: every offer is cheap to decide.

A party decides an offer by asking "is this job's event within the stated epsilon, and within my
ledger's limit?". Answered on the PLD grid made for the stated epsilon or the limit, the question costs
minutes and gigabytes when the real epsilon is far larger (an offer with noise multiplier 0.05 has a
real epsilon near 1300 against a grid made for 1). Two cheap bounds answer it first:

* an upper bound, RDP (Mironov 2017; milliseconds): at most the limit, so the event is within it
  (and the PLD that decides exactly is small, :func:`dpfed.core.accountants.guarded_grid`);
* a proven LOWER bound (:func:`epsilon_lower_bound`): the optimistic PLD (privacy buckets rounded
  down, tails dropped, Meiser & Mohammadi 2018; dp-accounting's ``pessimistic_estimate=False``)
  of the releases it knows, the others left out, on a coarse grid. Above the limit, the exact
  answer is "exceeds" as well, whatever grid decides it: refuse at once.

Why leaving releases out, or keeping only k of n repetitions, gives a lower bound: the outputs of
the part are a function of the outputs of the whole (post-processing), so the part is at least as
private. Why the optimistic PLD does: each privacy loss is rounded down and truncated mass dropped,
so its hockey-stick divergence (delta at every epsilon) is at most the mechanism's, and composition
keeps that order (Meiser & Mohammadi 2018, Thm. 5; Koskela et al. 2020). Only a few repetitions of
each release are composed (k = 1, then 8), on a grid of the limit / (16 k), so the PLD stays small and
its rounding error below a sixteenth of the limit: that settles the costly case, a tiny noise multiplier,
where one step is already far over any limit. What it leaves undecided is near the limit, where the
exact PLD is small.
"""
from __future__ import annotations

import math
from typing import Any

import dp_accounting
from dp_accounting.dp_event import DpEvent
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpfed.core.accountants import PLD_VALUE_DISCRETIZATION, guarded_grid, loss_scale, make_accountant, relation
from dpfed.core.composition import flatten, from_counts
from dpfed.core.event_json import event_from_json

__all__ = ["epsilon_lower_bound", "exceeds", "REPETITIONS"]

#: Repetitions of each release composed in the lower bound (after every release once).
REPETITIONS = 8
_ADD_REMOVE = "add_remove"


def _optimistic_pld(ev: DpEvent, neighbouring: str, grid: float) -> Any:
    """The optimistic PLD of one release (a lower estimate of its privacy curve), or None when unknown
    (the release is then left out: still a lower bound)."""
    opts: dict[str, Any] = {"pessimistic_estimate": False, "value_discretization_interval": grid,
                            "use_connect_dots": False}
    inner, q = ev, 1.0
    if isinstance(ev, dp_accounting.PoissonSampledDpEvent):
        inner, q = ev.event, float(ev.sampling_probability)
        if not 0 < q <= 1:
            return None
    if isinstance(inner, dp_accounting.GaussianDpEvent) and inner.noise_multiplier > 0:
        return pld_lib.from_gaussian_mechanism(float(inner.noise_multiplier), sampling_prob=q,
                                               neighboring_relation=relation(neighbouring), **opts)
    if neighbouring != _ADD_REMOVE:
        return None
    if isinstance(inner, dp_accounting.LaplaceDpEvent) and inner.noise_multiplier > 0:
        return pld_lib.from_laplace_mechanism(float(inner.noise_multiplier), sampling_prob=q, **opts)
    if isinstance(inner, dp_accounting.dp_event.DiscreteLaplaceDpEvent) and inner.noise_parameter > 0:
        return pld_lib.from_discrete_laplace_mechanism(float(inner.noise_parameter), sensitivity=int(inner.sensitivity),
                                                       sampling_prob=q, **opts)
    return None


def _lower_at(counts: dict[str, int], delta: float, neighbouring: str, grid: float) -> float:
    """Optimistic PLD epsilon of the releases ``counts`` (JSON -> count) on ``grid`` (a lower bound)."""
    total = None
    for key, n in counts.items():
        one = _optimistic_pld(event_from_json(key), neighbouring, grid)
        if one is None:
            continue
        one = one.self_compose(n) if n > 1 else one
        total = one if total is None else total.compose(one)
    if total is None:
        return 0.0
    eps = float(total.get_epsilon_for_delta(delta))
    return eps if math.isfinite(eps) else 0.0


def epsilon_lower_bound(event: DpEvent, delta: float, *, neighbouring: str = _ADD_REMOVE,
                        above: float = math.inf) -> float:
    """A proven lower bound on the epsilon at ``delta`` of ``event`` (module docstring), 0 when none is
    known: the optimistic PLD of every release once, then of up to :data:`REPETITIONS` repetitions of
    each, on a grid of ``above`` / (16 k) (or, without ``above``, the grid :func:`guarded_grid` gives the
    k releases), so that each PLD stays small; stops as soon as the bound exceeds ``above``."""
    if not 0 < delta < 1:
        return 0.0
    flat = {k: int(n) for k, n in flatten([event]).items()}
    best = 0.0
    for k in (1, REPETITIONS):
        part = {key: min(n, k) for key, n in flat.items()}
        grid = guarded_grid(from_counts(part), delta, neighbouring, PLD_VALUE_DISCRETIZATION)
        if math.isfinite(above):
            grid = max(grid, above / (16.0 * k))
        try:
            best = max(best, _lower_at(part, delta, neighbouring, grid))
        except (OverflowError, FloatingPointError, ValueError, MemoryError):
            pass  # a bound that cannot be computed is no bound; the others still hold
        if best > above or k >= max(flat.values(), default=0):
            break
    return best


def exceeds(event: DpEvent, delta: float, limit: float, *, neighbouring: str = _ADD_REMOVE) -> float | None:
    """A proven lower bound on ``event``'s epsilon at ``delta`` when it is above ``limit`` (refuse: the
    exact answer is above it too), else None (undecided: ask the accountant, whose PLD is then small).
    None at once when the RDP bound of the whole event is within the limit."""
    scale, complete = loss_scale(event, delta, neighbouring), _all_rdp(event, neighbouring)
    if complete and scale <= limit:
        return None
    low = epsilon_lower_bound(event, delta, neighbouring=neighbouring, above=limit)
    return low if low > limit else None


def _all_rdp(event: DpEvent, neighbouring: str) -> bool:
    """Whether the RDP accountant covers every release of ``event`` (then :func:`loss_scale` is an upper bound)."""
    acc = make_accountant("rdp", neighbouring)
    return all(acc.supports(event_from_json(key)) for key in flatten([event]))
