"""Sample-and-aggregate: smooth sensitivity of the center of attention (NRS07 Sec. 4) checked
against brute-force local sensitivities, admissible-noise calibration against independent
computations, GUPT mean sensitivity, and the (epsilon, delta) event in the ledger.

All randomness is seeded; every check is deterministic (false-alarm rate 0). Budget: < 20 s.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from dp_accounting import dp_event
from scipy import integrate, stats

from dpfed.algorithms.kmeans.sample_aggregate import (
    assign_blocks,
    attention_t0,
    center_of_attention,
    center_of_attention_release,
    clamped_mean_release,
    gaussian_dilation_delta,
    gaussian_sliding_delta,
    gaussian_smooth_params,
    radii,
    run_blocks,
    smooth_sensitivity,
    smooth_sensitivity_bounds,
)
from dpfed.core import accounting
from dpfed.core.ledger import BudgetLedger
from dpfed.core.rng import SecureRNG

warnings.filterwarnings("ignore", message="SecureRNG seeded explicitly")

BOX = 1.0
DIAM = 2 * BOX * math.sqrt(2)


def _instance(rng: np.random.Generator, m: int) -> np.ndarray:
    """m answers in [-1, 1]^2: a tight cluster, a looser one and outliers (a hard mix)."""
    a = rng.normal(0.3, 0.05, size=(m // 2 + 1, 2))
    b = rng.normal(-0.4, 0.2, size=(m // 4, 2))
    c = rng.uniform(-1, 1, size=(m - len(a) - len(b), 2))
    return np.clip(np.concatenate([a, b, c]), -BOX, BOX)


def _candidates(Z: np.ndarray) -> np.ndarray:
    g = np.linspace(-BOX, BOX, 9)
    grid = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
    return np.concatenate([grid, Z, Z + 0.01, (Z[:, None] + Z[None]).reshape(-1, 2) / 2])


def _brute_local_sensitivity(Z: np.ndarray) -> float:
    """max over one replaced answer (among many candidates) of ||g(Z) - g(Z')||."""
    t0 = attention_t0(len(Z))
    g = Z[center_of_attention(Z, t0)]
    worst = 0.0
    for j in range(len(Z)):
        for c in _candidates(Z):
            Z2 = Z.copy()
            Z2[j] = c
            worst = max(worst, float(np.linalg.norm(Z2[center_of_attention(Z2, t0)] - g)))
    return worst


@pytest.mark.parametrize("seed,m", [(0, 7), (1, 8), (2, 9), (3, 6)])
def test_smooth_bound_dominates_brute_force_local_sensitivity(seed: int, m: int) -> None:
    Z = _instance(np.random.default_rng(seed), m)
    t0 = attention_t0(m)
    U = smooth_sensitivity_bounds(radii(Z), t0, DIAM)
    ls = _brute_local_sensitivity(Z)
    assert ls > 0
    assert ls <= U[0] + 1e-12
    for beta in (0.01, 0.3, 2.0):
        assert ls <= smooth_sensitivity(radii(Z), t0, beta, DIAM) + 1e-12


@pytest.mark.parametrize("seed", range(4))
def test_smooth_bound_is_beta_smooth_on_neighbours(seed: int) -> None:
    """S(z) <= e^beta S(z') for every neighbour z' tried (NRS07 Def. 2.1, second condition)."""
    rng = np.random.default_rng(100 + seed)
    Z = _instance(rng, 9)
    t0 = attention_t0(9)
    for beta in (0.05, 0.5):
        S = smooth_sensitivity(radii(Z), t0, beta, DIAM)
        for j in range(len(Z)):
            for c in _candidates(Z)[::3]:
                Z2 = Z.copy()
                Z2[j] = c
                S2 = smooth_sensitivity(radii(Z2), t0, beta, DIAM)
                assert S <= math.exp(beta) * S2 * (1 + 1e-12)
                assert S2 <= math.exp(beta) * S * (1 + 1e-12)


def test_center_of_attention_picks_the_dense_answer_and_ignores_order() -> None:
    rng = np.random.default_rng(5)
    Z = np.concatenate([rng.normal(0, 0.01, (6, 3)), rng.uniform(-1, 1, (3, 3))])
    i = center_of_attention(Z)
    assert i < 6
    perm = rng.permutation(len(Z))
    assert np.array_equal(Z[perm][center_of_attention(Z[perm])], Z[i])


def test_t0_makes_balls_of_neighbours_intersect() -> None:
    for m in range(3, 40):
        t0 = attention_t0(m)
        assert 2 * (t0 - 1) > m - 1 and 2 * (t0 - 2) <= m - 1


def test_sliding_delta_matches_gaussian_pld() -> None:
    """The analytic Gaussian delta equals dp-accounting's for a Gaussian of sensitivity alpha."""
    for alpha, eps in [(0.12, 0.5), (0.5, 1.0), (1.0, 2.0)]:
        ours = gaussian_sliding_delta(alpha, eps)
        pld = accounting.delta(dp_event.GaussianDpEvent(1.0 / alpha), eps)
        assert ours == pytest.approx(pld, rel=1e-3, abs=1e-12)


def test_dilation_delta_matches_numerical_integration_in_one_dimension() -> None:
    for lam, eps in [(0.2, 0.05), (-0.2, 0.05), (0.5, 0.3), (-0.4, 0.1)]:
        p = stats.norm(0, 1).pdf
        q = stats.norm(0, math.exp(lam)).pdf
        num = integrate.quad(lambda z, p=p, q=q, eps=eps: max(p(z) - math.exp(eps) * q(z), 0.0), -30, 30, limit=400)[0]
        assert gaussian_dilation_delta(lam, eps, 1) == pytest.approx(num, rel=1e-4, abs=1e-10)


def test_smooth_params_meet_their_target() -> None:
    eps, delta, dim = 1.0, 1e-6, 20
    p = gaussian_smooth_params(eps, delta, dim)
    eps1 = eps2 = eps / 2
    d1 = gaussian_sliding_delta(p.alpha, eps1)
    d2 = max(gaussian_dilation_delta(s * p.beta, eps2, dim) for s in (1, -1))
    assert d1 <= delta / 2 * (1 + 1e-9)
    assert d1 + math.exp(eps1) * d2 <= delta * (1 + 1e-9)
    # and they are tight: 5 % more shift or dilation would break them
    assert gaussian_sliding_delta(p.alpha * 1.05, eps1) > delta / 2
    assert max(gaussian_dilation_delta(s * p.beta * 1.05, eps2, dim) for s in (1, -1)) > delta / (2 * math.exp(eps1))


def test_clamped_mean_sensitivity_is_attained_not_exceeded() -> None:
    rng = np.random.default_rng(0)
    lo, hi = np.array([-1.0, 0.0]), np.array([1.0, 3.0])
    Z = rng.uniform(lo, hi, size=(10, 2))
    rel = clamped_mean_release(Z, lower=lo, upper=hi, noise_multiplier=1.0, rng=SecureRNG.from_seed(0))
    worst = 0.0
    for corner_a in ([-1, 0], [1, 3], [-1, 3], [1, 0]):
        for corner_b in ([-1, 0], [1, 3], [-1, 3], [1, 0]):
            Z1, Z2 = Z.copy(), Z.copy()
            Z1[4], Z2[4] = corner_a, [v * 10 for v in corner_b]  # out-of-box answers get clamped
            worst = max(worst, np.linalg.norm(np.clip(Z1, lo, hi).mean(0) - np.clip(Z2, lo, hi).mean(0)))
    assert worst == pytest.approx(rel.l2_sensitivity)


def test_assign_blocks_add_one_record_changes_one_block() -> None:
    n, m = 1000, 13
    a = assign_blocks(n, m, np.random.default_rng(7))
    b = assign_blocks(n + 1, m, np.random.default_rng(7))
    changed = [j for j in range(m) if not np.array_equal(a[j], b[j])]
    assert len(changed) == 1 and n in b[changed[0]]
    assert sorted(np.concatenate(a)) == list(range(n))
    with pytest.raises(ValueError, match="cannot fill"):
        assign_blocks(5, 6, np.random.default_rng(0))


def test_run_blocks_generic_estimator() -> None:
    X = np.arange(40, dtype=float).reshape(20, 2)
    blocks = assign_blocks(20, 4, np.random.default_rng(1))
    Z = run_blocks(X, blocks, lambda Xb, j: Xb.mean(axis=0))
    assert Z.shape == (4, 2)
    with pytest.raises(ValueError, match="different lengths"):
        run_blocks(X, blocks, lambda Xb, j: Xb[:, 0][: j + 1].mean(keepdims=True) if j else Xb[0])


def test_center_of_attention_release_noise_scale() -> None:
    rng = np.random.default_rng(3)
    Z = np.clip(rng.normal(0.2, 0.01, (1001, 4)), -1, 1)
    rel = center_of_attention_release(Z, epsilon=1.0, delta=1e-6, diameter=4.0, rng=SecureRNG.from_seed(1))
    assert rel.noise_std == pytest.approx(rel.sensitivity / rel.params.alpha)
    # concentrated answers and m - t0 = 499 >> ln(diameter / radius) / beta: S ~ 2 r, far below the diameter
    assert rel.sensitivity < 0.1
    assert np.all(np.abs(rel.value - Z[rel.index]) < 8 * rel.noise_std)


def test_epsilon_delta_event_spend_equals_claim_in_ledger() -> None:
    """The generic (eps, delta) pair is charged exactly: alone it is (eps, delta); composed with
    pure events it never exceeds basic composition; the RDP accountant composes it by basic composition."""
    ev = accounting.EpsilonDeltaBoundDpEvent(0.7, 4e-7)
    assert accounting.epsilon(ev, 4e-7) == pytest.approx(0.7, abs=1e-9)
    assert accounting.epsilon(ev, 1e-7) == math.inf
    both = accounting.compose([ev, dp_event.DiscreteLaplaceDpEvent(0.3, 1)])
    assert accounting.epsilon(both, 4e-7) <= 1.0 + 1e-9
    assert accounting.event_from_json(accounting.event_to_json(both)) == both
    with BudgetLedger(":memory:", epsilon_limit=1.0, delta_limit=4e-7) as led:
        assert led.charge("job", both) <= 1.0 + 1e-9
        assert led.would_exceed(accounting.EpsilonDeltaBoundDpEvent(0.1, 1e-9))
    # an RDP ledger takes it by basic composition (issue 29: every ledger accounts for every event)
    assert accounting.epsilon(ev, 1e-6, accountant="rdp") == pytest.approx(0.7, abs=1e-12)


@pytest.mark.parametrize("aggregator", ["coa", "mean"])
def test_generic_sample_and_aggregate_on_a_median_estimator(aggregator: str) -> None:
    """Any vector-valued estimator: here the per-column median of 2-d records in [0, 10]^2."""
    from dpfed.algorithms.kmeans.sample_aggregate import sample_and_aggregate

    X = np.random.default_rng(0).normal([3.0, 7.0], 0.05, size=(40000, 2)).clip(0, 10)
    value, event = sample_and_aggregate(X, lambda Xb, j: np.median(Xb, axis=0), blocks=800, lower=np.zeros(2),
                                        upper=np.full(2, 10.0), epsilon=1.0, delta=1e-6,
                                        rng=SecureRNG.from_seed(3), aggregator=aggregator)
    # coa noise std ~ 2 r / alpha ~ 0.25 here (alpha ~ 0.12 at eps = 1); the mean's is ~ 0.1
    assert np.allclose(value, [3.0, 7.0], atol=1.0)
    spent = accounting.epsilon(event, 1e-6)
    assert 0.999 <= spent <= 1.0 + 1e-9
    with pytest.raises(ValueError, match="length"):
        sample_and_aggregate(X, lambda Xb, j: Xb.mean(axis=0), blocks=10, lower=np.zeros(3), upper=np.ones(3),
                             epsilon=1.0, delta=1e-6, rng=SecureRNG.from_seed(0))
