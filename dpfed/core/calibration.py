"""Noise calibration: the smallest noise that meets a target (epsilon, delta), never above it.

:func:`calibrate` is THE calibration of dpfed (bracketed root search: geometric expansion, Brent
1973, bisection); :func:`calibrate_noise_multiplier` applies it to DP-SGD (Abadi et al. 2016),
:func:`gaussian_noise_multiplier` to one Gaussian release; :func:`gaussian_delta` is the exact
Gaussian privacy curve (Balle & Wang 2018, Thm. 8). Under PLD a coarse grid (1e-3, or 10x the
question's grid if coarser; pessimistic, so it never under-states epsilon) only locates a starting
bracket; the answer is decided on the grid of :func:`dpfed.core.accountants.pld_grid`.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import dp_accounting
from dp_accounting.dp_event import DpEvent

from dpfed.core.accountants import PLD_VALUE_DISCRETIZATION, AccountingError, check_probability, epsilon, pld_grid
from dpfed.core.composition import compose
from dpfed.core.memo import shared_cache

__all__ = ["dp_sgd_event", "dp_sgd_epsilon", "calibrate_noise_multiplier", "gaussian_noise_multiplier",
           "gaussian_delta", "MAX_CALIBRATION_EVALUATIONS", "calibrate"]

#: Coarse grid used only to locate a calibration bracket quickly.
_COARSE_DISCRETIZATION = 10 * PLD_VALUE_DISCRETIZATION
#: The coarse search runs only when its grid is at most this fraction of the target epsilon: a coarser
#: grid (a target of 1e-3 against a grid of 1e-3) would put its root far from the fine one.
_COARSE_MAX_RELATIVE = 0.02


def dp_sgd_event(noise_multiplier: float, sampling_rate: float, steps: int) -> DpEvent:
    """DP-SGD / DP-FedAvg: ``steps`` Poisson-subsampled Gaussian steps (Abadi et al. 2016)."""
    if not noise_multiplier >= 0:
        raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier!r}")
    check_probability("sampling_rate", sampling_rate)
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
    check_probability("delta", delta)
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
    check_probability("delta", delta, allow_zero=accountant != "analytic")
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
    coarse_grid = max(_COARSE_DISCRETIZATION, 10 * grid_)
    if accountant == "pld" and rtol < 1e-3 and coarse_grid <= _COARSE_MAX_RELATIVE * epsilon:
        coarse = _Memo(lambda x: spend(x, coarse_grid))
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


def _met_at_lo(f: _Memo, lo: float, hi: float, rtol: float) -> float:
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


def _bracket(f: _Memo, guess: float, factor: float, lo: float, hi: float, *, grow: bool = False
             ) -> tuple[float | None, float]:
    """(a, b) with f(a) > 0 >= f(b), lo <= a < b <= hi, expanding geometrically from ``guess`` (by
    ``factor``; with ``grow``, a step whose excess ``factor - 1`` doubles each time: few evaluations even
    far from the root); (None, lo) when f(lo) <= 0 already; ValueError when f(hi) > 0 (out of reach)."""
    step = factor - 1.0
    if f(guess) <= 0:
        b = guess
        while b > lo:
            a = max(b / (1.0 + step), lo)
            if f(a) > 0:
                return a, b
            b, step = a, 2 * step if grow else step
        return None, lo
    a = guess
    while a < hi:
        b = min(a * (1.0 + step), hi)
        if f(b) <= 0:
            return a, b
        a, step = b, 2 * step if grow else step
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
    return _bracket(f, x, 1.0 + 4 * rtol, lo, hi, grow=True)


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
