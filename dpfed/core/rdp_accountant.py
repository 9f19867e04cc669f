"""dp-accounting's RDP accountant extended to dpfed's events (:mod:`dpfed.core.events`), so that an RDP ledger
takes every release dpfed makes under add/remove.

:class:`ExtendedRdpAccountant` composes :class:`ScalarDiscreteGaussianDpEvent` as the zCDP event it satisfies,
:class:`DistributedDiscreteGaussianDpEvent` (alone or Poisson-subsampled) by its RDP curve (KLS21 Prop. 14),
pure releases by D_alpha <= min(epsilon, alpha epsilon^2 / 2) (Bun & Steinke 2016, Prop. 3.3) and (epsilon,
delta > 0) bounds by basic composition. :func:`ddgauss_parts` is shared with the PLD accountant of
:mod:`dpfed.core.accountants`, which uses this one for what its exact PLDs do not cover.
"""
from __future__ import annotations

import math
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting import privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpfed.core.events import (
    DistributedDiscreteGaussianDpEvent,
    EpsilonDeltaBoundDpEvent,
    ScalarDiscreteGaussianDpEvent,
    discrete_gaussian_invalid,
    event_invalid,
    event_rdp,
)

__all__ = ["ExtendedRdpAccountant", "CompositionError", "ddgauss_parts", "pure_epsilon"]

#: dp-accounting nests this class in PrivacyAccountant (there is no module-level name).
CompositionError = privacy_accountant.PrivacyAccountant.CompositionErrorDetails


def ddgauss_parts(event: Any, rel: privacy_accountant.NeighboringRelation) -> tuple[Any, float, Any] | None:
    """(inner event, sampling rate, composition error or None) of a distributed discrete Gaussian event, alone
    or Poisson-subsampled (add/remove only); None for any other event."""
    inner, q = event, 1.0
    if (isinstance(event, dp_accounting.PoissonSampledDpEvent)
            and isinstance(event.event, DistributedDiscreteGaussianDpEvent)):
        inner, q = event.event, float(event.sampling_probability)
        if rel is not privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE:
            return inner, q, CompositionError(invalid_event=event, error_message="a Poisson-subsampled "
                                              "DistributedDiscreteGaussianDpEvent is accounted under add/remove only")
        if not 0 <= q <= 1:
            return inner, q, CompositionError(invalid_event=event,
                                              error_message="sampling_probability must be in [0, 1]")
    if not isinstance(inner, DistributedDiscreteGaussianDpEvent):
        return None
    bad = event_invalid(inner)
    return inner, q, (CompositionError(invalid_event=event, error_message=bad) if bad else None)


def pure_epsilon(event: Any) -> float | None:
    """The pure epsilon of a release dpfed charges as pure epsilon-DP under add/remove (discrete Laplace, an
    (epsilon, 0) bound), else None. (Randomized response is a replace-one release, as dp-accounting has it.)"""
    if isinstance(event, dp_accounting.dp_event.DiscreteLaplaceDpEvent):
        return float(event.noise_parameter) * float(event.sensitivity)
    if isinstance(event, EpsilonDeltaBoundDpEvent) and event.delta == 0:
        return float(event.epsilon)
    return None


class ExtendedRdpAccountant(rdp_privacy_accountant.RdpAccountant):
    """dp-accounting's RDP accountant that also composes :class:`ScalarDiscreteGaussianDpEvent`
    (as the zCDP event it provably satisfies) and :class:`DistributedDiscreteGaussianDpEvent`,
    alone or Poisson-subsampled (add/remove only), by the curve of
    :func:`dpfed.core.events.event_rdp` (KLS21 Prop. 14; subsampling by the binomial expansion).

    So that an RDP ledger takes every release dpfed makes (add/remove): a pure epsilon-DP release (discrete
    Laplace, an (epsilon, 0) bound) by D_alpha <= min(epsilon, alpha epsilon^2 / 2) (pure
    DP is (alpha, epsilon)-RDP for every alpha, and epsilon^2/2-zCDP: Bun & Steinke 2016, Prop. 3.3); an
    (epsilon, delta) bound with delta > 0, which has no finite Renyi divergence, by basic composition with the
    rest: (eps_rdp(delta - sum delta_i) + sum eps_i, delta).

    While every release composed is pure or an (epsilon, delta) bound, the answer is also never above basic
    composition, (sum eps_i, sum delta_i) (Dwork & Roth 2014, Thm. 3.16): the RDP conversion alone overstates
    a pure epsilon by about log(1/delta) / alpha_max (6 % at epsilon 0.1, delta 1e-6, orders up to 1024), and
    a ledger of pure releases then charges their plain sum."""

    _rdp: Any  # set by RdpAccountant.__init__ (dp-accounting ships no type information)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._bound_epsilon = 0.0  # sums over the (epsilon, delta > 0) bounds composed
        self._bound_delta = 0.0
        self._pure_epsilon = 0.0  # sums over the pure releases composed
        self._only_pure = True    # no release other than pure ones and bounds composed yet

    def get_epsilon(self, target_delta: float) -> float:
        if self._bound_delta == 0.0:
            eps = float(super().get_epsilon(target_delta))
        elif target_delta <= self._bound_delta:
            eps = math.inf
        else:
            eps = float(super().get_epsilon(target_delta - self._bound_delta)) + self._bound_epsilon
        if self._only_pure and target_delta >= self._bound_delta:   # basic composition (class docstring)
            eps = min(eps, self._pure_epsilon + self._bound_epsilon)
        return eps

    def get_delta(self, target_epsilon: float) -> float:
        if self._bound_delta == 0.0:
            delta = float(super().get_delta(target_epsilon))
        elif target_epsilon < self._bound_epsilon:
            delta = 1.0
        else:
            delta = min(1.0, float(super().get_delta(target_epsilon - self._bound_epsilon)) + self._bound_delta)
        if self._only_pure and target_epsilon >= self._pure_epsilon + self._bound_epsilon:
            delta = min(delta, self._bound_delta)
        return delta

    def _compose_bound(self, event: Any, count: int, do_compose: bool) -> Any:
        """A pure or (epsilon, delta) release (class docstring); add/remove only."""
        if self._neighboring_relation is not privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE:
            return CompositionError(invalid_event=event, error_message="pure and (epsilon, delta) releases are "
                                    "accounted by RDP under add/remove only")
        pure = pure_epsilon(event)
        if pure is not None:
            if not (pure >= 0 and math.isfinite(pure)):
                return CompositionError(invalid_event=event, error_message="needs a finite epsilon >= 0")
            if do_compose and count > 0:
                orders = np.asarray(self._orders, dtype=np.float64)
                self._rdp = self._rdp + count * np.minimum(pure, orders * pure * pure / 2.0)
                self._pure_epsilon += count * pure
            return None
        if not (event.epsilon >= 0 and math.isfinite(event.epsilon) and 0 <= event.delta <= 1):
            return CompositionError(invalid_event=event, error_message="EpsilonDeltaBoundDpEvent needs epsilon >= 0, "
                                    "0 <= delta <= 1")
        if do_compose and count > 0:
            self._bound_epsilon += count * float(event.epsilon)
            self._bound_delta += count * float(event.delta)
        return None

    def _maybe_compose(self, event: Any, count: int, do_compose: bool) -> Any:
        if pure_epsilon(event) is not None or isinstance(event, EpsilonDeltaBoundDpEvent):
            return self._compose_bound(event, count, do_compose)
        error = self._compose_other(event, count, do_compose)
        containers = (dp_accounting.ComposedDpEvent, dp_accounting.SelfComposedDpEvent, dp_accounting.NoOpDpEvent)
        if error is None and do_compose and count > 0 and not isinstance(event, containers):
            self._only_pure = False   # a composition's parts answered for themselves
        return error

    def _compose_other(self, event: Any, count: int, do_compose: bool) -> Any:
        """Every release but a pure one or a bound (class docstring)."""
        parts = ddgauss_parts(event, self._neighboring_relation)
        if parts is not None:
            inner, q, bad = parts
            if bad is not None:
                return bad
            if do_compose and count > 0:
                self._rdp += count * event_rdp(inner, self._orders, q)
            return None
        if isinstance(event, ScalarDiscreteGaussianDpEvent):
            bad = discrete_gaussian_invalid(event)
            if bad:
                return CompositionError(invalid_event=event, error_message=bad)
            rho = event.sensitivity ** 2 / (2.0 * event.sigma ** 2)
            return super()._maybe_compose(dp_accounting.ZCDpEvent(rho), count, do_compose)
        return super()._maybe_compose(event, count, do_compose)
