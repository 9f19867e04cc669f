"""Federated statistics (issue 27 item 2) against independent references: the charged plan equals an event
built here from the public parameters; the party's statistics before noise equal NumPy's on the clamped
records; the noise in the parties' actual answers has the planned variance; the reported intervals cover
the true values at their nominal rate; the one-party tools agree with the job."""
from __future__ import annotations

import math
from fractions import Fraction

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.dp_event import DiscreteLaplaceDpEvent
from dp_accounting.pld import pld_privacy_accountant

from dpfed.algorithms import statistics
from dpfed.algorithms.contract import Aggregate, JobSpec, Task
from dpfed.algorithms.driver import run_local
from dpfed.algorithms.params import validate
from dpfed.algorithms.registry import get_algorithm
from dpfed.core import accounting
from dpfed.core.events import DistributedDiscreteGaussianDpEvent
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Feature, Schema
from dpfed.simulation.inprocess import run_inprocess

SCHEMA = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=10.0),
                 Feature("v", "numeric", lower=-5.0, upper=5.0), Feature("b", "categorical", categories=2)),
                n_classes=2)
QUERIES = ["count", "mean:u", "var:v", "std:u", "sum:v", "median:u:bins=40", "quantile:v:0.9",
           "histogram:u:bins=5", "histogram:a", "table:a:b"]
TASK = Task("st", 0, "statistics")


def _data(n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    X = np.column_stack([g.integers(0, 3, n), np.minimum(g.gamma(2.0, 1.5, n), 10.0),
                         np.clip(g.normal(0.5, 2.5, n), -5.0, 5.0), g.integers(0, 2, n)])
    return X, g.integers(0, 2, n)


def _spec(eps=1.0, delta=1e-6, mech="auto", queries=QUERIES, by="a", **kw) -> JobSpec:
    p = validate(get_algorithm("statistics"), {"epsilon": eps, "delta": delta, "mechanism": mech, "queries": queries,
                                               **({"group_by": by} if by else {}), **kw}, SCHEMA)
    return JobSpec("st", "statistics", p, SCHEMA)


def _pld_eps(event, delta: float) -> float:
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event)
    return acc.get_epsilon(delta)


def _dlap_pvalue(a: np.ndarray, t: float) -> float:
    """Chi-square p-value of |noise| ``a`` against |X|, X the discrete Laplace of scale ``t``: P(|X| = 0) =
    (1 - q) / (1 + q), P(|X| = k) = 2 (1 - q) q^k / (1 + q), q = e^(-1/t); cells at up to 20 quantiles of ``a``."""
    from scipy import stats

    q = math.exp(-1 / t)
    e = np.unique(np.quantile(a, np.linspace(0, 1, 21)[1:-1]).astype(np.int64))
    F = np.concatenate([[0.0], 1 - 2 * q ** (e + 1) / (1 + q), [1.0]])
    obs = np.bincount(np.searchsorted(e, a, side="left"), minlength=len(e) + 1)
    return float(stats.chisquare(obs, np.diff(F) * len(a)).pvalue)


# ------------------------------------------------------------------------------------------ the plan

def test_blocks_are_counted_independently():
    """The queries above need, per group of ``a``: moments of u (degree 2, for std), moments of v (degree 2),
    a 40-bin grid (too small for a second tree level: a plain histogram), the default 256-cell quantile grid as a
    16-ary tree without its root (Hay et al. 2010: 256 leaves + 16 nodes, 2 levels), a 5-bin histogram of u,
    the histogram of a, the table a x b: 7 blocks (the count reads the first moments block), 8 levels."""
    layout = statistics.job_layout(_spec())
    assert layout.n_blocks == 7
    assert layout.length == 3 * (3 + 3 + 40 + (256 + 16) + 5 + 3 + 6)
    assert sorted(layout.levels) == [1] * 6 + [2]


@pytest.mark.parametrize("eps,delta,mech", [(1.0, 0.0, "auto"), (0.5, 1e-6, "laplace"), (2.0, 1e-6, "gaussian")])
def test_local_plan_equals_an_event_built_here(eps, delta, mech):
    spec = _spec(eps, delta, mech)
    half = statistics.StatisticsParty()
    job = half.job_event(spec)
    assert accounting.event_to_json(job) == accounting.event_to_json(half.task_event(spec, TASK))
    plan = statistics.plan_release(spec)
    m = 8  # 6 one-level blocks + the 2-level quantile tree: a record adds one count per tree level (Hay et al.)
    if mech == "gaussian":  # z: the smallest multiplier dp_accounting's own PLD accepts (to 3e-4)
        assert isinstance(job, dpa.GaussianDpEvent)
        z = job.noise_multiplier
        assert _pld_eps(dpa.GaussianDpEvent(z), delta) <= eps < _pld_eps(dpa.GaussianDpEvent(z * (1 - 3e-4)), delta)
        assert plan.l2 == pytest.approx(math.sqrt(m) * plan.weights[0])
        assert np.all(plan.noise == pytest.approx(z * plan.l2, rel=1e-9))
    else:  # pure epsilon-DP: the randomized-response pair; each level of each block an eps / m discrete Laplace
        assert job == DiscreteLaplaceDpEvent(eps, 1)
        layout = statistics.job_layout(spec)
        W = 1 << 16  # moments blocks (the first two) on the 2^16 grid, count blocks in whole counts
        kinds = [b.kind for b in layout.blocks]
        assert kinds[:2] == ["moments", "moments"] and "moments" not in kinds[2:]
        assert plan.weights.tolist() == [W, W] + [1] * 5 and plan.l1 == 2 * W + 6
        # scale m / eps for a count level (sensitivity 1), (W + 1) m / eps for a moments level (as the
        # library's discrete_laplace does above sensitivity 4096), each rounded up to a denominator <= 2^20
        want = [Fraction(W + 1) * m / Fraction(eps)] * 2 + [Fraction(m) / Fraction(eps)] * 5
        for t, w in zip(plan.scales, want, strict=True):
            assert w <= t <= w + Fraction(1, 1 << 20)
        rows = zip(layout.levels, plan.weights, plan.scales, strict=True)
        assert sum(Fraction(h * int(w)) / t for h, w, t in rows) <= eps
        q = math.exp(-eps / m)
        assert plan.entry_variance(2) == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-9)


def _secure_spec(mech: str = "auto", eps: float = 1.0, queries=QUERIES) -> JobSpec:
    return _spec(eps, 1e-5, mech, queries=queries, noise="distributed", secure_aggregation=True,
                 roster=["p0", "p1", "p2", "p3", "p4"], records=20000, min_survivors=4, colluders=1)


def test_secure_plan_equals_an_event_built_here():
    spec = _secure_spec("gaussian")
    half = get_algorithm("statistics").party_for(spec.params)
    job = half.job_event(spec)
    w = statistics.plan_release(spec).weights
    assert len(w) == 7 and len(set(w.tolist())) == 1
    L = statistics.job_layout(spec).length
    assert isinstance(job, DistributedDiscreteGaussianDpEvent)
    # 8 levels of equal weight (the quantile tree counts once per level): L1 8 W, L2 sqrt(8) W
    assert (job.parties, job.l2_sensitivity, job.l1_sensitivity, job.dimension) == \
        (3, pytest.approx(math.sqrt(8) * w[0]), 8 * w[0], L)
    # the smallest share meeting the target (by the RDP conversion the ledger uses), to 1e-3
    assert accounting.epsilon(job, 1e-5, accountant="rdp") <= 1.0
    smaller = DistributedDiscreteGaussianDpEvent(job.sigma_share * (1 - 1e-3), 3, job.l2_sensitivity,
                                                 job.l1_sensitivity, L)
    assert accounting.epsilon(smaller, 1e-5, accountant="rdp") > 1.0


@pytest.mark.parametrize("eps", [0.1, 1.0])
def test_secure_laplace_plan_equals_an_event_built_here(eps):
    """Distributed discrete Laplace: P_min - c = 3 honest Polya shares per block summing to that block's discrete
    Laplace: each of the 8 levels at e / 8, scale 8 / e for whole counts (sensitivity 1 per level), (W + 1) 8 / e on
    the 2^16 grid of the two moments blocks; charged as the pure-epsilon randomized-response pair; the secure plan's
    own event is the exact pure epsilon sum_b h_b W_b / t_b <= e; ``auto`` picks the smaller per-entry variance of
    the first block under this and the distributed Gaussian (built here)."""
    spec = _secure_spec("laplace", eps)
    half = get_algorithm("statistics").party_for(spec.params)
    job = half.job_event(spec)
    assert isinstance(job, DiscreteLaplaceDpEvent) and job.sensitivity == 1
    e = job.noise_parameter  # the largest pure epsilon the secure (RDP) ledger converts to <= eps at delta 1e-5
    assert accounting.epsilon(job, 1e-5, accountant="rdp") <= eps
    assert accounting.epsilon(DiscreteLaplaceDpEvent(e * (1 + 1e-6), 1), 1e-5, accountant="rdp") > eps
    assert 0.96 * eps < e <= eps
    plan, layout = statistics.plan_release(spec), statistics.job_layout(spec)
    sec = half.plan(spec, TASK)
    W = 1 << 16
    assert plan.mechanism == "ddlaplace" and plan.weights.tolist() == [W, W] + [1] * 5 and plan.l1 == 2 * W + 6
    assert [bl.kind for bl in layout.blocks][:2] == ["moments", "moments"]
    want = [Fraction(W + 1) * 8 / Fraction(e)] * 2 + [Fraction(8) / Fraction(e)] * 5
    assert [bl.offset for bl in layout.blocks] == np.cumsum([0] + [bl.size for bl in layout.blocks])[:-1].tolist()
    assert [(n, b) for n, _, b in sec.laplace.blocks] == [(bl.size, bl.levels * int(w))
                                                          for bl, w in zip(layout.blocks, plan.weights, strict=True)]
    for (_, t, _), w in zip(sec.laplace.blocks, want, strict=True):
        assert w <= t <= w + Fraction(1, 1 << 20)  # rounded up to a rational of denominator <= 2^20
    assert sec.laplace.shares == 3 and sec.integer and sec.l1 == 2 * W + 6
    ev = sec.event()  # the release's own pure epsilon, within the charged one
    assert isinstance(ev, DiscreteLaplaceDpEvent) and ev.sensitivity == 1
    exact = sum(Fraction(bl.levels * int(w)) / t for bl, w, (_, t, _) in zip(layout.blocks, plan.weights,
                                                                                sec.laplace.blocks, strict=True))
    assert exact <= Fraction(ev.noise_parameter) <= Fraction(e)
    for b, w in enumerate(want):
        q = math.exp(-1 / float(w))
        assert plan.noise_var[b] * 3 == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-5)  # 3 shares: one discrete Laplace
    auto = statistics.plan_release(_secure_spec("auto", eps))
    gauss = statistics.plan_release(_secure_spec("gaussian", eps))
    q = math.exp(-1 / float(want[0]))
    lap_var, gauss_var = 2 * q / (1 - q) ** 2 / W ** 2, 3 * gauss.noise[0] ** 2 / float(gauss.weights[0]) ** 2
    assert auto.mechanism == ("ddlaplace" if lap_var <= gauss_var else "ddgauss")
    assert (auto.mechanism == "ddlaplace") == (eps == 1.0)  # 8 levels: L1 = 8 W against L2 = sqrt(8) W


def test_secure_laplace_noise_in_the_parties_answers_is_the_discrete_laplace():
    """Three honest parties' actual secure answers (the real encoder: integer vector + one Polya share mod 2^B)
    summed mod 2^B and decoded, minus the noiseless sum (party_statistics, checked against NumPy above): block by
    block, the discrete Laplace of that block's planned scale (m = 3 levels at e / 3: 3 / e for whole counts,
    (2^16 + 1) 3 / e for the moments block; e built here from the charged event), by the chi-square test of
    |noise| (p > 1e-4 per block: false alarm < 3e-4 over the 3 blocks), over 12 jobs; the same test rejects the
    500-bin histogram's noise drawn at half its scale (power)."""
    from dpfed.core.distributed_noise import decode_integers, modular_sum
    from dpfed.core.polya import sample_polya_share
    from dpfed.federation.secure_session import encode_rows

    X, y = _data(300)
    spec = _spec(1.0, 1e-6, "laplace", queries=["histogram:u:bins=500", "mean:v", "histogram:a", "count"],
                 noise="distributed", secure_aggregation=True, roster=["p0", "p1", "p2", "p3"], records=2000,
                 min_survivors=4, colluders=1)
    half = get_algorithm("statistics").party_for(spec.params)
    sec, layout = half.plan(spec, TASK), statistics.job_layout(spec)
    e = half.job_event(spec).noise_parameter
    parts = [(X[i::3], y[i::3]) for i in range(3)]
    weights = statistics.plan_release(spec).weights
    exact = sum(statistics.party_statistics(x, t, layout, weights, SCHEMA) for x, t in parts)
    resid = []
    for j in range(12):
        msgs = [encode_rows(half.rows(spec, TASK, x, t, None), sec, SecureRNG.from_seed(f"s{j}-{i}"))
                for i, (x, t) in enumerate(parts)]
        resid.append(decode_integers(modular_sum(np.stack(msgs), sec.noise.bits), sec.noise.bits) - exact)
    resid = np.abs(np.stack(resid))
    assert sorted(bl.kind for bl in layout.blocks) == ["hist", "hist", "moments"]
    for b, bl in enumerate(layout.blocks):
        t = 3 / e * ((1 << 16) + 1 if bl.kind == "moments" else 1)
        assert float(sec.laplace.blocks[b][1]) == pytest.approx(t, rel=1e-6)
        assert _dlap_pvalue(resid[:, bl.offset:bl.offset + bl.size].ravel(), t) > 1e-4, bl
    (big,) = [bl for bl in layout.blocks if bl.bins == 500]
    planted = np.abs(sum(sample_polya_share(1.5 / e, 3, 12 * big.size, SecureRNG.from_seed(f"b{i}"))
                         for i in range(3)))
    assert _dlap_pvalue(planted, 3 / e) < 1e-4


def test_secure_outlier_moves_the_rows_by_at_most_the_planned_l1():
    """A record far outside the bounds (clamped) moves the party's secure integer vector by exactly W per block
    level in L1: at most the secure plan's L1 (the Laplace plan's sensitivity) and L2 (its clip)."""
    spec = _secure_spec("laplace")
    half = get_algorithm("statistics").party_for(spec.params)
    sec = half.plan(spec, TASK)
    X, y = _data(200)
    far = np.vstack([X, [2, 1e9, -np.inf, 1]])
    (a,), (b,) = half.rows(spec, TASK, X, y, None), half.rows(spec, TASK, far, np.append(y, 1), None)
    diff = (b - a).astype(float)
    assert np.abs(diff).sum() == sec.l1 and np.linalg.norm(diff) <= sec.noise.clip * (1 + 1e-12)


# ------------------------------------------------------------------------------------------ before the noise

def test_party_statistics_before_noise_equal_numpy_on_clamped_records():
    X, y = _data()
    X[:5, 1] = [1e9, -1e9, np.inf, -np.inf, 11.0]  # far outside [0, 10]: clamped
    spec = _spec()
    layout, plan = statistics.job_layout(spec), statistics.plan_release(spec)
    vec = statistics.party_statistics(X, y, layout, plan.weights, SCHEMA)
    u, v, a, b = np.clip(X[:, 1], 0, 10), np.clip(X[:, 2], -5, 5), X[:, 0].astype(int), X[:, 3].astype(int)
    n = len(X)
    W = float(plan.weights[0])
    # decode with the estimators at zero noise: count, mean, var, std, sum per group of a, against NumPy
    var0 = np.zeros(layout.n_blocks)
    answers = statistics.estimate.estimate_all(layout, SCHEMA, vec, plan.weights, var0, "laplace", 0.95)
    ans = {x.query.label: x for x in answers}
    tol = n / W  # every record's Bernstein entries are rounded to 1 / W of a record
    for g in range(3):
        s = a == g
        assert ans["count() by a"].value[g] == s.sum()
        assert ans["mean(u) by a"].value[g] == pytest.approx(u[s].mean(), abs=10 * tol / s.sum())
        assert ans["var(v) by a"].value[g] == pytest.approx(v[s].var(), abs=100 * 3 * tol / s.sum())
        assert ans["std(u) by a"].value[g] == pytest.approx(u[s].std(), abs=1e-3)
        assert ans["sum(v) by a"].value[g] == pytest.approx(v[s].sum(), abs=10 * tol)
        np.testing.assert_array_equal(ans["histogram(u, bins=5) by a"].value[g], np.histogram(u[s], 5, (0, 10))[0])
        np.testing.assert_array_equal(ans["histogram(a) by a"].value[g], np.bincount(a[s], minlength=3))
        np.testing.assert_array_equal(ans["table(a, b) by a"].value[g],
                                      np.histogram2d(a[s], b[s], bins=(3, 2), range=((0, 3), (0, 2)))[0].ravel())
        # the quantile grid's cells are NumPy's histogram: the quantile lies in its interval at zero noise
        qv = ans["quantile(v, 0.9) by a"]
        true = np.quantile(v[s], 0.9, method="inverted_cdf")
        assert qv.lower[g] <= true <= qv.upper[g] and qv.upper[g] - qv.lower[g] <= 10 / 256 + 1e-12
    # the quantile tree's blocks: leaves = NumPy's 256-bin histogram, level 1 = sums of 16 consecutive leaves
    (tb,) = [bl for bl in layout.blocks if bl.kind == "tree"]
    nodes = vec[tb.offset:tb.offset + tb.size].reshape(3, 272) // int(plan.weights[layout.blocks.index(tb)])
    for g in range(3):
        leaves = np.histogram(v[a == g], 256, (-5, 5))[0]
        np.testing.assert_array_equal(nodes[g], np.concatenate([leaves, leaves.reshape(16, 16).sum(axis=1)]))


@pytest.mark.parametrize("G", [256, 300, 4096])
def test_tree_consistency_is_least_squares(G):
    """Hay et al.'s constrained inference equals the least-squares leaves of the noisy nodes (NumPy lstsq on the
    node-leaf incidence built here: 16 consecutive nodes per parent, the root omitted), and the prefix variances
    equal sum of squares of that linear map's rows."""
    from dpfed.algorithms.statistics import tree

    sizes = [G]
    while len(sizes) < max(1, round(math.log(G, 16))):
        sizes.append(-(-sizes[-1] // 16))
    rows = [np.eye(G)] + [np.stack([np.arange(G) // 16 ** lv == i for i in range(n)]).astype(float)
                          for lv, n in enumerate(sizes[1:], start=1)]
    A = np.vstack(rows)
    assert tree.tree_levels(G) == tuple(sizes)
    if G > 300:
        return  # lstsq on 4368 x 4096 is slow; the structure check above suffices
    x = np.random.default_rng(G).normal(0, 3, (2, A.shape[0]))
    ols = np.linalg.lstsq(A, x.T, rcond=None)[0].T
    np.testing.assert_allclose(tree.consistent_leaves(x, G), ols, atol=1e-9)
    M = np.linalg.pinv(A)  # leaves = M nodes
    C = np.cumsum(M, axis=0)
    np.testing.assert_allclose(tree.prefix_variance(G, 0.9), np.sum((C - 0.9 * C[-1]) ** 2, axis=1), rtol=1e-9)


# ------------------------------------------------------------------------------------------ the noise

def test_laplace_noise_in_the_parties_answers_is_each_blocks_discrete_laplace():
    """The real party half's answers minus its noiseless vector, block by block (20 answers): |noise| against the
    discrete Laplace of the block's own planned scale (m / eps for whole counts, (2^16 + 1) m / eps on the moments
    grid; q built here from m = 3 levels), by a chi-square test at p > 1e-4 per block: a false alarm < 3e-4 over
    the 3 blocks. Power: the same test rejects the 500-bin histogram's noise at half or twice its scale."""
    X, y = _data(500)
    spec = _spec(2.0, 0.0, "laplace", queries=["histogram:u:bins=500", "mean:v", "histogram:a", "count"])
    plan, layout = statistics.plan_release(spec), statistics.job_layout(spec)
    exact = statistics.party_statistics(X, y, layout, plan.weights, SCHEMA)
    noise = np.stack([statistics.StatisticsParty().answer(spec, TASK, X, y, SecureRNG.from_seed(f"n{i}"))
                      .arrays["stats"] - exact for i in range(20)])
    assert sorted(b.kind for b in layout.blocks) == ["hist", "hist", "moments"] and layout.levels == (1, 1, 1)
    for b, block in enumerate(layout.blocks):
        t = 1.5 * ((1 << 16) + 1 if block.kind == "moments" else 1)
        assert float(plan.scales[b]) == pytest.approx(t, rel=1e-6)
        a = np.abs(noise[:, block.offset:block.offset + block.size]).ravel()
        assert _dlap_pvalue(a, float(plan.scales[b])) > 1e-4, block
    (big,) = [bl for bl in layout.blocks if bl.bins == 500]
    hist = np.abs(noise[:, big.offset:big.offset + big.size]).ravel()
    assert _dlap_pvalue(hist, 0.75) < 1e-4 and _dlap_pvalue(hist, 3.0) < 1e-4


def test_gaussian_noise_in_the_parties_answers_matches_the_plan():
    """The answers of the real party half minus its noiseless vector: mean 0 and the planned variance, over
    4 answers x 3 x 540 entries. The sample variance's relative standard error is sqrt((kurtosis - 1) / N);
    a deviation beyond 5 of them is a false alarm with probability < 1e-6 (normal approximation), as is a mean
    beyond 5 standard errors."""
    X, y = _data(500)
    spec = _spec(2.0, 1e-6, "gaussian", queries=["histogram:u:bins=500", "mean:v", "histogram:a", "count"])
    plan, layout = statistics.plan_release(spec), statistics.job_layout(spec)
    exact = statistics.party_statistics(X, y, layout, plan.weights, SCHEMA)
    noise = np.concatenate([statistics.StatisticsParty().answer(spec, TASK, X, y, SecureRNG.from_seed(f"n{i}"))
                            .arrays["stats"] - exact for i in range(4)]).astype(np.float64)
    N, var = len(noise), float(plan.noise_var[0])
    assert N >= 6000 and len(set(plan.weights.tolist())) == 1
    assert abs(noise.mean()) <= 5 * math.sqrt(var / N)
    assert abs(noise.var() / var - 1) <= 5 * math.sqrt(3.0 - 1) / math.sqrt(N)


def test_outlier_moves_each_block_by_at_most_its_sensitivity():
    """A record far outside the bounds (clamped) moves block b of the party's noiseless vector by exactly h_b W_b
    in L1 (whole counts: 1 per level; moments: the 2^16 grid), the plan's L1 in total."""
    spec = _spec(1.0, 0.0, "laplace")
    plan, layout = statistics.plan_release(spec), statistics.job_layout(spec)
    X, y = _data(200)
    a = statistics.party_statistics(X, y, layout, plan.weights, SCHEMA)
    b = statistics.party_statistics(np.vstack([X, [2, 1e9, -np.inf, 1]]), np.append(y, 1), layout, plan.weights, SCHEMA)
    for i, block in enumerate(layout.blocks):
        d = np.abs(b - a)[block.offset:block.offset + block.size].sum()
        assert d == layout.levels[i] * plan.weights[i]
    assert np.abs(b - a).sum() == plan.l1


def test_interval_coverage_fast():
    """150 seeded runs of one job on fixed records (true values: NumPy on the clamped records): each interval
    family covers at >= its nominal 95 % minus 3.5 binomial standard errors (sqrt(.95 .05 / 150) = 1.8 %): a
    false alarm per family < 3e-4 for a correct interval (one-sided normal approximation)."""
    X, y = _data(800, seed=3)
    spec = _spec(0.5, 0.0, "laplace", queries=["mean:u", "var:v", "median:u", "histogram:a"], by="b")
    algo = get_algorithm("statistics")
    u, v, a, b = X[:, 1], X[:, 2], X[:, 0].astype(int), X[:, 3].astype(int)
    truth = [np.array([u[b == g].mean() for g in (0, 1)]), np.array([v[b == g].var() for g in (0, 1)]),
             np.array([np.quantile(u[b == g], 0.5, method="inverted_cdf") for g in (0, 1)]),
             np.array([np.bincount(a[b == g], minlength=3) for g in (0, 1)])]
    hits = np.zeros(4)
    runs = 150
    for s in range(runs):
        coord = run_local(algo, spec, X, y, SecureRNG.from_seed(f"cov{s}")).coordinator
        for i, (ans, t) in enumerate(zip(coord.answers, truth, strict=True)):
            hits[i] += np.mean((ans.lower <= t + 1e-9) & (t - 1e-9 <= ans.upper))
    cover = hits / runs
    assert np.all(cover >= 0.95 - 3.5 * math.sqrt(0.95 * 0.05 / runs)), cover


@pytest.mark.parametrize("t", [0.3, 1.0, 2.0, 10.0, 1e4])
def test_laplace_interval_multiplier_covers_the_discrete_laplace(t):
    """k from the noise variance alone: the discrete Laplace of scale t has P(|X| > k sd) <= alpha = 0.05, summed
    exactly here (P(|X| = j) = (1 - q) q^j (2 - [j = 0]) / (1 + q)), and k tends to ln(20) / sqrt 2 for large t."""
    from dpfed.algorithms.statistics.estimate import block_multiplier

    q = math.exp(-1 / t)
    var = 2 * q / (1 - q) ** 2
    k = block_multiplier("laplace", 0.95, var)
    j = np.arange(0, int(60 * t) + 10)
    p = (1 - q) / (1 + q) * q ** j * np.where(j == 0, 1, 2)
    assert p[j > k * math.sqrt(var)].sum() <= 0.05
    assert k >= math.log(20) / math.sqrt(2) and (t < 100 or k == pytest.approx(math.log(20) / math.sqrt(2), rel=1e-3))


def test_whole_count_intervals_cover_at_small_scale():
    """One 100-bin histogram at epsilon 1: whole counts with the discrete Laplace of scale 1, whose tail at the
    continuous Laplace's k (2.12 sd) misses 7.3 % of the time; 100 seeded runs = 10,000 independent cell intervals
    cover at >= 95 % minus 3.5 binomial standard errors (0.0022 each: false alarm < 3e-4)."""
    X, y = _data(2000, seed=5)
    spec = _spec(1.0, 0.0, "laplace", queries=["histogram:u:bins=100"], by=None)
    truth = np.histogram(np.clip(X[:, 1], 0, 10), 100, (0, 10))[0]
    algo, runs, hits = get_algorithm("statistics"), 100, 0.0
    assert statistics.plan_release(spec).weights.tolist() == [1]
    for s in range(runs):
        (ans,) = run_local(algo, spec, X, y, SecureRNG.from_seed(f"wc{s}")).coordinator.answers
        hits += np.mean((ans.lower <= truth + 1e-9) & (truth - 1e-9 <= ans.upper))
    assert hits / runs >= 0.95 - 3.5 * math.sqrt(0.95 * 0.05 / (100 * runs)), hits / runs


def test_distributed_laplace_interval_coverage():
    """The intervals of a distributed Laplace job: the coordinator's post-processing of the survivors' sum, here
    the exact sum of 4 parties' statistics plus 4 Polya shares planned for m = P_min - c = 3 (NB(4/3) differences:
    more noise than one Laplace, lighter-tailed), with the coordinator's own variance for 4 shares; 150 runs, each
    family at >= 95 % minus 3.5 binomial standard errors (false alarm < 3e-4 per family, as above)."""
    from dpfed.algorithms.statistics.coordinator import StatisticsCoordinator
    from dpfed.core.polya import sample_polya_share

    X, y = _data(800, seed=3)
    spec = _spec(0.5, 1e-6, "laplace", queries=["mean:u", "var:v", "histogram:a"], by="b", noise="distributed",
                 secure_aggregation=True, roster=["p0", "p1", "p2", "p3"], records=1000, min_survivors=4,
                 colluders=1)
    half = get_algorithm("statistics").party_for(spec.params)
    sec, plan = half.plan(spec, TASK), statistics.plan_release(spec)
    assert plan.mechanism == "ddlaplace" and sec.laplace.shares == 3
    exact = statistics.party_statistics(X, y, statistics.job_layout(spec), plan.weights, SCHEMA)
    u, v, a, b = X[:, 1], X[:, 2], X[:, 0].astype(int), X[:, 3].astype(int)
    truth = [np.array([u[b == g].mean() for g in (0, 1)]), np.array([v[b == g].var() for g in (0, 1)]),
             np.array([np.bincount(a[b == g], minlength=3) for g in (0, 1)])]
    hits, runs, rng = np.zeros(3), 150, SecureRNG.from_seed("dcov")
    for _ in range(runs):
        total = exact + sum(np.concatenate([sample_polya_share(t, 3, n, rng) for n, t, _ in sec.laplace.blocks])
                            for _ in range(4))
        coord = StatisticsCoordinator(spec, ["p0", "p1", "p2", "p3"])
        coord.absorb(TASK, Aggregate({"stats": total}, ("p0", "p1", "p2", "p3")))
        for i, (ans, t) in enumerate(zip(coord.answers, truth, strict=True)):
            hits[i] += np.mean((ans.lower <= t + 1e-9) & (t - 1e-9 <= ans.upper))
    cover = hits / runs
    assert np.all(cover >= 0.95 - 3.5 * math.sqrt(0.95 * 0.05 / runs)), cover


# ------------------------------------------------------------------------------------------ API and transports

def test_tools_mean_is_the_one_party_job():
    X, _ = _data(2000)
    e = statistics.mean(X[:, 1], epsilon=1.0, bounds=(0, 10), random_state=7)
    assert e.lower <= e.value <= e.upper and e.se > 0
    assert abs(e.value - np.clip(X[:, 1], 0, 10).mean()) < 6 * e.se + 0.05
    h = statistics.histogram(X[:, 1], epsilon=1.0, bins=4, range=(0, 10), random_state=7)
    assert h.value.shape == (4,) and h.edges.tolist() == [0, 2.5, 5, 7.5, 10]
    g = statistics.median(X[:, 1], 1.0, (0, 10), by=X[:, 3].astype(int), groups=2, random_state=1)
    assert np.shape(g.value) == (2,)


def test_five_parties_distributed_noise_in_process():
    X, y = _data(4000)
    parts = [(X[i::5], y[i::5]) for i in range(5)]
    spec = JobSpec("st5", "statistics", {**_spec().params, "noise": "distributed", "secure_aggregation": True}, SCHEMA)
    res = run_inprocess(spec, parts, seed=3)
    assert res.summary["mechanism"] == "ddlaplace" and res.summary["secure_aggregation"] is True
    assert res.epsilon_spent <= 1.0 * (1 + 1e-9)
    out = {r["query"]: r for r in res.summary["results"]}
    u, a = np.clip(X[:, 1], 0, 10), X[:, 0].astype(int)
    for g in range(3):
        r = out["mean(u) by a"]
        assert abs(r["value"][g] - u[a == g].mean()) <= 6 * r["se"][g]


def test_five_parties_pure_dp_distributed_laplace_in_process():
    """delta 0 with distributed noise: the distributed discrete Laplace at the full epsilon (pure DP, the
    simulated parties' PLD ledgers charge exactly epsilon), 5 parties, the means within 6 se."""
    X, y = _data(4000)
    parts = [(X[i::5], y[i::5]) for i in range(5)]
    spec = JobSpec("st5p", "statistics", validate(get_algorithm("statistics"), {
        "epsilon": 1.0, "delta": 0.0, "queries": ["mean:u", "count"], "group_by": "a", "noise": "distributed",
        "secure_aggregation": True}, SCHEMA), SCHEMA)
    res = run_inprocess(spec, parts, seed=4)
    assert res.summary["mechanism"] == "ddlaplace" and res.epsilon_spent <= 1.0 * (1 + 1e-9)
    r = next(r for r in res.summary["results"] if r["query"] == "mean(u) by a")
    u, a = np.clip(X[:, 1], 0, 10), X[:, 0].astype(int)
    for g in range(3):
        assert abs(r["value"][g] - u[a == g].mean()) <= 6 * r["se"][g]


@pytest.mark.parametrize("queries", [["mean:nope"], ["quantile:u:2"], ["median:a"], [{"stat": "mean", "column": ["u"]}],
                                     [{"stat": "histogram", "column": "u", "bins": [1, 2]}], ["histogram:u:bins=x"],
                                     [["mean", "u"]], [], ["mean:u"] * 65, ["table:a:u"]])
def test_bad_queries_are_refused_in_one_line_by_the_party(queries):
    """A coordinator's malformed queries are refused by the parameter check and by the party's own plan (a
    TaskRejected, never another exception)."""
    from dpfed.core.errors import TaskRejected

    with pytest.raises(TaskRejected, match="statistics"):
        validate(get_algorithm("statistics"), {"epsilon": 1.0, "queries": queries}, SCHEMA)
    spec = JobSpec("bad", "statistics", {"epsilon": 1.0, "delta": 1e-6, "queries": queries}, SCHEMA)
    if queries:  # an empty list means the default queries for the party's plan
        with pytest.raises(TaskRejected, match="invalid statistics parameters"):
            statistics.StatisticsParty().job_event(spec)
