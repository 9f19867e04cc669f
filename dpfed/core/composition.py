"""Composition of privacy events, and whether released events stay within a plan.

Sequential composition as a canonical multiset of atomic events (:func:`flatten`, :func:`compose`:
identical releases grouped into one ``SelfComposedDpEvent``, which keeps PLD composition cheap),
basic and advanced composition in closed form (Dwork & Roth 2014, Thm 3.16 and 3.20; Dwork, Rothblum
& Vadhan 2010), and the check that a party's released events are covered by the plan it was charged
for (:func:`within`, :func:`dominated`). No accountant here: :mod:`dpfed.core.accountants` turns
events into (epsilon, delta).
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import attr
import dp_accounting
from dp_accounting import dp_event as _dp_event_module
from dp_accounting.dp_event import DpEvent

from dpfed.core.event_json import event_from_json, event_to_json
from dpfed.core.events import EpsilonDeltaBoundDpEvent, ScalarDiscreteGaussianDpEvent

__all__ = ["flatten", "from_counts", "compose", "sequential_basic", "advanced_composition", "dominated",
           "within"]


def flatten(events: Sequence[DpEvent]) -> Counter[Any]:
    """Multiset of atomic events (canonical JSON -> count) of a sequential composition.

    ``ComposedDpEvent`` and ``SelfComposedDpEvent`` are unrolled (exactly how the accountants
    treat them), so repeated releases of the same mechanism collapse into one count.
    """
    counts: Counter[Any] = Counter()

    def visit(ev: DpEvent, mult: int) -> None:
        if isinstance(ev, dp_accounting.ComposedDpEvent):
            for sub in ev.events:
                visit(sub, mult)
        elif isinstance(ev, dp_accounting.SelfComposedDpEvent):
            if int(ev.count) != ev.count or ev.count < 0:
                raise ValueError(f"SelfComposedDpEvent.count must be a non-negative int, got {ev.count!r}")
            if ev.count:
                visit(ev.event, mult * int(ev.count))
        elif isinstance(ev, dp_accounting.NoOpDpEvent):
            return
        elif isinstance(ev, DpEvent):
            counts[event_to_json(ev)] += mult
        else:
            raise TypeError(f"expected a dp_accounting DpEvent, got {type(ev).__name__}")

    for e in events:
        visit(e, 1)
    return counts


def from_counts(counts: Counter[Any] | dict[Any, int]) -> DpEvent:
    """The canonical event for a multiset from :func:`flatten` (sorted, grouped)."""
    parts = []
    for key in sorted(counts):
        n = int(counts[key])
        if n <= 0:
            continue
        ev = event_from_json(key)
        parts.append(ev if n == 1 else dp_accounting.SelfComposedDpEvent(ev, n))
    if not parts:
        return dp_accounting.NoOpDpEvent()
    if len(parts) == 1:
        return parts[0]
    return dp_accounting.ComposedDpEvent(parts)


def compose(events: Sequence[DpEvent]) -> DpEvent:
    """Sequential (adaptive) composition of ``events``, identical events grouped.

    The result is canonical: the same multiset of releases in any order gives the same
    event, which keeps PLD fast (one ``self_compose`` per distinct mechanism).
    """
    return from_counts(flatten([e for e in events if e is not None]))



def sequential_basic(pairs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Basic sequential composition: epsilons and deltas add (Dwork & Roth 2014, Thm 3.16)."""
    eps_total, delta_total = 0.0, 0.0
    for eps_i, delta_i in pairs:
        if not (eps_i >= 0 and 0 <= delta_i <= 1):
            raise ValueError(f"each pair needs epsilon >= 0 and delta in [0, 1], got {(eps_i, delta_i)!r}")
        eps_total += eps_i
        delta_total += delta_i
    return eps_total, min(delta_total, 1.0)


def advanced_composition(epsilon: float, delta: float, k: int,
                         delta_slack: float) -> tuple[float, float]:
    """k-fold adaptive composition of (epsilon, delta)-DP mechanisms.

    Dwork, Rothblum & Vadhan 2010 (Dwork & Roth 2014, Thm 3.20): for any delta' > 0 the
    composition is (eps', k*delta + delta')-DP with
    eps' = sqrt(2 k ln(1/delta')) * eps + k * eps * (e^eps - 1).
    """
    if not (epsilon >= 0 and 0 <= delta <= 1 and 0 < delta_slack < 1):
        raise ValueError("need epsilon >= 0, delta in [0, 1], delta_slack in (0, 1)")
    if int(k) != k or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    eps_prime = (math.sqrt(2.0 * k * math.log(1.0 / delta_slack)) * epsilon
                 + k * epsilon * math.expm1(epsilon))
    return eps_prime, min(k * delta + delta_slack, 1.0)


# --------------------------------------------------------------------------- within a plan

def _pure_epsilon(ev: DpEvent) -> Fraction | None:
    """The exact pure-DP epsilon of a pure mechanism's event (None: not pure or unknown)."""
    if isinstance(ev, dp_accounting.LaplaceDpEvent) and ev.noise_multiplier > 0:
        return 1 / Fraction(ev.noise_multiplier)
    if isinstance(ev, _dp_event_module.DiscreteLaplaceDpEvent):
        return Fraction(ev.noise_parameter) * int(ev.sensitivity)
    if isinstance(ev, EpsilonDeltaBoundDpEvent) and ev.delta == 0:
        return Fraction(ev.epsilon)
    return None


def dominated(got: DpEvent, planned: DpEvent) -> bool:
    """True when ``got`` is at least as private as ``planned`` (its privacy curve lies below), by
    exact comparison of parameters: more noise or a smaller shift of the same mechanism; any
    pure eps-DP event below ``DiscreteLaplaceDpEvent(e, 1)`` (the binary randomized-response pair,
    which dominates every e-DP mechanism, Kairouz, Oh & Viswanath 2015) or below
    ``EpsilonDeltaBoundDpEvent(e, d)`` when eps <= e; the same Poisson rate around a dominated event."""
    if event_to_json(got) == event_to_json(planned):
        return True
    G, P = type(got), type(planned)
    if P is EpsilonDeltaBoundDpEvent or (P is _dp_event_module.DiscreteLaplaceDpEvent and planned.sensitivity == 1):
        eps = _pure_epsilon(got)
        cap = Fraction(planned.epsilon) if P is EpsilonDeltaBoundDpEvent else _pure_epsilon(planned)
        if eps is not None and cap is not None and eps <= cap:
            return True
        if P is EpsilonDeltaBoundDpEvent and G is EpsilonDeltaBoundDpEvent:
            return bool(got.epsilon <= planned.epsilon and got.delta <= planned.delta)
    if G is not P:
        return False
    if G is dp_accounting.GaussianDpEvent or G is dp_accounting.LaplaceDpEvent:
        return bool(got.noise_multiplier >= planned.noise_multiplier)
    if G is _dp_event_module.DiscreteLaplaceDpEvent:
        return bool(got.noise_parameter <= planned.noise_parameter and got.sensitivity <= planned.sensitivity)
    if G is ScalarDiscreteGaussianDpEvent:
        return bool(got.sigma >= planned.sigma and got.sensitivity <= planned.sensitivity)
    if G is dp_accounting.PoissonSampledDpEvent:
        return bool(got.sampling_probability == planned.sampling_probability and dominated(got.event, planned.event))
    return False


def _same_event(a: Any, b: Any) -> bool:
    """``a`` and ``b`` are the same event: the same classes all the way down and equal field values
    (numbers compared as numbers, a bool only with a bool). False when unsure."""
    if isinstance(a, DpEvent) or isinstance(b, DpEvent):
        if type(a) is not type(b) or not attr.has(type(a)):
            return False
        return all(_same_event(getattr(a, f.name), getattr(b, f.name)) for f in attr.fields(type(a)))
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(_same_event(x, y) for x, y in zip(a, b, strict=True)))
    ka, kb = _PLAIN_KINDS.get(type(a)), _PLAIN_KINDS.get(type(b))
    return ka is not None and ka == kb and bool(a == b)


_PLAIN_KINDS = {bool: "bool", int: "number", float: "number", str: "str", type(None): "none"}


def within(events: Sequence[DpEvent], planned: DpEvent) -> list[DpEvent]:
    """The releases among ``events`` that the plan does not cover (empty: all within ``planned``).

    Both sides are flattened into multisets of atomic releases; every reported release must be
    matched to its own planned release that :func:`dominated` says covers it (exact matches first,
    then a covering one). Sound: a match found is a valid injection of releases into the plan.
    A single release equal to the plan (field by field, same classes) is within it without flattening.
    """
    events = list(events)
    if len(events) == 1 and _same_event(events[0], planned):
        return []
    got, plan = flatten(events), flatten([planned])
    left: list[DpEvent] = []
    for key, n in sorted(got.items()):
        take = min(n, plan.get(key, 0))
        plan[key] -= take
        n -= take
        ev = event_from_json(key)
        while n > 0:
            covers = [k for k, m in sorted(plan.items()) if m > 0 and dominated(ev, event_from_json(k))]
            if not covers:
                left.extend([ev] * n)
                break
            k = covers[0]
            take = min(n, plan[k])
            plan[k] -= take
            n -= take
    return left
