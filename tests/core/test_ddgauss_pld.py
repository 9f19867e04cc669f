"""The PLD ledger accounts the distributed discrete Gaussian (issue 29 item 1), never below its true epsilon.

The independent reference: the summed shares' pmf by a direct double sum in Python floats (math.fsum),
the hockey-stick divergence sum_z max(U(z) - e^eps L(z), 0) of both directions (add and remove, Poisson-
subsampled as mixtures) over a wide support, products enumerated for compositions and several coordinates,
and epsilon at delta by bisection. No dp-accounting involved.
"""
from __future__ import annotations

import itertools
import math

import dp_accounting
import pytest

from dpfed.core import accounting
from dpfed.core.ddgauss_pld import exact_shift
from dpfed.core.events import DistributedDiscreteGaussianDpEvent as DDG
from dpfed.core.ledger import BudgetLedger

DELTA = 1e-5
R = 40  # support of the reference pmfs: [-R, R], tails below 1e-60 for the sigmas used


def _dg(sigma: float) -> dict[int, float]:
    w = {x: math.exp(-x * x / (2 * sigma * sigma)) for x in range(-3 * R, 3 * R + 1)}
    z = math.fsum(w.values())
    return {x: v / z for x, v in w.items()}


def _sum2(sigma: float) -> dict[int, float]:
    """pmf of the sum of two shares, by the direct double sum."""
    g = _dg(sigma)
    return {z: math.fsum(g[x] * g.get(z - x, 0.0) for x in g) for z in range(-2 * R, 2 * R + 1)}


def _pairs(p: dict[int, float], shift: tuple[int, ...], q: float) -> list[tuple[dict, dict]]:
    """(upper, lower) of both directions for a shift vector (product noise p per coordinate)."""
    pts = list(itertools.product(range(-R, R + 1), repeat=len(shift)))
    base = {z: math.prod(p[c] for c in z) for z in pts}
    moved = {z: math.prod(p.get(c - s, 0.0) for c, s in zip(z, shift, strict=True)) for z in pts}
    mix = {z: q * moved[z] + (1 - q) * base[z] for z in pts}
    return [(mix, base), (base, mix)]


def _compose(pair_a: tuple[dict, dict], pair_b: tuple[dict, dict]) -> tuple[dict, dict]:
    up = {(x, y): pair_a[0][x] * pair_b[0][y] for x in pair_a[0] for y in pair_b[0]}
    lo = {(x, y): pair_a[1][x] * pair_b[1][y] for x in pair_a[1] for y in pair_b[1]}
    return up, lo


def _true_epsilon(pairs: list[tuple[dict, dict]], delta: float) -> float:
    def hs(eps: float) -> float:
        return max(math.fsum(max(u[z] - math.exp(eps) * lo[z], 0.0) for z in u) for u, lo in pairs)
    lo_e, hi_e = 0.0, 50.0
    for _ in range(60):
        mid = (lo_e + hi_e) / 2
        lo_e, hi_e = (lo_e, mid) if hs(mid) <= delta else (mid, hi_e)
    return hi_e


def _pld(event: object) -> float:
    return accounting.epsilon(event, DELTA, accountant="pld")


@pytest.mark.parametrize("q", [1.0, 0.3])
def test_scalar_sum_of_two_shares_matches_direct_hockey_stick(q: float) -> None:
    ev = DDG(1.5, 2, 1.0, 1.0, 1)
    assert exact_shift(ev, q) == (1, 1)
    truth = _true_epsilon(_pairs(_sum2(1.5), (1,), q), DELTA)
    got = _pld(ev if q == 1 else dp_accounting.PoissonSampledDpEvent(q, ev))
    assert truth <= got <= truth + 2e-3, (truth, got)
    assert got < accounting.epsilon(ev if q == 1 else dp_accounting.PoissonSampledDpEvent(q, ev), DELTA,
                                    accountant="rdp")


def test_composition_of_subsampled_releases_matches_direct_product() -> None:
    ev = dp_accounting.PoissonSampledDpEvent(0.3, DDG(1.5, 2, 1.0, 1.0, 1))
    a, b = _pairs(_sum2(1.5), (1,), 0.3)
    truth = _true_epsilon([_compose(a, a), _compose(b, b)], DELTA)
    got = _pld(dp_accounting.SelfComposedDpEvent(ev, 2))
    assert truth <= got <= truth + 4e-3, (truth, got)


def test_unit_moves_in_several_coordinates_dominate_every_integer_shift() -> None:
    ev = DDG(0.8, 1, math.sqrt(2.0), 2.0, 3)  # integer shifts of norm <= sqrt 2: (1,0,0) or (1,1,0)
    assert exact_shift(ev) == (1, 2)
    p = _dg(0.8)
    truth = max(_true_epsilon(_pairs(p, r, 1.0), DELTA) for r in [(1, 0), (1, 1), (1, -1)])
    got = _pld(ev)
    assert truth <= got <= truth + 2e-3, (truth, got)


def test_larger_shifts_use_the_rdp_curve_and_stay_above_the_truth() -> None:
    ev = DDG(0.8, 1, 2.0, 2.0, 2)  # shifts (2,0) and (1,1): no exact pmf pair, the RDP side decides
    assert exact_shift(ev) is None
    p = _dg(0.8)
    truth = max(_true_epsilon(_pairs(p, r, 1.0), DELTA) for r in [(2, 0), (1, 1), (1, -1), (1, 0)])
    got = _pld(ev)
    assert truth <= got <= accounting.epsilon(ev, DELTA, accountant="rdp") + 1e-12


def test_mixed_plan_is_never_charged_more_than_by_rdp() -> None:
    """A secure plan calibrated by RDP (naive Bayes, LVQ) is charged no more by a PLD ledger."""
    ev = dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(0.01, DDG(40.0, 5, 300.0, 3000.0, 500)), 50),
        DDG(3.0, 4, 1.0, 1.0, 1)])
    assert _pld(ev) <= accounting.epsilon(ev, DELTA, accountant="rdp") + 1e-12


def test_pld_ledger_charges_the_distributed_discrete_gaussian() -> None:
    """Fails on the code before: the PLD ledger refused the event and told the party to use rdp."""
    ev = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.05, DDG(2.0, 3, 1.0, 1.0, 1)), 20)
    with BudgetLedger(":memory:", epsilon_limit=5.0, delta_limit=DELTA) as pld, \
            BudgetLedger(":memory:", epsilon_limit=5.0, delta_limit=DELTA, accountant="rdp") as rdp:
        spent = pld.charge("job", ev)
        assert 0 < spent <= rdp.charge("job", ev)
