"""Privacy accounting: compose ``DpEvent``s and convert them to (epsilon, delta).

Tight accounting is delegated to Google's dp-accounting (PLD: Meiser & Mohammadi 2018,
Doroshenko et al. 2022 "Connect the dots"; RDP: Mironov 2017, Mironov-Talwar-Zhang 2019).
This module adds only what dp-accounting lacks: an explicit neighbouring relation by name,
canonical grouping of identical events, basic / parallel / advanced composition
(Dwork & Roth 2014, Thm 3.16 and 3.20; Dwork, Rothblum & Vadhan 2010), an exact JSON
form of events, and a noise calibration that never overshoots its target.

PLD discretisation: ``PLD_VALUE_DISCRETIZATION = 1e-4`` (dp-accounting's own default) for every
epsilon below 10. It makes our numbers identical to ``PLDAccountant()``'s, costs about 0.3 s for
DP-SGD with T = 5000 steps, and is pessimistic (an upper bound); a coarser grid (1e-3) is ~7x faster
but looser by ~0.2 %, and is used (or 10x the grid, if coarser) only to find a starting bracket
during calibration. The cost grows
with the privacy-loss range over the grid width, so :func:`pld_grid` (THE rule, used by
:func:`calibrate`, the ledger and ``choose_accountant``) widens the grid with the epsilon of the
question (a target or a limit): powers of two times 1e-4, nested, so a coarser grid is the more
pessimistic one and a plan calibrated for epsilon is charged on the very same grid by a ledger whose
limit is epsilon.
"""
from __future__ import annotations

from dpfed.core.errors import DpfedError

import json
from fractions import Fraction
import math
from collections import Counter
from typing import Any, Callable, Literal, Sequence

import attr
import dp_accounting
from dp_accounting import dp_event as _dp_event_module
from dp_accounting import privacy_accountant
from dp_accounting.dp_event import DpEvent
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpfed.core.distributed_noise import DistributedDiscreteGaussianDpEvent, event_invalid, event_rdp
from dpfed.core.memo import shared_cache

__all__ = [
    "Neighbouring", "Accountant", "PLD_VALUE_DISCRETIZATION", "AccountingError",
    "make_accountant", "pld_grid", "RELATIVE_GRID", "PLD_MAX_GRID", "epsilon", "delta", "compose", "flatten", "parallel_epsilon",
    "sequential_basic", "advanced_composition", "dp_sgd_event", "dp_sgd_epsilon",
    "calibrate", "calibrate_noise_multiplier", "gaussian_noise_multiplier", "gaussian_delta",
    "within", "dominated", "event_to_json", "event_from_json", "DpEvent",
    "EpsilonDeltaDpEvent", "DiscreteGaussianDpEvent", "DistributedDiscreteGaussianDpEvent",
]

Neighbouring = Literal["add_remove", "replace_one"]
Accountant = Literal["pld", "rdp"]

#: Width of the privacy-loss grid of the PLD accountant (see the module docstring).
PLD_VALUE_DISCRETIZATION = 1e-4
#: PLD grid width relative to the epsilon of the question, at most (2e-5: 1e-4 up to epsilon 10).
RELATIVE_GRID = 2e-5
#: The grid stops widening here (1.6e-3, from epsilon 80 on): huge limits keep a usable grid.
PLD_MAX_GRID = 16 * PLD_VALUE_DISCRETIZATION
#: Coarse grid used only to locate a calibration bracket quickly.
_COARSE_DISCRETIZATION = 1e-3

_RELATIONS = {
    "add_remove": privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace_one": privacy_accountant.NeighboringRelation.REPLACE_ONE,
}


def pld_grid(epsilon: float) -> float:
    """THE PLD grid for a question about ``epsilon`` (a calibration target, a ledger limit):
    ``PLD_VALUE_DISCRETIZATION * 2**k`` with the largest k >= 0 such that the grid is at most
    ``RELATIVE_GRID * epsilon``, capped at :data:`PLD_MAX_GRID` (1e-4 below epsilon 10, 2e-4 on
    [10, 20), 4e-4 on [20, 40), 8e-4 on [40, 80), 1.6e-3 from 80 on). Any grid gives an upper bound
    (pessimistic discretisation, Doroshenko et al. 2022); nested grids make coarser ones looser."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        return PLD_MAX_GRID if epsilon == math.inf else PLD_VALUE_DISCRETIZATION
    grid = PLD_VALUE_DISCRETIZATION
    while grid < PLD_MAX_GRID and 2 * grid <= RELATIVE_GRID * epsilon * (1 + 1e-12):
        grid *= 2
    return grid


class AccountingError(DpfedError, ValueError):
    """An event the chosen accountant / neighbouring relation cannot account for."""


def _relation(neighbouring: str) -> privacy_accountant.NeighboringRelation:
    try:
        return _RELATIONS[neighbouring]
    except KeyError:
        raise ValueError(
            f"neighbouring must be one of {sorted(_RELATIONS)}, got {neighbouring!r}") from None


def make_accountant(accountant: str = "pld", neighbouring: str = "add_remove", *,
                    pld_discretization: float = PLD_VALUE_DISCRETIZATION,
                    ) -> privacy_accountant.PrivacyAccountant:
    """A fresh dp-accounting accountant ("pld" or "rdp") for the named relation."""
    rel = _relation(neighbouring)
    if accountant == "pld":
        if not (pld_discretization > 0 and math.isfinite(pld_discretization)):
            raise ValueError(f"pld_discretization must be positive, got {pld_discretization!r}")
        return _PLDAccountant(  # PLDAccountant + EpsilonDeltaDpEvent (end of module)
            neighboring_relation=rel, value_discretization_interval=pld_discretization)
    if accountant == "rdp":
        return _RDPAccountant(neighboring_relation=rel)  # RdpAccountant + DiscreteGaussianDpEvent
    raise ValueError(f"accountant must be 'pld' or 'rdp', got {accountant!r}")


def _composed(event: DpEvent, accountant: str, neighbouring: str,
              pld_discretization: float) -> privacy_accountant.PrivacyAccountant:
    if not isinstance(event, DpEvent):
        raise TypeError(f"expected a dp_accounting DpEvent, got {type(event).__name__}")
    acc = make_accountant(accountant, neighbouring, pld_discretization=pld_discretization)
    if accountant == "pld":
        event = _expand_rr_counts(event)
    try:
        acc.compose(event)
    except privacy_accountant.UnsupportedEventError as exc:
        raise AccountingError(
            f"the {accountant} accountant cannot account for this event under the "
            f"{neighbouring!r} relation: {exc}") from None
    return acc


_RR_PREFIX = '{"class_name":"RandomizedResponseDpEvent"'


def _expand_rr_counts(event: DpEvent) -> DpEvent:
    """Work around dp-accounting 0.6.0's PLDAccountant, which ignores the repetition count of a
    ``RandomizedResponseDpEvent`` (``SelfComposedDpEvent(rr, 2)`` is accounted as one ``rr``):
    repeated RR events are spelled out one by one (composed first, while the PLD is small)."""
    flat = flatten([event])
    repeated = {k: n for k, n in flat.items() if k.startswith(_RR_PREFIX) and n > 1}
    if not repeated:
        return event
    parts: list[DpEvent] = []
    for key in sorted(repeated):
        parts.extend([event_from_json(key)] * repeated[key])
    rest = from_counts(Counter({k: n for k, n in flat.items() if k not in repeated}))
    return dp_accounting.ComposedDpEvent(parts + [rest])


def _check_probability(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = (0.0 <= value <= 1.0) if allow_zero else (0.0 < value <= 1.0)
    if not ok or math.isnan(value):
        raise ValueError(f"{name} must be in {'[0, 1]' if allow_zero else '(0, 1]'}, got {value!r}")


def epsilon(event: DpEvent, delta: float, *, accountant: str = "pld",
            neighbouring: str = "add_remove",
            pld_discretization: float = PLD_VALUE_DISCRETIZATION) -> float:
    """Smallest epsilon such that ``event`` is (epsilon, delta)-DP per the accountant."""
    _check_probability("delta", delta, allow_zero=True)
    return _epsilon_cached(event_to_json(event), float(delta), accountant, neighbouring,
                           float(pld_discretization))


@shared_cache(maxsize=256)
def _epsilon_cached(event_json: str, delta_: float, accountant: str, neighbouring: str,
                    pld_discretization: float) -> float:
    acc = _composed(event_from_json(event_json), accountant, neighbouring, pld_discretization)
    return float(acc.get_epsilon(delta_))


def delta(event: DpEvent, epsilon: float, *, accountant: str = "pld",
          neighbouring: str = "add_remove",
          pld_discretization: float = PLD_VALUE_DISCRETIZATION) -> float:
    """Smallest delta such that ``event`` is (epsilon, delta)-DP per the accountant."""
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    acc = _composed(event, accountant, neighbouring, pld_discretization)
    return float(acc.get_delta(epsilon))


# --------------------------------------------------------------------------- composition

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


def parallel_epsilon(events_per_partition: Sequence[DpEvent], delta: float, **kw: Any) -> float:
    """Parallel composition over disjoint partitions: the max epsilon (McSherry 2009, Thm 4).

    Valid only when each record lies in exactly one partition (e.g. each party's data).
    """
    if len(events_per_partition) == 0:
        return 0.0
    return max(epsilon(e, delta, **kw) for e in events_per_partition)


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
    if isinstance(ev, EpsilonDeltaDpEvent) and ev.delta == 0:
        return Fraction(ev.epsilon)
    return None


def dominated(got: DpEvent, planned: DpEvent) -> bool:
    """True when ``got`` is at least as private as ``planned`` (its privacy curve lies below), by
    exact comparison of parameters: more noise or a smaller shift of the same mechanism; any
    pure eps-DP event below ``DiscreteLaplaceDpEvent(e, 1)`` (the binary randomized-response pair,
    which dominates every e-DP mechanism, Kairouz, Oh & Viswanath 2015) or below
    ``EpsilonDeltaDpEvent(e, d)`` when eps <= e; the same Poisson rate around a dominated event."""
    if event_to_json(got) == event_to_json(planned):
        return True
    G, P = type(got), type(planned)
    if P is EpsilonDeltaDpEvent or (P is _dp_event_module.DiscreteLaplaceDpEvent and planned.sensitivity == 1):
        eps = _pure_epsilon(got)
        cap = Fraction(planned.epsilon) if P is EpsilonDeltaDpEvent else _pure_epsilon(planned)
        if eps is not None and cap is not None and eps <= cap:
            return True
        if P is EpsilonDeltaDpEvent and G is EpsilonDeltaDpEvent:
            return bool(got.epsilon <= planned.epsilon and got.delta <= planned.delta)
    if G is not P:
        return False
    if G is dp_accounting.GaussianDpEvent or G is dp_accounting.LaplaceDpEvent:
        return bool(got.noise_multiplier >= planned.noise_multiplier)
    if G is _dp_event_module.DiscreteLaplaceDpEvent:
        return bool(got.noise_parameter <= planned.noise_parameter and got.sensitivity <= planned.sensitivity)
    if G is DiscreteGaussianDpEvent:
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


# --------------------------------------------------------------------------- DP-SGD

def dp_sgd_event(noise_multiplier: float, sampling_rate: float, steps: int) -> DpEvent:
    """DP-SGD / DP-FedAvg: ``steps`` Poisson-subsampled Gaussian steps (Abadi et al. 2016)."""
    if not noise_multiplier >= 0:
        raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier!r}")
    _check_probability("sampling_rate", sampling_rate)
    if int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(
            float(sampling_rate), dp_accounting.GaussianDpEvent(float(noise_multiplier))),
        int(steps))


def dp_sgd_epsilon(noise_multiplier: float, sampling_rate: float, steps: int, delta: float, *,
                   accountant: str = "pld", **kw: Any) -> float:
    """Epsilon of :func:`dp_sgd_event` at ``delta``."""
    return epsilon(dp_sgd_event(noise_multiplier, sampling_rate, steps), delta,
                   accountant=accountant, **kw)


def calibrate_noise_multiplier(target_epsilon: float, delta: float, sampling_rate: float,
                               steps: int, *, accountant: str = "pld",
                               extra_event: DpEvent | None = None, rtol: float = 1e-4,
                               neighbouring: str = "add_remove",
                               pld_discretization: float | None = None) -> float:
    """Smallest noise multiplier sigma with eps(extra_event + DP-SGD(sigma, q, T)) <= target.

    A thin use of :func:`calibrate` on the family ``extra_event + dp_sgd_event(sigma, q, T)``,
    started from the moments-accountant heuristic sigma ~ q sqrt(T) sigma_Gauss(target). Returns a
    sigma that MEETS the target and is within ``rtol`` (relative) of the smallest such sigma.
    """
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise ValueError(f"target_epsilon must be positive and finite, got {target_epsilon!r}")
    _check_probability("delta", delta)
    if not 0 < rtol < 0.01:
        raise ValueError(f"rtol must be in (0, 0.01), got {rtol!r}")
    dp_sgd_event(1.0, sampling_rate, steps)  # validates q and T
    if pld_discretization is None:
        pld_discretization = pld_grid(target_epsilon)
    if extra_event is not None:
        floor = epsilon(compose([extra_event]), delta, accountant=accountant,
                        neighbouring=neighbouring, pld_discretization=pld_discretization)
        if floor >= target_epsilon:
            raise ValueError(
                f"extra_event alone already spends epsilon {floor:.6g} >= target {target_epsilon:.6g}")
    if steps == 0:
        return 0.0
    guess = max(sampling_rate * math.sqrt(steps), 1e-3) * (
        dp_accounting.get_sigma_gaussian(target_epsilon, delta) if hasattr(dp_accounting, "get_sigma_gaussian")
        else math.sqrt(2 * math.log(1.25 / delta)) / target_epsilon)
    return calibrate(lambda s: compose([extra_event, dp_sgd_event(s, sampling_rate, steps)]),
                     target_epsilon, delta, lo=1e-6, hi=1e7, guess=min(max(guess, 0.05), 1e4),
                     accountant=accountant, rtol=rtol, neighbouring=neighbouring,
                     pld_discretization=pld_discretization)


def gaussian_noise_multiplier(epsilon: float, delta: float, *, accountant: str = "pld",
                              rtol: float = 1e-5) -> float:
    """Smallest z (to ``rtol``) with one ``GaussianDpEvent(z)`` (epsilon, delta)-DP: :func:`calibrate`.

    ``accountant="analytic"`` uses the exact Gaussian privacy curve (Balle & Wang 2018, Thm. 8);
    "pld" the (pessimistic) PLD accountant that the ledger uses, so a charge never exceeds epsilon.
    """
    return _gaussian_cached(float(epsilon), float(delta), accountant, float(rtol))


@shared_cache(maxsize=256)
def _gaussian_cached(eps: float, delta_: float, accountant: str, rtol: float) -> float:
    guess = math.sqrt(2 * math.log(1.25 / delta_)) / eps if 0 < delta_ < 1 and eps > 0 else 1.0
    return calibrate(dp_accounting.GaussianDpEvent, eps, delta_, lo=1e-9, hi=1e9, guess=guess,
                     accountant=accountant, rtol=rtol)


def gaussian_delta(noise_multiplier: float, epsilon: float) -> float:
    """delta(epsilon) of the Gaussian mechanism with noise std = z x sensitivity (Balle & Wang 2018,
    Thm. 8): Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) - eps z), in log space (no cancellation)."""
    from scipy import special

    a, b = 0.5 / noise_multiplier, epsilon * noise_multiplier
    la, lb = float(special.log_ndtr(a - b)), epsilon + float(special.log_ndtr(-a - b))
    return math.exp(la) * -math.expm1(lb - la) if lb < la else 0.0


#: Largest number of privacy evaluations :func:`calibrate` makes (bracketing + Brent + bisection).
MAX_CALIBRATION_EVALUATIONS = 400


def calibrate(make_event: Callable[[float], DpEvent], epsilon: float, delta: float, *,
              lo: float = 1e-6, hi: float = 1e7, guess: float | None = None, accountant: str = "pld",
              rtol: float = 1e-4, neighbouring: str = "add_remove",
              pld_discretization: float | None = None) -> float:
    """THE noise calibration of dpfed: the smallest x in [lo, hi] whose ``make_event(x)`` meets
    (epsilon, delta), for a family whose privacy spend does not grow with x (a noise parameter).

    Bracketed root search on g(x) = eps(make_event(x), delta) - epsilon: expand geometrically from
    ``guess`` until g(a) > 0 >= g(b), then Brent's method (Brent 1973, scipy) keeping a valid
    bracket, then bisection until (b - a) <= rtol * b. Returns b, which MEETS the target (never
    overshoots) and is within ``rtol`` of the smallest such x; returns ``lo`` if ``lo`` already
    meets it. At most :data:`MAX_CALIBRATION_EVALUATIONS` evaluations for any accepted input; raises
    ValueError when even ``hi`` misses the target. Under PLD a coarse grid (pessimistic, so it never
    under-states epsilon) supplies the first bracket; the PLD grid is ``pld_grid(epsilon)`` unless
    given (the grid a ledger whose limit is ``epsilon`` charges with). ``accountant="analytic"``: ``make_event(x)``
    must be a ``GaussianDpEvent`` and the exact curve of :func:`gaussian_delta` decides.
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"target epsilon must be positive and finite, got {epsilon!r}")
    _check_probability("delta", delta, allow_zero=accountant != "analytic")
    if not 1e-15 <= rtol < 0.01:
        raise ValueError(f"rtol must be in [1e-15, 0.01), got {rtol!r}")
    if not (0 < lo < hi and math.isfinite(hi)):
        raise ValueError(f"need 0 < lo < hi < inf, got lo={lo!r}, hi={hi!r}")
    if accountant not in ("pld", "rdp", "analytic"):
        raise ValueError(f"accountant must be 'pld', 'rdp' or 'analytic', got {accountant!r}")
    budget = [MAX_CALIBRATION_EVALUATIONS]
    grid_ = pld_grid(epsilon) if pld_discretization is None else float(pld_discretization)

    def spend(x: float, grid: float = grid_) -> float:
        budget[0] -= 1
        if budget[0] < 0:
            raise AccountingError("calibration did not converge within its evaluation budget")
        event = make_event(x)
        if accountant == "analytic":
            if not isinstance(event, dp_accounting.GaussianDpEvent):
                raise ValueError("the analytic calibration takes GaussianDpEvent families only")
            d = gaussian_delta(float(event.noise_multiplier), epsilon)
            return math.log(d / delta) if d > 0 else -math.inf
        return _epsilon_of(event, delta, accountant, neighbouring, grid) - epsilon

    x0 = min(max(guess if guess is not None else math.sqrt(lo * hi), lo), hi)
    fine = _Memo(spend)
    if accountant == "pld" and rtol < 1e-3:
        coarse = _Memo(lambda x: spend(x, max(_COARSE_DISCRETIZATION, 10 * grid_)))
        a, b = _bracket(coarse, x0, 2.0, lo, hi)
        if a is None:
            return _met_at_lo(fine, lo, hi, rtol)
        x0 = _brent_bracketed(coarse, a, b, 1e-3)
        a, b = _secant_bracket(fine, x0, coarse.slope_near(x0), rtol, lo, hi)
    else:
        a, b = _bracket(fine, x0, 2.0, lo, hi)
    if a is None:
        return _met_at_lo(fine, lo, hi, rtol)
    return _brent_bracketed(fine, a, b, rtol)


def _epsilon_of(event: DpEvent, delta_: float, accountant: str, neighbouring: str, grid: float) -> float:
    return epsilon(event, delta_, accountant=accountant, neighbouring=neighbouring, pld_discretization=grid)


def _met_at_lo(f: "_Memo", lo: float, hi: float, rtol: float) -> float:
    """``lo`` meets the target on the coarse search; confirm on the fine one (else bracket there)."""
    if f(lo) <= 0:
        return lo
    a, b = _bracket(f, lo, 2.0, lo, hi)
    assert a is not None
    return _brent_bracketed(f, a, b, rtol)


class _Memo:
    """Memoised scalar function that remembers every evaluation (for bracketing)."""

    def __init__(self, f: Callable[[float], float]) -> None:
        self.f = f
        self.seen: dict[float, float] = {}

    def __call__(self, x: float) -> float:
        if x not in self.seen:
            self.seen[x] = self.f(x)
        return self.seen[x]

    def slope_near(self, x: float) -> float:
        """Secant slope through the two evaluations closest to ``x`` (negative expected)."""
        pts = sorted(self.seen.items(), key=lambda kv: abs(kv[0] - x))[:2]
        if len(pts) < 2 or pts[0][0] == pts[1][0]:
            return -1.0
        (x1, y1), (x2, y2) = pts
        slope = (y2 - y1) / (x2 - x1)
        return slope if slope < 0 else -1.0

    def bracket(self) -> tuple[float, float] | None:
        """Tightest (lo, hi) among evaluations with f(lo) > 0 >= f(hi), if any."""
        met = [x for x, v in self.seen.items() if v <= 0]
        if not met:
            return None
        hi = min(met)
        missed = [x for x, v in self.seen.items() if v > 0 and x < hi]
        return (max(missed), hi) if missed else None


def _bracket(f: _Memo, guess: float, factor: float, lo: float, hi: float) -> tuple[float | None, float]:
    """(a, b) with f(a) > 0 >= f(b), lo <= a < b <= hi, expanding geometrically from ``guess``;
    (None, lo) when f(lo) <= 0 already; ValueError when f(hi) > 0 (the target is out of reach)."""
    if f(guess) <= 0:
        b = guess
        while b > lo:
            a = max(b / factor, lo)
            if f(a) > 0:
                return a, b
            b = a
        return None, lo
    a = guess
    while a < hi:
        b = min(a * factor, hi)
        if f(b) <= 0:
            return a, b
        a = b
    raise ValueError(f"no noise parameter up to {hi:g} meets the target (epsilon {f(hi):+.3g} above it)")


def _secant_bracket(f: _Memo, x0: float, slope: float, rtol: float, lo: float, hi: float
                    ) -> tuple[float | None, float]:
    """Bracket the root of a decreasing ``f`` near ``x0`` by secant steps that aim just past
    the predicted root (by 0.4 rtol), so a good slope estimate needs only 2-3 evaluations."""
    x, fx = x0, f(x0)
    for _ in range(8):
        found = f.bracket()
        if found is not None:
            return found
        pred = x - fx / slope
        pred *= (1 - 0.4 * rtol) if fx <= 0 else (1 + 0.4 * rtol)
        if not lo < pred < hi:
            break
        fp = f(pred)
        if fp != fx and pred != x and (fp - fx) / (pred - x) < 0:
            slope = (fp - fx) / (pred - x)
        x, fx = pred, fp
    return _bracket(f, x, 1.01, lo, hi)


def _bisect(f: Callable[[float], float], lo: float, hi: float, rtol: float) -> tuple[float, float]:
    while hi - lo > rtol * hi:
        mid = 0.5 * (lo + hi)
        if f(mid) > 0:
            lo = mid
        else:
            hi = mid
    return lo, hi


def _brent_bracketed(f: _Memo, lo: float, hi: float, rtol: float) -> float:
    """Brent's root search that returns the bracket end where f <= 0 (target met)."""
    import scipy.optimize

    if lo > 0 and hi - lo > rtol * hi:
        try:
            scipy.optimize.brentq(f, lo, hi, xtol=0.25 * rtol * lo, rtol=max(rtol / 4, 1e-15), maxiter=60,
                                 disp=False)
        except ValueError as exc:  # non-monotone discretisation noise: fall back on bisection below
            if isinstance(exc, AccountingError):  # out of evaluations, or an event it cannot account
                raise
    # Tightest valid bracket among all evaluations, then bisect until it is narrow enough.
    found = f.bracket()
    if found is not None and found[1] <= hi:
        lo, hi = max(lo, found[0]), found[1]
    return _bisect(f, lo, hi, rtol)[1]


# --------------------------------------------------------------------------- JSON

def _field_types(cls: type) -> dict[str, Any]:
    return {f.name: f.type for f in attr.fields(cls)}


def _to_jsonable(value: Any, declared: Any = None) -> Any:
    if isinstance(value, DpEvent):
        cls = type(value)
        if getattr(_dp_event_module, cls.__name__, None) is not cls and _EXTRA_EVENTS.get(cls.__name__) is not cls:
            raise ValueError(f"only dp_accounting.dp_event classes serialise, got {cls.__qualname__}")
        types = _field_types(cls)
        out: dict[str, Any] = {"class_name": cls.__name__}
        for name, v in attr.asdict(value, recurse=False).items():
            out[name] = _to_jsonable(v, types.get(name))
        return out
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and declared in (float, "float"):
        return float(value)  # canonical: 1 and 1.0 are the same noise multiplier
    if isinstance(value, (int, float, str)) or value is None:
        return value
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return _to_jsonable(value.item(), declared)
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    raise ValueError(f"cannot serialise a value of type {type(value).__name__} in a DpEvent")


def event_to_json(event: DpEvent) -> str:
    """Canonical, exact JSON of a DpEvent (field names as in ``to_named_tuple``).

    Floats are written with ``repr`` (shortest exact round-trip); keys are sorted so equal
    events give equal strings (used to group identical charges).
    """
    if not isinstance(event, DpEvent):
        raise TypeError(f"expected a dp_accounting DpEvent, got {type(event).__name__}")
    return json.dumps(_to_jsonable(event), sort_keys=True, separators=(",", ":"), allow_nan=True)


def _from_jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        name = value.get("class_name")
        cls = (_EXTRA_EVENTS.get(name) or getattr(_dp_event_module, name, None)) if isinstance(name, str) else None
        if not (isinstance(cls, type) and issubclass(cls, DpEvent)):
            raise ValueError(f"unknown DpEvent class {name!r}")  # never import arbitrary modules
        types = _field_types(cls)
        kwargs = {k: _from_jsonable(v) for k, v in value.items() if k not in ("class_name", "module_name")}
        unknown = set(kwargs) - set(types)
        if unknown:
            raise ValueError(f"unknown fields for {name}: {sorted(unknown)}")
        for k, v in kwargs.items():
            if types[k] in (float, "float") and isinstance(v, int) and not isinstance(v, bool):
                kwargs[k] = float(v)
        return cls(**kwargs)
    if isinstance(value, list):
        return [_from_jsonable(v) for v in value]
    return value


def event_from_json(text: str) -> DpEvent:
    """Inverse of :func:`event_to_json`; only ``dp_accounting.dp_event`` classes are accepted."""
    try:
        obj = json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a DpEvent JSON document: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError("not a DpEvent JSON document: expected an object")
    try:
        event = _from_jsonable(obj)
    except TypeError as exc:
        raise ValueError(f"malformed DpEvent JSON: {exc}") from None
    return event


# --------------------------------------------------------------------------- generic (epsilon, delta)
# (added for dpfed.algorithms.sample_aggregate: smooth-sensitivity releases are (epsilon, delta)-DP with no
# standard dp_accounting event; see EpsilonDeltaDpEvent.)

@attr.define(frozen=True)
class EpsilonDeltaDpEvent(DpEvent):
    """A release known only to be (epsilon, delta)-DP, e.g. smooth-sensitivity noise (Nissim,
    Raskhodnikova & Smith 2007, Lemma 2.6), whose privacy loss matches no standard mechanism.

    The PLD accountant composes it as the worst (epsilon, delta)-DP mechanism, the dominating
    pair of Kairouz, Oh & Viswanath 2015 (``from_privacy_parameters``): exact for the claim.
    The RDP accountant refuses it (its Renyi divergences are infinite when delta > 0).
    """

    epsilon: float
    delta: float


@attr.define(frozen=True)
class DiscreteGaussianDpEvent(DpEvent):
    """The discrete Gaussian mechanism x + Y, P(Y = y) ∝ exp(-y²/(2 sigma²)) on Z, on a scalar
    integer query whose value one record changes by at most ``sensitivity`` (an integer)
    (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential Privacy").

    A vector query whose record-level change moves m coordinates by at most s_1..s_m is the
    composition of m such events: the coordinates' noises are independent, so the pair of output
    laws is a product of one-dimensional pairs, each dominated by the pair at shift s_j (below),
    and domination is preserved under products (Dong, Roth & Su 2019, Lemma C.3).

    Why a smaller shift is dominated by a larger one (so ``sensitivity`` is a bound, not an exact
    value): the discrete Gaussian pmf is log-concave, so the shifted family has a monotone
    likelihood ratio; the most powerful tests of N_Z(0) against N_Z(a) are then upper threshold
    tests that do not depend on a > 0 (Neyman-Pearson), and their power is nondecreasing in a
    because N_Z(a) is stochastically increasing in a. Hence the trade-off curve at shift a lies
    above the one at shift b >= a.

    Accounting, both provable:
      * PLD: dp-accounting's exact discrete-Gaussian privacy loss (``from_discrete_gaussian_mechanism``,
        pessimistic discretisation). It truncates the noise at 11.6 sigma, whose tail mass is
        below 1e-30 (CKS20 supplement, Prop. 1); we compose a (0, 2e-30) event to cover it:
        delta_full(eps) <= delta_truncated(eps) + 1e-30.
      * RDP: rho-zCDP with rho = sensitivity² / (2 sigma²) (CKS20 Prop. 5), i.e. ``ZCDpEvent(rho)``.
    """

    sigma: float
    sensitivity: int = 1


#: Tail mass beyond dp-accounting's truncation at 11.6 sigma is <= 1e-30 (see above); doubled.
_DG_TRUNCATION_DELTA = 2e-30

_EXTRA_EVENTS: dict[str, type] = {"EpsilonDeltaDpEvent": EpsilonDeltaDpEvent,
                                  "DiscreteGaussianDpEvent": DiscreteGaussianDpEvent,
                                  "DistributedDiscreteGaussianDpEvent": DistributedDiscreteGaussianDpEvent}


def _dg_invalid(event: "DiscreteGaussianDpEvent") -> str | None:
    if not (isinstance(event.sensitivity, int) and not isinstance(event.sensitivity, bool)
            and event.sensitivity >= 1):
        return "DiscreteGaussianDpEvent needs an integer sensitivity >= 1"
    if not (event.sigma > 0 and math.isfinite(event.sigma)):
        return "DiscreteGaussianDpEvent needs a positive finite sigma"
    return None


#: dp-accounting nests this class in PrivacyAccountant (there is no module-level name).
_CompositionError = privacy_accountant.PrivacyAccountant.CompositionErrorDetails


class _RDPAccountant(rdp_privacy_accountant.RdpAccountant):
    """dp-accounting's RDP accountant that also composes :class:`DiscreteGaussianDpEvent`
    (as the zCDP event it provably satisfies) and :class:`DistributedDiscreteGaussianDpEvent`,
    alone or Poisson-subsampled (add/remove only), by the curve of
    :func:`dpfed.core.distributed_noise.event_rdp` (KLS21 Prop. 14; subsampling by the binomial expansion)."""

    def _maybe_compose(self, event: Any, count: int, do_compose: bool) -> Any:
        inner, q = event, 1.0
        if (isinstance(event, dp_accounting.PoissonSampledDpEvent)
                and isinstance(event.event, DistributedDiscreteGaussianDpEvent)):
            inner, q = event.event, float(event.sampling_probability)
            if self._neighboring_relation is not privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE:
                return _CompositionError(
                    invalid_event=event, error_message="a Poisson-subsampled "
                    "DistributedDiscreteGaussianDpEvent is accounted under add/remove only")
            if not 0 <= q <= 1:
                return _CompositionError(
                    invalid_event=event, error_message="sampling_probability must be in [0, 1]")
        if isinstance(inner, DistributedDiscreteGaussianDpEvent):
            bad = event_invalid(inner)
            if bad:
                return _CompositionError(invalid_event=event, error_message=bad)
            if do_compose and count > 0:
                self._rdp += count * event_rdp(inner, self._orders, q)
            return None
        if isinstance(event, DiscreteGaussianDpEvent):
            bad = _dg_invalid(event)
            if bad:
                return _CompositionError(invalid_event=event, error_message=bad)
            rho = event.sensitivity ** 2 / (2.0 * event.sigma ** 2)
            return super()._maybe_compose(dp_accounting.ZCDpEvent(rho), count, do_compose)
        return super()._maybe_compose(event, count, do_compose)


class _PLDAccountant(pld_privacy_accountant.PLDAccountant):
    """dp-accounting's PLD accountant that also composes :class:`EpsilonDeltaDpEvent` and
    :class:`DiscreteGaussianDpEvent`. It refuses :class:`DistributedDiscreteGaussianDpEvent`
    (its only bound is an RDP curve): account distributed noise with ``accountant="rdp"``."""

    _pld: Any  # set by PLDAccountant.__init__ (dp-accounting ships no type information)

    def _maybe_compose(self, event: Any, count: int, do_compose: bool) -> Any:
        if isinstance(event, DistributedDiscreteGaussianDpEvent) or (
                isinstance(event, dp_accounting.PoissonSampledDpEvent)
                and isinstance(event.event, DistributedDiscreteGaussianDpEvent)):
            return _CompositionError(
                invalid_event=event, error_message="DistributedDiscreteGaussianDpEvent has an RDP "
                "bound only (KLS21): use accountant='rdp' (a ledger created with accountant='rdp')")
        if isinstance(event, EpsilonDeltaDpEvent):
            if not (event.epsilon >= 0 and math.isfinite(event.epsilon) and 0 <= event.delta <= 1):
                return _CompositionError(
                    invalid_event=event, error_message="EpsilonDeltaDpEvent needs epsilon >= 0, 0 <= delta <= 1")
            if do_compose and count > 0:
                from dp_accounting.pld import common, privacy_loss_distribution
                pld = privacy_loss_distribution.from_privacy_parameters(
                    common.DifferentialPrivacyParameters(float(event.epsilon), float(event.delta)),
                    value_discretization_interval=self._value_discretization_interval)
                self._pld = self._pld.compose(pld.self_compose(count) if count > 1 else pld)
            return None
        if isinstance(event, DiscreteGaussianDpEvent):
            bad = _dg_invalid(event)
            if bad:
                return _CompositionError(invalid_event=event, error_message=bad)
            if do_compose and count > 0:
                from dp_accounting.pld import common, privacy_loss_distribution
                pld = privacy_loss_distribution.from_discrete_gaussian_mechanism(
                    float(event.sigma), sensitivity=int(event.sensitivity), pessimistic_estimate=True,
                    value_discretization_interval=self._value_discretization_interval)
                pld = pld.compose(privacy_loss_distribution.from_privacy_parameters(
                    common.DifferentialPrivacyParameters(0.0, _DG_TRUNCATION_DELTA),
                    value_discretization_interval=self._value_discretization_interval))
                self._pld = self._pld.compose(pld.self_compose(count) if count > 1 else pld)
            return None
        return super()._maybe_compose(event, count, do_compose)
