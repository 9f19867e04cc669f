"""The PLD ledger charges multi-coordinate distributed discrete Gaussian releases by a dominating Gaussian (issue 29
item 1), never below their true privacy loss and close to it.

The independent reference: the summed shares' pmf by numpy convolution of the discrete Gaussian's, the product pmf
of d coordinates, EVERY integer shift vector k != 0 with ||k||_2 <= Delta_2 and ||k||_1 <= Delta_1 enumerated, and
the exact hockey-stick divergence sum_z max(U(z) - e^eps L(z), 0) of both directions (add and remove; Poisson-
subsampled as the mixture (1-q) p + q p(. - k)). No dp-accounting and no dpfed code in the reference; the two
Poisson-summation steps of :mod:`dpfed.core.ddgauss_gdp` are checked against direct sums / quadrature as well.
"""
from __future__ import annotations

import itertools
import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from dpfed.core import accounting, ddgauss_gdp
from dpfed.core.ddgauss_gdp import gaussian_dominance, kernel_log_ratio, sum_log_ratio
from dpfed.core.ddgauss_pld import exact_shift
from dpfed.core.events import DistributedDiscreteGaussianDpEvent as DDG
from dpfed.core.ledger import BudgetLedger

EPS = (0.25, 0.5, 1.0, 2.0, 3.0)


def _sum_pmf(sigma: float, n: int, r: int) -> np.ndarray:
    """pmf of the sum of n N_Z(0, sigma^2) on [-r, r] (shares kept on [-3r, 3r]: the rest is below 1e-100)."""
    x = np.arange(-3 * r, 3 * r + 1, dtype=np.float64)
    share = np.exp(-x * x / (2.0 * sigma * sigma))
    share /= share.sum()
    out = np.ones(1)
    for _ in range(n):
        out = np.convolve(out, share)
    c = (out.size - 1) // 2
    return out[c - r:c + r + 1]


def _shifts(d: int, l2: float, l1: float) -> list[tuple[int, ...]]:
    top = int(math.floor(min(l2, l1)))
    return [k for k in itertools.product(range(-top, top + 1), repeat=d)
            if any(k) and sum(v * v for v in k) <= l2 * l2 + 1e-9 and sum(map(abs, k)) <= l1 + 1e-9]


def _moved(p: np.ndarray, k: int) -> np.ndarray:
    """p(. - k) on the same window (the mass pushed out of it is below 1e-60 for the windows used)."""
    out = np.zeros_like(p)
    if k >= 0:
        out[k:] = p[:p.size - k]
    else:
        out[:k] = p[-k:]
    return out


def _true_delta(sigma: float, n: int, d: int, l2: float, l1: float, q: float, eps: tuple[float, ...],
                r: int) -> np.ndarray:
    """max over every shift in the ball and both directions of the exact hockey-stick divergence, per epsilon."""
    p = _sum_pmf(sigma, n, r)
    best = np.zeros(len(eps))
    for k in _shifts(d, l2, l1):
        base, moved = np.ones(1), np.ones(1)
        for kk in k:
            base, moved = np.multiply.outer(base, p), np.multiply.outer(moved, _moved(p, kk))
        mix = q * moved + (1.0 - q) * base
        for j, e in enumerate(eps):
            best[j] = max(best[j], np.maximum(mix - math.exp(e) * base, 0.0).sum(),
                          np.maximum(base - math.exp(e) * mix, 0.0).sum())
    return best


def _true_epsilon(sigma: float, n: int, d: int, l2: float, l1: float, q: float, delta: float, r: int) -> float:
    lo, hi = 0.0, 10.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _true_delta(sigma, n, d, l2, l1, q, (mid,), r)[0] <= delta else (mid, hi)
    return hi


def _event(sigma: float, n: int, d: int, l2: float, l1: float, q: float) -> dp_accounting.DpEvent:
    ev = DDG(sigma, n, l2, l1, d)
    return ev if q == 1.0 else dp_accounting.PoissonSampledDpEvent(q, ev)


def _charged_and_true(sigma: float, n: int, d: int, l2: float, l1: float, q: float,
                      r: int) -> list[tuple[float, float, float]]:
    """(epsilon, the PLD ledger's delta, the exact delta) at each of EPS."""
    truth = _true_delta(sigma, n, d, l2, l1, q, EPS, r)
    acc = accounting.make_accountant("pld").compose(_event(sigma, n, d, l2, l1, q))  # the ledger's accountant
    return [(e, float(acc.get_delta(e)), float(t)) for e, t in zip(EPS, truth, strict=True)]


def _charged_below_truth(sigma: float, n: int, d: int, l2: float, l1: float, q: float, r: int) -> list[str]:
    """Where the PLD ledger's delta is below the exact one (empty when sound)."""
    return [f"eps {e}: charged {c:.4g} < true {t:.4g}" for e, c, t in _charged_and_true(sigma, n, d, l2, l1, q, r)
            if c < t]


# (sigma_share, parties, dimension, Delta_2, Delta_1, sampling rate, window): none has a known exact pmf pair
CASES = [
    (3.0, 2, 2, 2.0, 100.0, 1.0, 45),   # 12 shifts: (2,0), (1,1), ...
    (3.0, 2, 2, 2.5, 100.0, 0.5, 45),   # Poisson-subsampled, both directions
    (3.0, 2, 3, 2.0, 100.0, 1.0, 36),   # d = 3: 32 shifts (window 8.5 standard deviations: tails below 1e-16)
    (3.0, 2, 3, 2.5, 2.0, 1.0, 36),     # the L1 bound cuts the L2 ball: ||k||_2 <= 2
]


@pytest.mark.parametrize("sigma,n,d,l2,l1,q,r", CASES)
def test_every_shift_in_the_ball_is_charged_at_least_its_exact_delta(sigma: float, n: int, d: int, l2: float,
                                                                     l1: float, q: float, r: int) -> None:
    assert exact_shift(DDG(sigma, n, l2, l1, d), q) is None  # the Gaussian dominance decides, not the 1-D pmf pair
    assert gaussian_dominance(DDG(sigma, n, l2, l1, d)) is not None
    rows = _charged_and_true(sigma, n, d, l2, l1, q, r)
    assert [(e, c, t) for e, c, t in rows if c < t] == []
    # tightness where delta matters (>= 1e-3): within a factor 2.5 (measured 1.08-1.38 without subsampling, 1.44-1.93
    # Poisson-subsampled; the kernel v = 1.5 against S = 18 and Delta_2 = 2.5 where integer shifts reach sqrt 6 cost it)
    assert [(e, c, t) for e, c, t in rows if t >= 1e-3 and c > 2.5 * t] == []
    ev = _event(sigma, n, d, l2, l1, q)
    assert accounting.epsilon(ev, 1e-5, accountant="pld") < accounting.epsilon(ev, 1e-5, accountant="rdp")


@pytest.mark.parametrize("l2,q", [(2.0, 1.0), (3.0, 0.3)])
def test_tight_within_three_percent_in_epsilon(l2: float, q: float) -> None:
    """sigma 6, two shares (S = 72): the charge is within 3 % (+ a grid step) of the exact epsilon (measured 1.1 and
    1.5 %; the kernel v = 1.5 alone costs sqrt(72 / 70.5) - 1 = 1.1 %), where the RDP curve is 9 and 17 % above it."""
    truth = _true_epsilon(6.0, 2, 2, l2, 100.0, q, 1e-5, 110)
    got = accounting.epsilon(_event(6.0, 2, 2, l2, 100.0, q), 1e-5, accountant="pld")
    assert truth <= got <= 1.03 * truth + 1e-3, (truth, got)


def _charges(event: dp_accounting.DpEvent) -> tuple[float, float]:
    """(PLD ledger's charge, RDP ledger's charge) of ``event`` alone, at delta 1e-5."""
    with BudgetLedger(":memory:", epsilon_limit=50.0, delta_limit=1e-5) as pld, \
            BudgetLedger(":memory:", epsilon_limit=50.0, delta_limit=1e-5, accountant="rdp") as rdp:
        return pld.charge("job", event), rdp.charge("job", event)


#: The default secure offers of bench/bench_secure_offer.py (epsilon 1, delta 1e-5, 5 parties): naive Bayes' one
#: release and GLVQ's (its DP-SGD rounds, 5000 Poisson-subsampled steps, and its initialisation).
NAIVE_BAYES = DDG(419190.3830410995, 5, 231704.84003792412, 941357.0, 51)
GLVQ = dp_accounting.ComposedDpEvent([
    DDG(208.44041339709267, 5, 25.879748674620544, 134.4751187746683, 27),
    dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
        0.01, DDG(778.071952875678, 5, 571.2778815870637, 2798.678622452831, 24)), 5000)])


def test_ledger_charges_less_than_rdp_and_never_below_the_truth() -> None:
    truth = _true_epsilon(6.0, 2, 2, 2.0, 100.0, 1.0, 1e-5, 110)
    pld, rdp = _charges(_event(6.0, 2, 2, 2.0, 100.0, 1.0))
    assert truth <= pld < rdp, (truth, pld, rdp)
    # realistic shares: no brute force, but never below the continuous Gaussian of the same variance (a floor)
    pld, rdp = _charges(NAIVE_BAYES)
    ideal = dp_accounting.pld.PLDAccountant().compose(dp_accounting.GaussianDpEvent(
        math.sqrt(5) * NAIVE_BAYES.sigma_share / NAIVE_BAYES.l2_sensitivity)).get_epsilon(1e-5)
    assert ideal <= pld < 0.95 * rdp, (ideal, pld, rdp)
    pld, rdp = _charges(GLVQ)
    assert pld < 0.95 * rdp, (pld, rdp)


def test_lattice_step_bounds_the_sum_against_one_discrete_gaussian() -> None:
    """Step 1: the sum of n shares is within e^(+-tau1) of N_Z(0, n sigma^2) pointwise (direct pmfs)."""
    for sigma, n in [(0.8, 2), (1.0, 3), (1.2, 4)]:
        r = 60
        p = _sum_pmf(sigma, n, r)
        x = np.arange(-r, r + 1, dtype=np.float64)
        w = np.exp(-x * x / (2 * n * sigma * sigma))
        one = w / np.exp(-np.arange(-10 * r, 10 * r + 1) ** 2 / (2 * n * sigma * sigma)).sum()
        worst = np.abs(np.log(p[r - 15:r + 16] / one[r - 15:r + 16])).max()
        assert 0 < worst <= sum_log_ratio(sigma, n), (sigma, n, worst, sum_log_ratio(sigma, n))


def test_kernel_step_bounds_the_discrete_gaussian_against_the_mixture() -> None:
    """Step 2: N_Z(0, S) is within e^(+-tau2) of N_Z(G, v), G ~ N(0, S - v), pointwise (trapezoid rule over g on a
    fine grid: spectrally accurate for this smooth, fast-decaying integrand)."""
    S, z = 4.0, np.arange(-6, 7)
    dg = np.exp(-z * z / (2 * S)) / np.exp(-np.arange(-80, 81) ** 2 / (2 * S)).sum()
    g = np.linspace(-20.0, 20.0, 40_001)  # G's sd is below 2: the rest is below e^-50
    for v in (0.2, 0.3, 0.5):
        rho = np.exp(-(np.arange(-40, 41)[None, :] - g[:, None]) ** 2 / (2 * v)).sum(axis=1)
        dens = stats.norm.pdf(g, scale=math.sqrt(S - v)) / rho
        mixture = np.array([np.trapezoid(dens * np.exp(-(zz - g) ** 2 / (2 * v)), g) for zz in z])
        worst = np.abs(np.log(mixture / dg)).max()
        assert 0 < worst <= kernel_log_ratio(v), (v, worst, kernel_log_ratio(v))


def test_a_dominance_without_the_kernel_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Claiming the summed shares ARE a post-processed Gaussian of variance S (no kernel, no pointwise factor, the
    analogue of c = 1/(sigma sqrt n)) undercharges small shares: the brute force above must see it."""
    case = (1.0, 1, 2, 2.0, 100.0, 1.0, 30)
    assert _charged_below_truth(*case) == []  # the real module: sound (RDP decides where the kernel does not fit)
    monkeypatch.setattr(ddgauss_gdp, "KERNEL_VARIANCES", (1e-12,))
    monkeypatch.setattr(ddgauss_gdp, "kernel_log_ratio", lambda v: 0.0)
    assert gaussian_dominance(DDG(1.0, 1, 2.0, 100.0, 2)) is not None
    assert _charged_below_truth(*case) != []
