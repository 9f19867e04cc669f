"""Privacy accountants: an event (or a composition) to (epsilon, delta), by PLD or RDP.

Tight accounting is delegated to Google's dp-accounting (PLD: Meiser & Mohammadi 2018, Doroshenko et
al. 2022 "Connect the dots"; RDP: Mironov 2017, Mironov-Talwar-Zhang 2019), with an explicit
neighbouring relation by name. Its two accountants are extended to dpfed's events
(:mod:`dpfed.core.events`): the PLD accountant here composes :class:`EpsilonDeltaBoundDpEvent` (the
dominating pair of Kairouz, Oh & Viswanath 2015), :class:`ScalarDiscreteGaussianDpEvent` (exact
discrete-Gaussian PLD) and the distributed discrete Gaussian; the RDP accountant
(:mod:`dpfed.core.rdp_accountant`) composes the latter two as zCDP and by their RDP curve (KLS21).

PLD discretisation: ``PLD_VALUE_DISCRETIZATION = 1e-4`` (dp-accounting's own default) for every
epsilon below 10. It makes our numbers identical to ``PLDAccountant()``'s, costs about 0.3 s for
DP-SGD with T = 5000 steps, and is pessimistic (an upper bound). The cost grows with the
privacy-loss range over the grid width, so :func:`pld_grid` (THE rule, used by calibration, the
ledger and ``choose_accountant``) widens the grid with the epsilon of the question (a target or a
limit): powers of two times 1e-4, nested, so a coarser grid is the more pessimistic one and a plan
calibrated for epsilon is charged on the very same grid by a ledger whose limit is epsilon.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import dp_accounting
from dp_accounting import privacy_accountant
from dp_accounting.dp_event import DpEvent
from dp_accounting.pld import pld_privacy_accountant

from dpfed.core.composition import flatten, from_counts
from dpfed.core.ddgauss_gdp import MAX_LOG_RATIO, dominating_pld, gaussian_dominance
from dpfed.core.ddgauss_pld import PMF_RELATIVE_ERROR, ddgauss_pld
from dpfed.core.errors import DpfedError
from dpfed.core.event_json import event_from_json, event_to_json
from dpfed.core.events import (
    DG_TRUNCATION_DELTA,
    DistributedDiscreteGaussianDpEvent,
    EpsilonDeltaBoundDpEvent,
    ScalarDiscreteGaussianDpEvent,
    discrete_gaussian_invalid,
)
from dpfed.core.gaussian_pld import gaussian_event_pld
from dpfed.core.memo import shared_cache
from dpfed.core.rdp_accountant import CompositionError, ExtendedRdpAccountant, ddgauss_parts

__all__ = [
    "Neighbouring", "Accountant", "PLD_VALUE_DISCRETIZATION", "RELATIVE_GRID", "PLD_MAX_GRID",
    "AccountingError", "pld_grid", "make_accountant", "check_probability", "epsilon", "delta",
    "parallel_epsilon", "relation", "MAX_PLD_STEPS", "loss_scale", "guarded_grid",
]

Neighbouring = Literal["add_remove", "replace_one"]
Accountant = Literal["pld", "rdp"]

#: Width of the privacy-loss grid of the PLD accountant (see the module docstring).
PLD_VALUE_DISCRETIZATION = 1e-4
#: PLD grid width relative to the epsilon of the question, at most (2e-5: 1e-4 up to epsilon 10).
RELATIVE_GRID = 2e-5
#: The grid stops widening here (1.6e-3, from epsilon 80 on): huge limits keep a usable grid.
PLD_MAX_GRID = 16 * PLD_VALUE_DISCRETIZATION

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


def relation(neighbouring: str) -> privacy_accountant.NeighboringRelation:
    """dp-accounting's neighbouring relation named ``neighbouring`` ("add_remove" or "replace_one")."""
    try:
        return _RELATIONS[neighbouring]
    except KeyError:
        raise ValueError(
            f"neighbouring must be one of {sorted(_RELATIONS)}, got {neighbouring!r}") from None


def make_accountant(accountant: str = "pld", neighbouring: str = "add_remove", *,
                    pld_discretization: float = PLD_VALUE_DISCRETIZATION,
                    ) -> privacy_accountant.PrivacyAccountant:
    """A fresh dp-accounting accountant ("pld" or "rdp") for the named relation."""
    rel = relation(neighbouring)
    if accountant == "pld":
        if not (pld_discretization > 0 and math.isfinite(pld_discretization)):
            raise ValueError(f"pld_discretization must be positive, got {pld_discretization!r}")
        return _PLDAccountant(  # PLDAccountant + EpsilonDeltaBoundDpEvent (end of module)
            neighboring_relation=rel, value_discretization_interval=pld_discretization)
    if accountant == "rdp":
        return ExtendedRdpAccountant(neighboring_relation=rel)  # RdpAccountant + ScalarDiscreteGaussianDpEvent
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


def check_probability(name: str, value: float, *, allow_zero: bool = False) -> None:
    """Raise ValueError unless ``value`` is a probability in (0, 1] (or [0, 1] with ``allow_zero``)."""
    ok = (0.0 <= value <= 1.0) if allow_zero else (0.0 < value <= 1.0)
    if not ok or math.isnan(value):
        raise ValueError(f"{name} must be in {'[0, 1]' if allow_zero else '(0, 1]'}, got {value!r}")


def epsilon(event: DpEvent, delta: float, *, accountant: str = "pld",
            neighbouring: str = "add_remove",
            pld_discretization: float = PLD_VALUE_DISCRETIZATION) -> float:
    """Smallest epsilon such that ``event`` is (epsilon, delta)-DP per the accountant. PLD: on the grid
    ``pld_discretization``, or a coarser one when that grid would make the PLD huge (:func:`guarded_grid`)."""
    check_probability("delta", delta, allow_zero=True)
    return _epsilon_cached(event_to_json(event), float(delta), accountant, neighbouring,
                           float(pld_discretization))


@shared_cache(maxsize=256)
def _epsilon_cached(event_json: str, delta_: float, accountant: str, neighbouring: str,
                    pld_discretization: float) -> float:
    event = event_from_json(event_json)
    if accountant == "pld":
        pld_discretization = guarded_grid(event, delta_, neighbouring, pld_discretization)
    acc = _composed(event, accountant, neighbouring, pld_discretization)
    return float(acc.get_epsilon(delta_))


def delta(event: DpEvent, epsilon: float, *, accountant: str = "pld",
          neighbouring: str = "add_remove",
          pld_discretization: float = PLD_VALUE_DISCRETIZATION) -> float:
    """Smallest delta such that ``event`` is (epsilon, delta)-DP per the accountant."""
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    if accountant == "pld":
        pld_discretization = guarded_grid(event, epsilon, neighbouring, pld_discretization, at_epsilon=True)
    acc = _composed(event, accountant, neighbouring, pld_discretization)
    return float(acc.get_delta(epsilon))


# --------------------------------------------------------------------------- PLD size guard

#: Largest privacy-loss scale, in grid steps, that one PLD question discretises (:func:`guarded_grid`): a
#: PLD then holds a few times this many points (a few MB), however large the real epsilon is.
MAX_PLD_STEPS = 200_000


#: Renyi orders of :func:`loss_scale`: a dozen (dp-accounting's default has ~100), a few times cheaper; any
#: set of orders gives a valid RDP bound, a sparser one a slightly looser one.
_SCALE_ORDERS = (1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 64.0, 128.0, 256.0, 1024.0)


def _pure_bound(ev: DpEvent) -> float:
    """Pure epsilon of a release RDP does not account for (its privacy-loss range), 0 when unknown."""
    if isinstance(ev, dp_accounting.LaplaceDpEvent) and ev.noise_multiplier > 0:
        return 1.0 / float(ev.noise_multiplier)
    if isinstance(ev, dp_accounting.dp_event.DiscreteLaplaceDpEvent):
        return float(ev.noise_parameter) * float(ev.sensitivity)
    if isinstance(ev, EpsilonDeltaBoundDpEvent):
        return float(ev.epsilon)
    if isinstance(ev, dp_accounting.RandomizedResponseDpEvent) and ev.noise_parameter > 0:
        return math.log1p(ev.num_buckets * (1.0 - ev.noise_parameter) / ev.noise_parameter)
    if isinstance(ev, dp_accounting.PoissonSampledDpEvent):
        return math.log1p(float(ev.sampling_probability) * math.expm1(min(_pure_bound(ev.event), 700.0)))
    return 0.0


def loss_scale(event: DpEvent, delta: float, neighbouring: str = "add_remove") -> float:
    """The scale of ``event``'s privacy loss (sets a PLD grid that keeps it small): RDP epsilon at ``delta``
    (Mironov 2017; milliseconds) plus the pure epsilon of releases RDP does not take. An upper bound on epsilon
    where RDP covers everything, else only a size estimate (any PLD grid gives an upper bound)."""
    if not 0 < delta < 1:
        return 0.0
    rdp = ExtendedRdpAccountant(orders=_SCALE_ORDERS, neighboring_relation=relation(neighbouring))
    rest, any_rdp = 0.0, False
    for key, n in flatten([event]).items():
        ev = event_from_json(key)
        part = dp_accounting.SelfComposedDpEvent(ev, n) if n > 1 else ev
        if rdp.supports(part):
            rdp.compose(part)
            any_rdp = True
        else:
            rest += n * _pure_bound(ev)
    scale = rest + (float(rdp.get_epsilon(delta)) if any_rdp else 0.0)
    return scale if math.isfinite(scale) else 0.0


def guarded_grid(event: DpEvent, delta: float, neighbouring: str, grid: float, *, at_epsilon: bool = False) -> float:
    """``grid`` doubled until :func:`loss_scale` spans at most :data:`MAX_PLD_STEPS` steps (the grid of every
    PLD dpfed builds): unchanged near its question's epsilon (a plan, a ledger near its limit), coarser only for
    a loss far larger (an offer at real epsilon 1300 on a grid made for 1: minutes and gigabytes otherwise), still
    an upper bound (Doroshenko et al. 2022). ``at_epsilon``: ``delta`` is an epsilon, its own scale."""
    scale = float(delta) if at_epsilon else loss_scale(event, delta, neighbouring)
    while scale > MAX_PLD_STEPS * grid:
        grid *= 2.0
    return grid


def parallel_epsilon(events_per_partition: Sequence[DpEvent], delta: float, **kw: Any) -> float:
    """Parallel composition over disjoint partitions: the max epsilon (McSherry 2009, Thm 4).

    Valid only when each record lies in exactly one partition (e.g. each party's data).
    """
    if len(events_per_partition) == 0:
        return 0.0
    return max(epsilon(e, delta, **kw) for e in events_per_partition)


#: Shares of delta (or epsilon) given to the RDP part when a PLD and an RDP part are combined.
_SPLITS = (0.02, 0.1, 0.25, 0.5, 0.75, 0.9, 0.98)


class _PLDAccountant(pld_privacy_accountant.PLDAccountant):
    """dp-accounting's PLD accountant that also composes :class:`EpsilonDeltaBoundDpEvent`,
    :class:`ScalarDiscreteGaussianDpEvent` and :class:`DistributedDiscreteGaussianDpEvent` (alone or
    Poisson-subsampled, add/remove).

    The distributed discrete Gaussian goes through its exact PLD, built from the probability mass functions
    of the summed shares (:mod:`dpfed.core.ddgauss_pld`), where the worst-case pair is known exactly; shifts of
    several coordinates through the PLD of the Gaussian mechanism that dominates them up to a pointwise factor
    (:mod:`dpfed.core.ddgauss_gdp`); both kinds of factor, e^(+-a) on the two output laws, are paid as
    delta(eps) <= e^a delta_pld(eps - 2a). What neither covers ("party" rounding, a summed variance too small
    for the kernel) by its RDP curve (KLS21, :func:`dpfed.core.events.event_rdp`) in a side RDP accountant.
    Answers then combine the two parts by basic composition, (eps1, delta1) and (eps2, delta2) giving
    (eps1 + eps2, delta1 + delta2), at the best of a few splits, and never exceed the all-RDP answer when RDP
    covers every composed release (both are upper bounds; the smaller is reported), so a plan calibrated by RDP
    is charged no more than its target."""

    _pld: Any  # set by PLDAccountant.__init__ (dp-accounting ships no type information)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the distributed discrete Gaussian releases no exact PLD covers
        self._rdp_part = ExtendedRdpAccountant(neighboring_relation=self._neighboring_relation)
        self._rdp_part_used = False
        self._composed_events: list[tuple[Any, int]] = []  # for the all-RDP answer, built only when used
        self._log_up = 0.0  # true law <= e^up * the one the PLD describes, pointwise (upper sides)
        self._log_down = 0.0  # true law >= e^-down * the PLD's, pointwise (lower sides)
        self._pld_bounded = False  # some release went through ddgauss_pld or ddgauss_gdp

    def compose(self, event: Any, count: int = 1) -> Any:
        super().compose(event, count)
        self._composed_events.append((event, count))
        return self

    def _rdp_all(self) -> ExtendedRdpAccountant | None:
        """Every release by RDP (None if it cannot take one), built only when an answer uses it (class docstring)."""
        acc = ExtendedRdpAccountant(neighboring_relation=self._neighboring_relation)
        return acc if all(acc.supports(e) and acc.compose(e, n) for e, n in self._composed_events) else None

    def _compose_ddgauss(self, event: Any, count: int, do_compose: bool) -> Any:
        parts = ddgauss_parts(event, self._neighboring_relation)
        assert parts is not None  # called for distributed discrete Gaussian events only
        inner, q, bad = parts
        if bad is not None:
            return bad
        if not do_compose or count <= 0 or q == 0:
            return None
        built = ddgauss_pld(inner, q, self._value_discretization_interval)
        dominated = gaussian_dominance(inner) if built is None else None
        if dominated is not None and count * dominated.log_ratio > MAX_LOG_RATIO:
            dominated = None  # the pointwise factor would cost more than the RDP curve saves
        if built is not None:
            pld, pairs = built
            self._log_up += pairs * count * math.log1p(PMF_RELATIVE_ERROR)
            self._log_down -= pairs * count * math.log1p(-PMF_RELATIVE_ERROR)
        elif dominated is not None:
            pld = dominating_pld(dominated.noise_multiplier, q, self._value_discretization_interval)
            self._log_up += count * dominated.log_ratio
            self._log_down += count * dominated.log_ratio
        else:
            self._rdp_part.compose(event, count)
            self._rdp_part_used = True
            return None
        self._pld = self._pld.compose(pld.self_compose(count) if count > 1 else pld)
        self._pld_bounded = True
        return None

    def _pld_epsilon(self, target_delta: float) -> float:
        # true <= e^up PLD's and >= e^-down PLD's pointwise: delta(eps) <= e^up delta_pld(eps - up - down)
        if not self._pld_bounded:
            return float(super().get_epsilon(target_delta))
        shift = self._log_up + self._log_down
        return float(super().get_epsilon(target_delta * math.exp(-self._log_up))) + shift

    def _pld_delta(self, target_epsilon: float) -> float:
        if not self._pld_bounded:
            return float(super().get_delta(target_epsilon))
        shift = self._log_up + self._log_down
        if target_epsilon < shift:
            return 1.0
        return min(1.0, float(super().get_delta(target_epsilon - shift)) * math.exp(self._log_up))

    def get_epsilon(self, target_delta: float) -> float:
        best = self._pld_epsilon(target_delta) if not self._rdp_part_used else min(
            (self._pld_epsilon(target_delta * (1.0 - f)) + float(self._rdp_part.get_epsilon(target_delta * f))
             for f in _SPLITS), default=math.inf)
        rdp_all = self._rdp_all() if self._rdp_part_used or self._pld_bounded else None
        if rdp_all is not None:
            best = min(best, float(rdp_all.get_epsilon(target_delta)))
        return best

    def get_delta(self, target_epsilon: float) -> float:
        best = self._pld_delta(target_epsilon) if not self._rdp_part_used else min(
            (self._pld_delta(target_epsilon * (1.0 - f)) + float(self._rdp_part.get_delta(target_epsilon * f))
             for f in _SPLITS), default=1.0)
        rdp_all = self._rdp_all() if self._rdp_part_used or self._pld_bounded else None
        if rdp_all is not None:
            best = min(best, float(rdp_all.get_delta(target_epsilon)))
        return min(best, 1.0)

    def _maybe_compose(self, event: Any, count: int, do_compose: bool) -> Any:
        grid, rel = self._value_discretization_interval, self._neighboring_relation
        fast = gaussian_event_pld(event, count, grid, rel) if do_compose else None  # dp-accounting's, faster
        if fast is not None:
            self._pld = self._pld.compose(fast)
            return None
        if isinstance(event, DistributedDiscreteGaussianDpEvent) or (
                isinstance(event, dp_accounting.PoissonSampledDpEvent)
                and isinstance(event.event, DistributedDiscreteGaussianDpEvent)):
            return self._compose_ddgauss(event, count, do_compose)
        if isinstance(event, EpsilonDeltaBoundDpEvent):
            if not (event.epsilon >= 0 and math.isfinite(event.epsilon) and 0 <= event.delta <= 1):
                return CompositionError(
                    invalid_event=event, error_message="EpsilonDeltaBoundDpEvent needs epsilon >= 0, 0 <= delta <= 1")
            if do_compose and count > 0:
                from dp_accounting.pld import common, privacy_loss_distribution
                pld = privacy_loss_distribution.from_privacy_parameters(
                    common.DifferentialPrivacyParameters(float(event.epsilon), float(event.delta)),
                    value_discretization_interval=self._value_discretization_interval)
                self._pld = self._pld.compose(pld.self_compose(count) if count > 1 else pld)
            return None
        if isinstance(event, ScalarDiscreteGaussianDpEvent):
            bad = discrete_gaussian_invalid(event)
            if bad:
                return CompositionError(invalid_event=event, error_message=bad)
            if do_compose and count > 0:
                from dp_accounting.pld import common, privacy_loss_distribution
                pld = privacy_loss_distribution.from_discrete_gaussian_mechanism(
                    float(event.sigma), sensitivity=int(event.sensitivity), pessimistic_estimate=True,
                    value_discretization_interval=self._value_discretization_interval)
                pld = pld.compose(privacy_loss_distribution.from_privacy_parameters(
                    common.DifferentialPrivacyParameters(0.0, DG_TRUNCATION_DELTA),
                    value_discretization_interval=self._value_discretization_interval))
                self._pld = self._pld.compose(pld.self_compose(count) if count > 1 else pld)
            return None
        return super()._maybe_compose(event, count, do_compose)
