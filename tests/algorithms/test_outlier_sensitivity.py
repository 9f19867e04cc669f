"""A record far outside the public bounds moves a party's answer by no more than the sensitivity its plan
assumes (issue 10, "Test strength"), for every algorithm.

Each test answers on neighbouring datasets with identically seeded generators, so both answers carry the
same noise draws, and bounds the difference by the sensitivity the test derives from the public
parameters (plus the public grid's rounding where a mechanism snaps to one). Where the Poisson sample
would shift with the number of records, the neighbour is D + {a record whose contribution is exactly
zero} instead of D, which has the same statistic as D. Records: 1e6 x the bound, +-inf and NaN where the
path does not refuse them (the schema validation at load refuses NaN and inf; these paths clamp them
anyway). Every secure path (distributed noise under secure aggregation) of every learner of the registry is
tested by one test over its rounds (the last section), so a new learner's secure release is covered
automatically. Deterministic: no false alarms.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from dpfed.algorithms import decision_tree, kmeans, linear_models, lvq, naive_bayes, random_forest
from dpfed.algorithms.contract import JobSpec, Released, Task, TaskRejected
from dpfed.algorithms.kmeans import fit as kmeans_fit
from dpfed.algorithms.kmeans.sample_aggregate import (
    attention_t0,
    center_of_attention,
    clamped_mean_release,
    radii,
    smooth_sensitivity,
)
from dpfed.core import distributed_noise as dn
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Feature, Schema
from release_paths import cases, release_paths, secure_rounds

FAR = 1e6
def _arrays(out) -> dict:
    """The arrays of a party half's answer (a bare dict or a :class:`Released` with its events)."""
    return out.arrays if isinstance(out, Released) else out

GRID = 1e-5  # relative allowance for the public grid's rounding (2^-20 of the sensitivity per coordinate)


# ------------------------------------------------------------------------------------------ naive Bayes

NB_SCHEMA = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=10.0),
                    Feature("v", "numeric", lower=-5.0, upper=5.0)), n_classes=2)


@pytest.mark.parametrize("mechanism,delta", [("gaussian", 1e-6), ("laplace", 0.0)])
@pytest.mark.parametrize("u,v", [(FAR * 10, -FAR * 5), (math.inf, -math.inf), (-math.inf, math.inf)])
def test_naive_bayes_outlier_moves_the_release_by_at_most_its_sensitivity(mechanism, delta, u, v):
    """One record adds at most w_g to one entry of each group g: L2 sqrt(sum w_g^2) (Gaussian), L1
    sum w_g (Laplace), in grid units (the released vector is integer: no further rounding)."""
    g = np.random.default_rng(0)
    X = np.column_stack([g.integers(0, 3, 200), g.uniform(0, 10, 200), g.uniform(-5, 5, 200)])
    y = g.integers(0, 2, 200)
    spec = JobSpec("nb", "naive-bayes", {"epsilon": 1.0, "delta": delta, "mechanism": mechanism}, NB_SCHEMA)
    w = naive_bayes.plan_release(spec).weights.astype(float)
    task = Task("nb", 0, "nb-statistics")

    def release(X, y):
        return _arrays(naive_bayes.NaiveBayesParty().answer(spec, task, X, y, SecureRNG.from_seed("nb")))["stats"]

    diff = (release(np.vstack([X, [1, u, v]]), np.append(y, 1)) - release(X, y)).astype(float)
    # clamped to the bound, the record adds exactly w_g to one entry of each group (count, histogram, S, Q)
    assert np.count_nonzero(diff) == len(w) and sorted(np.abs(diff[diff != 0])) == sorted(w)
    if mechanism == "gaussian":
        assert np.linalg.norm(diff) <= math.sqrt(np.sum(w ** 2))
    else:
        assert np.abs(diff).sum() <= w.sum()


# ------------------------------------------------------------------------------------------ random forest

@pytest.mark.parametrize("mechanism,delta", [("gaussian", 1e-6), ("laplace", 0.0)])
@pytest.mark.parametrize("u,v", [(FAR * 10, -FAR * 5), (math.inf, -math.inf), (-math.inf, math.inf)])
def test_random_forest_outlier_moves_the_release_by_at_most_its_sensitivity(mechanism, delta, u, v):
    """One record, clamped into the public box, adds 1 to exactly one leaf count of each of the T trees: L2
    sqrt(T) (Gaussian), L1 T (Laplace); the noise is seeded alike, so the answers differ by that alone."""
    g = np.random.default_rng(0)
    X = np.column_stack([g.integers(0, 3, 200), g.uniform(0, 10, 200), g.uniform(-5, 5, 200)])
    y = g.integers(0, 2, 200)
    spec = JobSpec("rf", "random-forest", {"epsilon": 1.0, "delta": delta, "mechanism": mechanism, "trees": 6,
                                           "depth": 4}, NB_SCHEMA)
    plan = random_forest.plan_release(spec)
    task = Task("rf", 0, "rf-leaf-counts")

    def release(X, y):
        return _arrays(random_forest.ForestParty().answer(spec, task, X, y, SecureRNG.from_seed("rf")))["counts"]

    diff = (release(np.vstack([X, [1, u, v]]), np.append(y, 1)) - release(X, y)).astype(float)
    assert np.count_nonzero(diff) == 6 and np.all(diff[diff != 0] == 1)
    assert np.linalg.norm(diff) <= plan.l2 * (1 + 1e-12) and np.abs(diff).sum() <= plan.l1


# ------------------------------------------------------------------------------------------ decision tree

@pytest.mark.parametrize("u,v", [(FAR * 10, -FAR * 5), (math.inf, -math.inf), (-math.inf, math.inf)])
def test_decision_tree_outlier_moves_each_round_by_at_most_its_sensitivity(u, v):
    """Every round of a depth-2 tree whose root splits on u: one record, clamped into the public box, adds 1 to
    one cell of each of the F = 3 features in a level (L2 sqrt(3)) and to one leaf count (L2 1); the noise is
    seeded alike, so the answers differ by that alone."""
    g = np.random.default_rng(0)
    X = np.column_stack([g.integers(0, 3, 200), g.uniform(0, 10, 200), g.uniform(-5, 5, 200)])
    y = g.integers(0, 2, 200)
    spec = JobSpec("dt", "decision-tree", {"epsilon": 1.0, "delta": 1e-6, "depth": 2, "bins": 4}, NB_SCHEMA)
    plan = decision_tree.plan_release(spec)
    feature, left = np.array([1, -1, -1]), np.zeros((3, 4), np.uint8)
    left[0, :2] = 1
    for r, kind in ((0, "dt-level"), (1, "dt-level"), (2, "dt-leaves")):
        task = Task("dt", r, kind, arrays={"feature": feature if r else -np.ones(3, np.int64), "left": left * (r > 0)})

        def release(X, y, task=task):
            return _arrays(decision_tree.TreeParty().answer(spec, task, X, y, SecureRNG.from_seed("dt")))["counts"]

        diff = (release(np.vstack([X, [1, u, v]]), np.append(y, 1)) - release(X, y)).astype(float)
        assert np.count_nonzero(diff) == plan.rounds[r].l1 and np.all(diff[diff != 0] == 1)
        assert np.linalg.norm(diff) <= plan.rounds[r].l2 * (1 + 1e-12)


# ------------------------------------------------------------------------------------------ LVQ

LVQ_SCHEMA = Schema.numeric_box(4, 0.0, 1.0, n_classes=2)
W_AT = np.array([[0.5, -0.5, 0.25, 0.0], [-0.5, 0.5, 0.0, 0.25]])  # rescaled prototypes
ON_PROTOTYPE = (W_AT[0] + 1) / 2   # a class-0 record exactly on its prototype: gradient exactly zero


def _lvq_data() -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(1)
    return g.uniform(0, 1, (100, 4)), g.integers(0, 2, 100)


@pytest.mark.parametrize("init", ["gaussian", "laplace"])
def test_lvq_init_outlier_moves_counts_by_one_and_sums_by_at_most_sqrt_d(init):
    """Init (no Poisson sample, noise independent of n, so D against D + {outlier}): counts move by 1 in
    one class; the sums of records rescaled into [-1, 1]^d by at most sqrt(d) in L2 (Gaussian) or d in
    L1 (Laplace), plus the grid's rounding. inf and NaN are refused at init (data validation)."""
    X, y = _lvq_data()
    params = lvq.prepare_params({"epsilon": 2.0, "delta": 1e-5, "epochs": 1, "sampling_rate": 0.5, "init": init,
                                 "noise_multiplier": 5.0})
    spec = JobSpec("init", "glvq", params, LVQ_SCHEMA)

    def release(X, y):
        return _arrays(lvq.LVQParty().answer(spec, Task("init", 0, "init"), X, y, SecureRNG.from_seed("init")))

    for far in (FAR, -FAR):
        a, b = release(np.vstack([X, np.full(4, far)]), np.append(y, 1)), release(X, y)
        assert np.array_equal(a["counts"] - b["counts"], [0, 1])
        ds = (a["sums"] - b["sums"]).ravel()
        assert np.count_nonzero(ds[:4]) == 0  # class 0 untouched
        if init == "gaussian":
            assert np.linalg.norm(ds) <= math.sqrt(4) * (1 + GRID)
        else:
            assert np.abs(ds).sum() <= 4 * (1 + GRID)


@pytest.mark.parametrize("algorithm", ["glvq", "gmlvq"])
@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("far", [FAR, -FAR, math.inf, -math.inf, math.nan])
def test_lvq_step_outlier_moves_the_noisy_gradient_by_at_most_the_clip(algorithm, exact, far):
    """A DP-SGD step of the party half on D + {outlier} against D + {a record on its own prototype} (zero
    gradient, so the same statistic as D, and the same number of records, so the same Poisson mask and
    noise draws from the same seed): the answers differ by at most the clip C in L2 (+ the grid)."""
    X, y = _lvq_data()
    clip = 0.5
    params = {"epsilon": 8.0, "delta": 1e-5, "epochs": 1, "sampling_rate": 1.0, "noise_multiplier": 4.0,
              "clip": clip, "exact_noise": exact}
    spec = JobSpec("step", algorithm, params, LVQ_SCHEMA)
    arrays = {"prototypes": W_AT} | ({"omega": np.eye(4) / 2} if algorithm == "gmlvq" else {})
    task = Task("step", 1, "step", arrays=arrays)

    def release(extra):
        out = _arrays(lvq.LVQParty().answer(spec, task, np.vstack([X, extra]), np.append(y, 0),
                                            SecureRNG.from_seed("s")))
        return np.concatenate([out[k].ravel() for k in sorted(out)])

    diff = release(np.full(4, far)) - release(ON_PROTOTYPE)
    assert np.all(np.isfinite(diff)) and np.linalg.norm(diff) <= clip * (1 + GRID) + 1e-12
    if not math.isnan(far):
        assert np.linalg.norm(diff) > 0  # the outlier was sampled and counted (q = 1)


# ------------------------------------------------------------------------------------------ k-means

KM_SCHEMA = Schema.numeric_box(3, 0.0, 1.0)


@pytest.mark.parametrize("far", [FAR, -FAR, math.inf, -math.inf, math.nan])
def test_kmeans_dp_lloyd_outlier_moves_sums_by_at_most_the_radius_and_counts_by_one(far, monkeypatch):
    """DP Lloyd (k = 1, one step, the party half with the same seed on D and D + {outlier}: the random start
    and every noise draw coincide). The step's noisy sums are observed at the mechanism boundary (wrapped,
    not replaced): they move by at most R = ||upper - lower||_2 / 2 in L2 (+ the grid), the noisy count and
    the released sizes by exactly 1."""
    seen: list[np.ndarray] = []
    real = kmeans_fit.gaussian

    def spy(value, **kw):
        rel = real(value, **kw)
        seen.append(np.asarray(rel.value))
        return rel

    monkeypatch.setattr(kmeans_fit, "gaussian", spy)
    X = np.random.default_rng(2).uniform(0, 1, (150, 3))
    spec = JobSpec("km", "kmeans", {"epsilon": 1.0, "delta": 1e-6, "method": "lloyd", "k": 1, "lloyd_iters": 1},
                   KM_SCHEMA)

    def release(X):
        return _arrays(kmeans.KMeansParty().answer(spec, Task("km", 0, "fit"), X, None, SecureRNG.from_seed("km")))

    a, b = release(np.vstack([X, np.full(3, far)])), release(X)
    assert len(seen) == 2
    assert np.linalg.norm(seen[0] - seen[1]) <= math.sqrt(3) / 2 * (1 + GRID)
    assert np.array_equal(a["sizes"] - b["sizes"], [[1.0]])


@pytest.mark.parametrize("far", [FAR, -FAR])
def test_sample_aggregate_outlier_answer_moves_the_release_by_at_most_its_sensitivity(far):
    """One record changes one block answer (independent block assignment). GUPT's mean: an answer far
    outside the box moves the release (same seed) by at most ||upper - lower||_2 / m (+ the grid). Center
    of attention: the noiseless center moves by at most the beta-smooth bound S(Z) of both neighbours
    (NRS07: U_0 = rho_0(t0) + rho_1(t0 + 1) bounds the local sensitivity). A block answer is never
    infinite or NaN (records are clamped before the blocks; the release refuses non-finite answers)."""
    m, p = 30, 6
    lo, hi = np.zeros(p), np.ones(p)
    Z = np.random.default_rng(4).uniform(0.3, 0.7, (m, p))
    Z2 = Z.copy()
    Z2[7] = far
    mean = [clamped_mean_release(z, lower=lo, upper=hi, noise_multiplier=2.0, rng=SecureRNG.from_seed("m")).value
            for z in (Z, Z2)]
    assert np.linalg.norm(mean[1] - mean[0]) <= math.sqrt(p) / m * (1 + GRID)
    t0, diam = attention_t0(m), math.sqrt(p)
    Zc, Z2c = np.clip(Z, lo, hi), np.clip(Z2, lo, hi)  # the release clamps the answers first
    i, i2 = center_of_attention(Zc, t0), center_of_attention(Z2c, t0)
    moved = np.linalg.norm(Zc[i] - Z2c[i2])
    for z in (Zc, Z2c):
        assert moved <= smooth_sensitivity(radii(z), t0, 1e-3, diam)


# ------------------------------------------------------------------------------------------ statistics

STATS_QUERIES = ["count", "mean:u", "var:v", "median:u:bins=32", "quantile:v:0.9", "histogram:u:bins=7",
                 "histogram:a", "table:a:a", "sum:v"]


@pytest.mark.parametrize("mechanism,delta", [("gaussian", 1e-6), ("laplace", 0.0)])
@pytest.mark.parametrize("u,v", [(FAR * 10, -FAR * 5), (math.inf, -math.inf), (-math.inf, math.inf)])
def test_statistics_outlier_moves_the_release_by_at_most_its_sensitivity(mechanism, delta, u, v):
    """Every statistics block (counts, Bernstein moments, histograms, quantile trees, tables, per class): a record
    clamped to the bounds adds exactly its block weight W_b in L1 to each block level h_b, so the vector moves by
    at most sum h_b W_b (L1) and sqrt(sum h_b W_b^2) (L2), the plan's sensitivities, with the same noise draws
    from the same seed."""
    from dpfed.algorithms import statistics

    g = np.random.default_rng(0)
    X = np.column_stack([g.integers(0, 3, 200), g.uniform(0, 10, 200), g.uniform(-5, 5, 200)])
    y = g.integers(0, 2, 200)
    spec = JobSpec("st", "statistics", {"epsilon": 1.0, "delta": delta, "mechanism": mechanism,
                                        "queries": STATS_QUERIES, "group_by": "class"}, NB_SCHEMA)
    plan, layout = statistics.plan_release(spec), statistics.job_layout(spec)
    task = Task("st", 0, "statistics")

    def release(X, y):
        return _arrays(statistics.StatisticsParty().answer(spec, task, X, y, SecureRNG.from_seed("st")))["stats"]

    diff = (release(np.vstack([X, [1, u, v]]), np.append(y, 1)) - release(X, y)).astype(float)
    # the 90 % quantile's default 256-cell grid is a 16-ary tree of 2 levels (256 leaves + 16 nodes, Hay et al.
    # 2010): the record adds W once per level; every other block once
    levels = [2 if block.size == 2 * (256 + 16) else 1 for block in layout.blocks]
    assert sum(levels) == len(layout.blocks) + 1
    for b, block in enumerate(layout.blocks):
        assert np.abs(diff[block.offset:block.offset + block.size]).sum() == levels[b] * plan.weights[b]
    W = plan.weights.astype(float)
    assert plan.l1 == np.dot(levels, W) and plan.l2 == pytest.approx(math.sqrt(np.dot(levels, W * W)))
    assert np.abs(diff).sum() <= plan.l1 and np.linalg.norm(diff) <= plan.l2


# ------------------------------------------------------------------------------------------ PCA

@pytest.mark.parametrize("far", [FAR, math.inf, -math.inf])
def test_pca_outlier_moves_each_round_by_at_most_its_sensitivity(far):
    """Round 0 (sum of grid vectors and weighted count): L2 sqrt(K^2 + K^2); round 1 (upper triangle of the
    augmented outer products): sqrt(K^4 + a^2 K^2 + a^4), K = 1024, a = round(rho K), derived here."""
    from dpfed.algorithms import pca

    schema = Schema.numeric_box(4, 0.0, 1.0)
    spec = JobSpec("pca", "pca", {"epsilon": 1.0, "delta": 1e-6, "k": 2, "clip": 0.5, "mean_weight": 0.5}, schema)
    X = np.random.default_rng(0).uniform(size=(50, 4))
    K, a = 1024.0, 512.0
    bounds = (math.sqrt(2) * K, math.sqrt(K ** 4 + a * a * K * K + a ** 4))
    for r, task in enumerate([Task("pca", 0, "pca-mean"), Task("pca", 1, "pca-covariance",
                                                                arrays={"center": np.full(4, 0.5)})]):
        def release(X, task=task, r=r):
            out = _arrays(pca.PCAParty().answer(spec, task, X, None, SecureRNG.from_seed("pca")))
            return out[("mean", "cov")[r]].astype(np.float64)

        diff = release(np.vstack([X, np.full(4, far)])) - release(X)
        assert np.linalg.norm(diff) <= bounds[r]


# ------------------------------------------------------------------------------------------ linear regression

LR_SCHEMA = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=10.0),
                    Feature("v", "numeric", lower=-5.0, upper=5.0)),
                   target=Feature("t", "numeric", lower=-2.0, upper=2.0))


@pytest.mark.parametrize("method", ["adassp", "functional"])
@pytest.mark.parametrize("far", [FAR, -FAR, math.inf, -math.inf])
def test_linear_regression_outlier_moves_the_release_by_at_most_its_sensitivity(method, far):
    """D against D + {a record with every numeric feature and the target at ``far``}: the same seeded noise, so
    the answers differ by the record's integer vector, at most the plan's L2 (and L1) sensitivity. The bound is
    derived here from the public weights: sqrt(W_xx^2 + W_xy^2 + W_yy^2 + W_n^2) plus half a unit per rounded entry,
    and for AdaSSP's lambda_min entry W_l (1 + D / (2 W_xx)) + 2 (Weyl)."""
    from dpfed.algorithms import linear_regression as lr

    g = np.random.default_rng(0)
    X = np.column_stack([g.integers(0, 3, 200), g.uniform(0, 10, 200), g.uniform(-5, 5, 200)])
    y = g.uniform(-2, 2, 200)
    spec = JobSpec("lr", "linear-regression", {"epsilon": 1.0, "delta": 1e-5, "method": method}, LR_SCHEMA)
    plan = lr.plan_release(spec)
    w, d = plan.weights, 3 + 2 + 1
    rounded = d * (d + 1) // 2 + d + 1
    l2 = math.hypot(w["xx"], w["xy"], w["yy"], w["n"]) + 0.5 * math.sqrt(rounded)
    l1 = w["xx"] * (d + 1) / 2 + w["xy"] * math.sqrt(d) + w["yy"] + w["n"] + 0.5 * rounded
    if method == "adassp":
        dl = w["lmin"] * (1 + d / (2 * w["xx"])) + 2
        l2, l1 = math.hypot(l2, dl), l1 + dl
    task = Task("lr", 0, "lr-statistics")
    out = np.array([[2.0, far, -far]]), np.array([far])
    a = [_arrays(lr.LinearRegressionParty().answer(spec, task, Xs, ys, SecureRNG.from_seed("lr")))["stats"]
         for Xs, ys in ((X, y), (np.vstack([X, out[0]]), np.append(y, out[1])))]
    diff = (a[1] - a[0]).astype(float)
    assert np.linalg.norm(diff) <= l2 * (1 + 1e-9) and plan.l2 <= l2 * (1 + 1e-6)
    assert np.abs(diff).sum() <= l1 * (1 + 1e-9)


# ------------------------------------------------------------------------------------------ linear models

LM_SCHEMA = Schema((Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=10.0),
                    Feature("v", "numeric", lower=-5.0, upper=5.0)), n_classes=2)


@pytest.mark.parametrize("algorithm", ["logistic-regression", "linear-svm"])
@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("far", [FAR, -FAR, math.inf, -math.inf, math.nan])
def test_linear_model_step_outlier_moves_the_noisy_gradient_by_at_most_the_clip(algorithm, exact, far):
    """A DP-SGD step (q = 1) of the party half on D + {outlier} against D + {neighbour}, the same number of
    records, so the same Poisson mask and noise draws from the same seed. Linear SVM: the neighbour has a
    margin > 1 + h at the broadcast weights (zero gradient: the statistic of D), so the answers differ by at most
    C; logistic regression (no record has a zero gradient): the neighbour is a copy of the first record, so at
    most 2 C (both contributions are clipped to C). The outlier's numeric features are at ``far``."""
    g = np.random.default_rng(0)
    X = np.column_stack([g.integers(0, 3, 40), g.uniform(0, 10, 40), g.uniform(-5, 5, 40)]).astype(float)
    y = g.integers(0, 2, 40)
    clip = 0.5
    params = {"epsilon": 8.0, "delta": 1e-5, "epochs": 1, "sampling_rate": 1.0, "noise_multiplier": 4.0,
              "clip": clip, "exact_noise": exact}
    spec = JobSpec("lm-step", algorithm, params, LM_SCHEMA)
    W = np.zeros((1, 6))
    W[0, -1] = 10.0  # every record of class 1 has margin 10 > 1 + h
    task = Task("lm-step", 1, "step", arrays={"weights": W})

    def release(extra: np.ndarray, label: int) -> np.ndarray:
        out = _arrays(linear_models.LinearParty().answer(spec, task, np.vstack([X, extra]), np.append(y, label),
                                                         SecureRNG.from_seed("s")))
        return out["grad"].ravel()

    svm = algorithm == "linear-svm"
    outlier = np.array([1.0, far, far])
    diff = release(outlier, 0) - (release(np.array([0.0, 5.0, 0.0]), 1) if svm else release(X[0], y[0]))
    bound = clip if svm else 2 * clip
    assert np.all(np.isfinite(diff)) and np.linalg.norm(diff) <= bound * (1 + GRID) + 1e-12
    if not math.isnan(far) and svm:
        assert np.linalg.norm(diff) > 0  # the outlier was sampled and counted (q = 1)


# ------------------------------------------------------------------------------------------ every secure path

#: The local path of every learner of the registry has its own test above (a new learner must add one).
LOCAL_TESTS = {"naive-bayes": test_naive_bayes_outlier_moves_the_release_by_at_most_its_sensitivity,
               "glvq": test_lvq_step_outlier_moves_the_noisy_gradient_by_at_most_the_clip,
               "gmlvq": test_lvq_step_outlier_moves_the_noisy_gradient_by_at_most_the_clip,
               "kmeans": test_kmeans_dp_lloyd_outlier_moves_sums_by_at_most_the_radius_and_counts_by_one,
               "statistics": test_statistics_outlier_moves_the_release_by_at_most_its_sensitivity,
               "pca": test_pca_outlier_moves_each_round_by_at_most_its_sensitivity,
               "linear-regression": test_linear_regression_outlier_moves_the_release_by_at_most_its_sensitivity,
               "random-forest": test_random_forest_outlier_moves_the_release_by_at_most_its_sensitivity,
               "decision-tree": test_decision_tree_outlier_moves_each_round_by_at_most_its_sensitivity,
               "logistic-regression": test_linear_model_step_outlier_moves_the_noisy_gradient_by_at_most_the_clip,
               "linear-svm": test_linear_model_step_outlier_moves_the_noisy_gradient_by_at_most_the_clip}
SECURE_PATHS = sorted(n for n, mode in release_paths() if mode == "secure")


def test_every_release_path_is_covered():
    assert sorted(n for n, mode in release_paths() if mode == "local") == sorted(LOCAL_TESTS)
    assert {"kmeans", "naive-bayes"} <= set(SECURE_PATHS)


def _party_vector(case, task, X: np.ndarray, y: np.ndarray | None) -> np.ndarray:
    """What the party's encoder sums for ``task`` before any noise: an integer plan's rows as they are, a real
    plan's rows each clipped to the plan's clip (:func:`dpfed.core.distributed_noise.party_row_sum`). A fresh
    secure half per call (a half may remember the rounds it answered)."""
    half = case.algo.party_for(case.spec.params)
    plan = half.plan(case.spec, task)
    total = np.zeros(plan.noise.dimension, dtype=np.int64 if plan.integer else np.float64)
    for rows in half.rows(case.spec, task, X, y, SecureRNG.from_seed("secure-outlier")):
        if plan.integer:
            total += np.asarray(rows).astype(np.int64).sum(axis=0)
        elif len(rows):
            total += dn.party_row_sum(np.asarray(rows, dtype=np.float64), plan.noise.clip)
    return total


@pytest.mark.parametrize("name", SECURE_PATHS)
@pytest.mark.parametrize("far", [FAR, -FAR, math.inf, -math.inf, math.nan])
def test_secure_outlier_moves_the_partys_vector_by_at_most_the_plans_sensitivity(name, far):
    """Every secure round of every learner (the coordinator's own tasks, from the registry): a party's records
    D + {outlier} against D + {a copy of its first record} (the same number of records, so the same block
    assignment, Poisson sample and seeded draws), before the noise share: the vectors differ by at most twice
    the plan's L2 sensitivity (its clip: both records' contributions are bounded by it) and, for an integer plan,
    twice its L1 sensitivity. The outlier has every numeric feature at ``far`` (a refusal is allowed only for a
    non-finite one). This catches a secure path that no longer clamps records into the public box."""
    for case in cases(name, "secure", tag="secure-outlier"):
        X, y = case.data[0]
        outlier = np.array([0.0 if f.kind == "categorical" else far for f in case.spec.schema.features])
        X_out, X_in = np.vstack([X, outlier]), np.vstack([X, X[:1]])
        y2 = None if y is None else np.append(y, y[0])
        for task in secure_rounds(case):
            plan = case.algo.party_for(case.spec.params).plan(case.spec, task)
            try:
                a = _party_vector(case, task, X_out, y2)
            except (TaskRejected, ValueError):
                assert not math.isfinite(far), f"{name} round {task.round}: a finite outlier was refused"
                continue
            diff = (a - _party_vector(case, task, X_in, y2)).astype(np.float64)
            assert np.all(np.isfinite(diff)), f"{name} round {task.round} ({task.kind})"
            assert np.linalg.norm(diff) <= 2 * plan.noise.clip * (1 + 1e-9), f"{name} round {task.round} ({task.kind})"
            if plan.integer:
                assert np.abs(diff).sum() <= 2 * plan.l1 * (1 + 1e-9), f"{name} round {task.round} ({task.kind})"
