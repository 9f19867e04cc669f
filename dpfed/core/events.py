"""dpfed's own privacy events, and the Renyi bound of the distributed discrete Gaussian.

As dp-accounting keeps its events in ``dp_event.py``, dpfed keeps the events it adds here:

* :class:`EpsilonDeltaBoundDpEvent`: a release known only by an (epsilon, delta) bound;
* :class:`ScalarDiscreteGaussianDpEvent`: the (central) discrete Gaussian on a scalar integer query
  (Canonne, Kamath & Steinke 2020);
* :class:`DistributedDiscreteGaussianDpEvent`: the sum of honest discrete Gaussian shares of secure
  aggregation (Kairouz, Liu & Steinke, ICML 2021, cited as KLS21), with its RDP curve
  (:func:`ddgauss_rdp`, :func:`party_rounding_rdp`, Poisson subsampling by
  :func:`poisson_subsampled_rdp`, all three in :func:`event_rdp`).

Names of their own: newer dp-accounting releases define ``EpsilonDeltaDpEvent`` and
``DiscreteGaussianDpEvent`` with other fields, so dpfed's events no longer use those names. Ledgers
written before the rename store them under the old names; :data:`LEGACY_EVENT_NAMES` reads them back
(:mod:`dpfed.core.event_json`). The accountants that compose these events are in
:mod:`dpfed.core.accountants`; the encoder that produces the distributed noise in
:mod:`dpfed.core.distributed_noise`.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import attr
import numpy as np
from dp_accounting.dp_event import DpEvent
from scipy import special

__all__ = [
    "DpEvent", "EpsilonDeltaBoundDpEvent", "ScalarDiscreteGaussianDpEvent", "DistributedDiscreteGaussianDpEvent",
    "DG_TRUNCATION_DELTA", "DPFED_EVENTS", "LEGACY_EVENT_NAMES", "ROUNDINGS", "RDP_ORDERS",
    "discrete_gaussian_invalid", "event_invalid", "ddgauss_tau", "ddgauss_rdp", "party_rounding_rdp",
    "poisson_subsampled_rdp", "event_rdp",
]

#: Integer Renyi orders of the distributed-noise accounting (the subsampling bound is for integer orders).
RDP_ORDERS = np.array(list(range(2, 129)) + [160, 192, 256, 384, 512], dtype=np.int64)
#: The two encodings of a distributed-noise release: "record" rounds every record's row on its own
#: (KLS21 Alg. 1), "party" rounds a party's float sum of clipped rows once.
ROUNDINGS = ("record", "party")
#: "party" rounding: bound on |P(round up) - frac| (float frac and the 2^-53 uniform grid: < 2^-51).
_PARTY_ROUNDING_SLACK = 2.0 ** -48


# --------------------------------------------------------------------------- central events

@attr.define(frozen=True)
class EpsilonDeltaBoundDpEvent(DpEvent):
    """A release known only to be (epsilon, delta)-DP, e.g. smooth-sensitivity noise (Nissim,
    Raskhodnikova & Smith 2007, Lemma 2.6), whose privacy loss matches no standard mechanism.

    The PLD accountant composes it as the worst (epsilon, delta)-DP mechanism, the dominating
    pair of Kairouz, Oh & Viswanath 2015 (``from_privacy_parameters``): exact for the claim.
    The RDP accountant refuses it (its Renyi divergences are infinite when delta > 0).
    """

    epsilon: float
    delta: float


@attr.define(frozen=True)
class ScalarDiscreteGaussianDpEvent(DpEvent):
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
DG_TRUNCATION_DELTA = 2e-30


def discrete_gaussian_invalid(event: ScalarDiscreteGaussianDpEvent) -> str | None:
    """Why ``event`` cannot be accounted, or None."""
    if not (isinstance(event.sensitivity, int) and not isinstance(event.sensitivity, bool)
            and event.sensitivity >= 1):
        return "ScalarDiscreteGaussianDpEvent needs an integer sensitivity >= 1"
    if not (event.sigma > 0 and math.isfinite(event.sigma)):
        return "ScalarDiscreteGaussianDpEvent needs a positive finite sigma"
    return None


# --------------------------------------------------------------------------- distributed noise (KLS21)

@attr.define(frozen=True)
class DistributedDiscreteGaussianDpEvent(DpEvent):
    """x + Z on Z^dimension, Z the sum of ``parties`` i.i.d. N_Z(0, sigma_share^2)^dimension shares,
    for integer queries x whose neighbours differ by a vector of L2 norm <= ``l2_sensitivity`` and
    L1 norm <= ``l1_sensitivity`` (KLS21 Thm. 1 / Prop. 14). RDP: :func:`ddgauss_rdp`;
    Poisson-subsampled: :func:`poisson_subsampled_rdp` (binomial expansion, both directions).
    ``parties`` counts the shares the adversary does not know (survivors minus colluders)."""

    sigma_share: float
    parties: int
    l2_sensitivity: float
    l1_sensitivity: float
    dimension: int
    #: "record": the shift is one rounded row (norm <= l2_sensitivity, KLS21 Prop. 14); "party": the shift
    #: moves a real vector of norm <= l2_sensitivity that is rounded once per party (coupling bound).
    rounding: str = "record"


def event_invalid(event: DistributedDiscreteGaussianDpEvent) -> str | None:
    """Why ``event`` cannot be accounted, or None."""
    if not (event.sigma_share >= 0.5 and math.isfinite(event.sigma_share)):
        return "DistributedDiscreteGaussianDpEvent needs a finite sigma_share >= 1/2 (KLS21 Thm. 1)"
    for name in ("parties", "dimension"):
        v = getattr(event, name)
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return f"DistributedDiscreteGaussianDpEvent needs an integer {name} >= 1"
    if not (event.l2_sensitivity > 0 and event.l1_sensitivity > 0
            and math.isfinite(event.l2_sensitivity) and math.isfinite(event.l1_sensitivity)):
        return "DistributedDiscreteGaussianDpEvent needs positive finite sensitivities"
    if event.rounding not in ROUNDINGS:
        return f"DistributedDiscreteGaussianDpEvent rounding must be one of {ROUNDINGS}"
    return None


def ddgauss_tau(sigma_share: float, parties: int) -> float:
    """tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 k / (k + 1)) (KLS21 Thm. 1)."""
    k = np.arange(1, int(parties), dtype=np.float64)
    return float(10.0 * np.exp(-2.0 * math.pi ** 2 * sigma_share ** 2 * k / (k + 1.0)).sum())


def ddgauss_rdp(orders: np.ndarray, sigma_share: float, parties: int, l2_sensitivity: float,
                l1_sensitivity: float, dimension: int) -> np.ndarray:
    """Renyi DP of the sum of ``parties`` discrete Gaussian shares (KLS21 Prop. 14, eq. (17)):
    with s = sqrt(n) sigma, a2 = Delta_2 / s, a1 = Delta_1 / s and tau from :func:`ddgauss_tau`,
    D_alpha <= min(alpha a2^2 / 2 + tau d, alpha/2 (a2^2 + 2 a1 tau + tau^2 d),
    alpha/2 (a2 + tau sqrt(d))^2). For n = 1 (tau = 0) this is CKS20's alpha Delta_2^2/(2 sigma^2)."""
    bad = event_invalid(DistributedDiscreteGaussianDpEvent(
        float(sigma_share), int(parties), float(l2_sensitivity), float(l1_sensitivity), int(dimension)))
    if bad:
        raise ValueError(bad)
    a = np.asarray(orders, dtype=np.float64)
    s = math.sqrt(parties) * sigma_share
    a2, a1, tau, d = l2_sensitivity / s, l1_sensitivity / s, ddgauss_tau(sigma_share, parties), dimension
    t1 = 0.5 * a * a2 ** 2 + tau * d
    t2 = 0.5 * a * (a2 ** 2 + 2.0 * a1 * tau + tau ** 2 * d)
    t3 = 0.5 * a * (a2 + tau * math.sqrt(d)) ** 2
    return np.minimum(np.minimum(t1, t2), t3)


def party_rounding_rdp(orders: np.ndarray, sigma_share: float, parties: int, l2_sensitivity: float,
                       dimension: int) -> np.ndarray:
    """Renyi bound for "party" rounding (:func:`quantize_party_sum`): one record moves the party's real
    vector y (scaled, rotated sum) by v, ||v||_2 <= Delta = ``l2_sensitivity``, and y is rounded once
    (:func:`party_round`), then the sum N of ``parties`` honest N_Z(0, sigma^2) shares is added.

    Coupling: the rounding is a fixed function of (y, u), u the uniforms, drawn independently of the
    data; with u shared by the two worlds, delta_u = round(y + v) - round(y) has independent coordinates
    floor(v_i) + Bernoulli(frac(v_i) + e_i), |e_i| < 2^-48. Both output laws are mixtures over u with the
    same weights, so by joint convexity of exp((l-1) D_l) (and for a Poisson-subsampled round, per u, the
    expansion and reflection lemma of :func:`poisson_subsampled_rdp`, as every pair (c_u + N, c_u +
    delta_u + N) is reflection-symmetric) it suffices to bound E_u exp((l-1) D_l(N + delta_u || N)) <=
    e^((l-1) tau d) E_u exp(t ||delta_u||^2), t = l (l-1) / (2 n sigma^2) (KLS21 Prop. 14, first form).
    Per coordinate, with X = delta - v in {-p, 1-p} (p = frac|v|, by symmetry v >= 0), Hoeffding's lemma
    on t X (2v + X), whose range is <= t (2v + 1) and mean <= t (1/4 + |e| (2v + 1)), gives
    log E e^(t delta^2) <= t v^2 + t/4 + t |e| (2v + 1) + t^2 (2v + 1)^2 / 8
                        <= (t + t^2) v^2 + (t + t^2) / 4 + t |e| (2v + 1)   ((2v+1)^2 <= 8 v^2 + 2).
    Summing over d coordinates with sum v^2 <= Delta^2 and sum |v| <= sqrt(d) Delta:
        eps(l) = tau d + [(t + t^2)(Delta^2 + d/4) + t 2^-48 (2 sqrt(d) Delta + d)] / (l - 1),
    which is ``l (Delta^2 + d/4) / (2 n sigma^2)`` to first order: KLS21's conditional rounding bound
    without its beta term, so rounding once per party costs no more privacy than once per record."""
    bad = event_invalid(DistributedDiscreteGaussianDpEvent(
        float(sigma_share), int(parties), float(l2_sensitivity), float(l2_sensitivity), int(dimension), "party"))
    if bad:
        raise ValueError(bad)
    a = np.asarray(orders, dtype=np.float64)
    if not (a > 1).all():
        raise ValueError("party_rounding_rdp needs orders > 1")
    d, delta = float(dimension), float(l2_sensitivity)
    t = a * (a - 1.0) / (2.0 * parties * sigma_share ** 2)
    log_mgf = (t + t * t) * (delta ** 2 + 0.25 * d) + t * _PARTY_ROUNDING_SLACK * (2.0 * math.sqrt(d) * delta + d)
    out: np.ndarray = ddgauss_tau(sigma_share, parties) * d + log_mgf / (a - 1.0)
    return out


def poisson_subsampled_rdp(base_rdp: Callable[[np.ndarray], np.ndarray], sampling_rate: float,
                           orders: np.ndarray) -> np.ndarray:
    """RDP of a *reflection-symmetric* additive mechanism on a Poisson(q) subsample, add/remove
    neighbours, integer alpha >= 2: with eps(l) the base mechanism's RDP,

        eps'(alpha) = 1/(alpha-1) log sum_{l=0}^alpha C(alpha, l) q^l (1-q)^(alpha-l) e^((l-1) eps(l))

    (the l = 0, 1 terms are (1-q)^(alpha-1) (alpha q - q + 1)), capped by eps(alpha). This is the
    form of Mironov, Talwar & Zhang 2019 (integer alpha) and of Zhu & Wang 2019's tight bound
    without the factor 3 of their general Thm. 6, which has a per-round floor independent of the noise.

    Why it holds here. Fix the rest of the round (other records, their rounding, other parties'
    shares), so one record moves the output between mu0 = law(a + N) and mu1 = law(a + r + N), r the
    record's rounded integer vector, N the sum of the honest shares (symmetric on Z^d); the
    subsampled output is M = (1-q) mu0 + q mu1 (mixtures over the fixed parts and over r are the same
    on both sides, so joint convexity of exp((alpha-1) D_alpha) reduces to this case).
    * Remove, D_alpha(M || mu0): expand E_mu0[((1-q) + q R)^alpha], R = dmu1/dmu0, by the binomial
      theorem; E_mu0[R^l] = e^((l-1) D_l(mu1 || mu0)) <= e^((l-1) eps(l)). Exact for any mechanism.
    * Add, D_alpha(mu0 || M) <= D_alpha(M || mu0) because T(z) = 2a + r - z swaps mu0 and mu1 (N is
      symmetric and the lattice is invariant), so the law nu of R under mu0 satisfies
      int f(R) dnu = int R f(1/R) dnu. Then 2 e^((alpha-1) D(M||mu0)) = int a(R) dnu and
      2 e^((alpha-1) D(mu0||M)) = int b(R) dnu with, for x = 1-q+qR, y = 1-q+q/R and
      phi(t) = t^alpha - t^(1-alpha): a - b = phi(x) + R phi(y). For R >= 1 put w = q (R-1)/R, so
      x = 1 + R w, y = 1 - w and R >= 1/(1-w); G(R) = phi(1 + R w) + R phi(1 - w) is convex in R
      (phi'' >= 0 on [1, inf)), G(1/(1-w)) = 0, and G'(1/(1-w)) = z^(1-alpha) k(z) >= 0 with
      z = 1 - w, k(z) = (alpha-1) - alpha z + alpha z^(2 alpha - 1) - (alpha-1) z^(2 alpha), convex on
      (0, 1] with k(1) = k'(1) = 0; so a >= b for R >= 1, and for R < 1 by (a - b)(1/R) = (a - b)(R)/R.
      (MTZ 2019, Thm. 5, show the same for the continuous Gaussian.)
    Tests: tests/core/test_distributed_noise.py computes both directions exactly for sums of discrete
    Gaussian shares and checks a >= b on a grid. ``base_rdp(ls)`` maps an int array of orders to RDP
    values. Evaluated in log space, vectorised over (alpha, l)."""
    orders = np.asarray(orders)
    if not (np.all(orders == np.floor(orders)) and np.all(orders >= 2)):
        raise ValueError("the binomial subsampling bound needs integer orders >= 2")
    orders = orders.astype(np.int64)
    if not 0 <= sampling_rate <= 1:
        raise ValueError(f"sampling_rate must be in [0, 1], got {sampling_rate!r}")
    direct = np.asarray(base_rdp(orders), dtype=np.float64)
    if sampling_rate == 1:
        return direct
    if sampling_rate == 0:
        return np.zeros(orders.shape)
    lq, l1q = math.log(sampling_rate), math.log1p(-sampling_rate)
    ls = np.arange(2, int(orders.max()) + 1)
    eps = np.asarray(base_rdp(ls), dtype=np.float64)
    al = orders[:, None].astype(np.float64)
    lf = ls[None, :].astype(np.float64)
    valid = lf <= al
    alc = np.where(valid, al, lf)  # keep gammaln's argument positive where masked
    log_comb = special.gammaln(alc + 1) - special.gammaln(lf + 1) - special.gammaln(alc - lf + 1)
    # each l >= 2 term minus its value at zero RDP, C q^l (1-q)^(a-l) (e^((l-1) eps(l)) - 1): the
    # binomial weights sum to exactly 1, so small results keep their digits
    ex = np.maximum((lf - 1) * eps[None, :], 1e-300)
    with np.errstate(over="ignore"):
        log_expm1 = np.where(ex > 40.0, ex, np.log(np.expm1(np.minimum(ex, 40.0))))
    terms = log_comb + lf * lq + (alc - lf) * l1q + log_expm1
    terms = np.where(valid, terms, -np.inf)
    rest = special.logsumexp(terms, axis=1)  # log of sum_{l>=2} C q^l (1-q)^(a-l) (e^((l-1) eps) - 1)
    with np.errstate(over="ignore", divide="ignore"):
        total = np.where(rest < 0, np.log1p(np.exp(np.minimum(rest, 0.0))), np.logaddexp(0.0, rest))
    capped: np.ndarray = np.minimum(total / (orders - 1), direct)
    return capped


def event_rdp(event: DistributedDiscreteGaussianDpEvent, orders: np.ndarray,
              sampling_rate: float = 1.0) -> np.ndarray:
    """RDP of ``event`` (Poisson-subsampled at ``sampling_rate``) at any orders >= 1: a fractional
    order takes the value at ceil(order) (and below 2 the value at 2), as D_alpha grows with alpha."""
    bad = event_invalid(event)
    if bad:
        raise ValueError(bad)
    ints = np.maximum(2, np.ceil(np.asarray(orders, dtype=np.float64))).astype(np.int64)

    def base(ls: np.ndarray) -> np.ndarray:
        if event.rounding == "party":
            return party_rounding_rdp(ls, event.sigma_share, event.parties, event.l2_sensitivity, event.dimension)
        return ddgauss_rdp(ls, event.sigma_share, event.parties, event.l2_sensitivity,
                           event.l1_sensitivity, event.dimension)

    return poisson_subsampled_rdp(base, sampling_rate, ints)


#: dpfed's events by class name (serialised as dp-accounting's are, :mod:`dpfed.core.event_json`).
DPFED_EVENTS: dict[str, type] = {cls.__name__: cls for cls in (
    EpsilonDeltaBoundDpEvent, ScalarDiscreteGaussianDpEvent, DistributedDiscreteGaussianDpEvent)}
#: Names under which ledgers written before the rename stored dpfed's events: read, never written.
LEGACY_EVENT_NAMES: dict[str, type] = {"EpsilonDeltaDpEvent": EpsilonDeltaBoundDpEvent,
                                       "DiscreteGaussianDpEvent": ScalarDiscreteGaussianDpEvent}
