"""Logistic regression and linear SVM (issue 26 item 2) against independent references.

* the encoding equals a record-by-record one-hot / rescaling written here;
* every per-record gradient equals central finite differences of the loss written here from its paper's
  formula (logistic, softmax, Huber hinge binary and one-vs-rest), and the engine's ghost norms and sums
  equal the materialised rows';
* each plan (local, secure) is the composition of its rounds' events, and equals an event built here from
  the public parameters with dp_accounting classes, each noise parameter checked by dp_accounting's own
  PLD accountant to be the smallest that meets its target;
* the noise in the parties' actual answers (the real party session) has the variance of the charged event
  (chi-square tests, false-alarm rate 1e-4 each, each rejecting half the noise variance); objective
  perturbation's draws of b: false-alarm rate 1e-6;
* objective perturbation's noise scale and extra regulariser equal the formulas of Chaudhuri et al. 2011
  (Alg. 2) and Kifer et al. 2012 (Thm. 2), computed here;
* the estimators learn (accuracy on separable data).
"""
from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from scipy import stats

from dpfed.algorithms import DPLinearSVM, DPLogisticRegression, dpsgd
from dpfed.algorithms.contract import JobSpec, Task
from dpfed.algorithms.linear_models import LinearGradient, LinearParty, SecureLinearParty, objective_noise
from dpfed.algorithms.linear_models.objective import draw_b
from dpfed.algorithms.linear_models.plan import prepare_params
from dpfed.core import accounting
from dpfed.core.ledger import BudgetLedger
from dpfed.core.rng import SecureRNG
from dpfed.data.encoding import encode, max_norm
from dpfed.data.schema import Feature, Schema
from dpfed.federation.session import PartyContext, decide
from noise_checks import assert_gaussian_variance, atoms

FEATURES = (Feature("a", "categorical", categories=3), Feature("u", "numeric", lower=0.0, upper=10.0),
            Feature("v", "numeric", lower=-5.0, upper=5.0))
SCHEMA2, SCHEMA3 = Schema(FEATURES, n_classes=2), Schema(FEATURES, n_classes=3)
ALPHA = 1e-6  # false-alarm rate of each statistical test


def _records(n: int, seed: int, classes: int = 2) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    X = np.column_stack([g.integers(0, 3, n), g.uniform(-2, 12, n), g.uniform(-5, 5, n)]).astype(float)
    return X, g.integers(0, classes, n)


# ------------------------------------------------------------------------------------------ encoding

def test_encoding_is_one_hot_then_rescaled_and_bounded():
    X, _ = _records(50, 0)
    X[0] = [7.0, np.nan, 1e9]  # a code outside the domain, a NaN, a value far outside the bounds
    Z = encode(SCHEMA2, X)
    for i, (a, u, v) in enumerate(X):  # deliberately record by record
        num = [min(max((u - 0) / 10, 0), 1) if u == u else 0.0, min(max((v + 5) / 10, 0), 1)]
        hot = [1.0 if a == c else 0.0 for c in range(3)]
        np.testing.assert_allclose(Z[i], num + hot, err_msg=str(i))
    assert np.all(np.linalg.norm(Z, axis=1) <= max_norm(SCHEMA2) + 1e-12)


# ------------------------------------------------------------------------------------------ gradients

def _loss_one(loss: str, W: np.ndarray, x: np.ndarray, y: int, h: float) -> float:
    """One record's loss from the papers' formulas (independent of the package's vectorised code)."""
    s = W[:, :-1] @ x + W[:, -1]
    if loss == "logistic" and len(s) == 1:
        return math.log1p(math.exp(s[0])) - y * s[0]
    if loss == "logistic":
        return math.log(sum(math.exp(v) for v in s)) - s[y]

    def hub(z: float) -> float:  # Chaudhuri et al. 2011, Sec. 3.4.2
        return 0.0 if z > 1 + h else (1 - z if z < 1 - h else (1 + h - z) ** 2 / (4 * h))
    if len(s) == 1:
        return hub((2 * y - 1) * s[0])
    return sum(hub((1.0 if k == y else -1.0) * s[k]) for k in range(len(s)))


@pytest.mark.parametrize("loss,classes", [("logistic", 2), ("logistic", 3), ("huber", 2), ("huber", 3)])
def test_per_record_gradients_equal_finite_differences(loss, classes):
    schema = SCHEMA2 if classes == 2 else SCHEMA3
    X, y = _records(12, 1, classes)
    Z = encode(schema, X)
    k = 1 if classes == 2 else classes
    W = np.random.default_rng(2).normal(0, 1.0, (k, Z.shape[1] + 1))
    grad = LinearGradient(W, loss, huber=0.5)
    rows = grad.rows(Z, y)
    eps = 1e-6
    for i in range(len(Z)):
        fd = np.zeros(W.size)
        for j in range(W.size):
            Wp, Wm = W.copy().ravel(), W.copy().ravel()
            Wp[j] += eps
            Wm[j] -= eps
            fd[j] = (_loss_one(loss, Wp.reshape(W.shape), Z[i], y[i], 0.5)
                     - _loss_one(loss, Wm.reshape(W.shape), Z[i], y[i], 0.5)) / (2 * eps)
        np.testing.assert_allclose(rows[i], fd, atol=1e-6, err_msg=f"record {i}")
    ghost = grad.ghost(Z, y)
    np.testing.assert_allclose(ghost.norms(), np.linalg.norm(rows, axis=1), rtol=1e-12)
    w = np.random.default_rng(3).uniform(size=len(Z))
    np.testing.assert_allclose(ghost.weighted_sum(w), rows.T @ w, rtol=1e-12, atol=1e-12)
    with np.errstate(divide="ignore"):  # a zero row (Huber: margin > 1 + h) is kept as it is
        clipped = rows * np.minimum(1.0, 0.3 / np.linalg.norm(rows, axis=1))[:, None]
    np.testing.assert_allclose(dpsgd.clipped_sum(grad, Z, y, 0.3).vector, clipped.sum(0), rtol=1e-6, atol=1e-12)


# ------------------------------------------------------------------------------------------ plans

def _pld_eps(event: dpa.DpEvent, delta: float) -> float:
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("algorithm", ["logistic-regression", "linear-svm"])
def test_plan_is_its_rounds_and_equals_an_independent_event(algorithm):
    eps, delta, q, epochs, cf = 1.0, 1e-5, 0.25, 2.0, 0.05
    params = prepare_params({"epsilon": eps, "delta": delta, "sampling_rate": q, "epochs": epochs,
                             "count_fraction": cf})
    spec = JobSpec("plan", algorithm, params, SCHEMA3)
    half = LinearParty()
    job = half.job_event(spec)
    steps = round(epochs / q)
    rounds = [Task("plan", 0, "count")] + [Task("plan", t, "step") for t in range(1, steps + 1)]
    assert accounting.event_to_json(accounting.compose([half.task_event(spec, t) for t in rounds])) == \
        accounting.event_to_json(accounting.compose([job]))
    zc, z = job.events[0].noise_multiplier, params["noise_multiplier"]
    # the count's multiplier: the smallest (to 1e-4) meeting cf * eps alone
    assert _pld_eps(dpa.GaussianDpEvent(zc), delta) <= cf * eps < _pld_eps(dpa.GaussianDpEvent(zc * (1 - 1e-4)), delta)

    def built(zz: float) -> dpa.DpEvent:
        return dpa.ComposedDpEvent([dpa.GaussianDpEvent(zc), dpa.SelfComposedDpEvent(
            dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(zz)), steps)])

    assert _pld_eps(built(z), delta) <= eps < _pld_eps(built(z * (1 - 3e-4)), delta)
    assert accounting.event_to_json(accounting.compose([built(z)])) == accounting.event_to_json(
        accounting.compose([job]))


def test_secure_plan_is_its_rounds():
    params = {"epsilon": 1.0, "delta": 1e-5, "sampling_rate": 0.25, "epochs": 1.0, "noise": "distributed",
              "secure_aggregation": True, "roster": ["a", "b", "c"], "records": 300}
    spec = JobSpec("secure-plan", "logistic-regression", params, SCHEMA3)
    half = SecureLinearParty()
    job = half.job_event(spec)
    rounds = [Task(spec.job_id, 0, "count")] + [Task(spec.job_id, t, "step") for t in range(1, 5)]
    assert accounting.event_to_json(accounting.compose([half.task_event(spec, t) for t in rounds])) == \
        accounting.event_to_json(accounting.compose([job]))
    for t in rounds:  # each round's secure plan lies within its charged event
        assert accounting.within([half.plan(spec, t).event()], half.task_event(spec, t)) == []
    assert accounting.epsilon(job, 1e-5, accountant="rdp") <= 1.0 * (1 + 1e-9)


# ------------------------------------------------------------------------------------------ noise

def _chi2_ok(samples: np.ndarray, sigma: float) -> bool:
    """Two-sided chi-square test of the variance (mean known to be 0) at false-alarm rate ALPHA."""
    n = samples.size
    s = float((samples.astype(np.float64) ** 2).sum()) / sigma ** 2
    return stats.chi2.ppf(ALPHA / 2, n) <= s <= stats.chi2.ppf(1 - ALPHA / 2, n)


def _session(X: np.ndarray, y: np.ndarray, spec: JobSpec, name: str = "p"):
    """The real party session: decide (charge the whole plan), then answer tasks as the daemon does."""
    ctx = PartyContext(name, X, y, spec.schema, BudgetLedger(":memory:", epsilon_limit=1e6, delta_limit=0.5),
                       secure_aggregation=spec.params.get("noise") == "distributed")  # float shares: simulation
    d = decide(ctx, spec)
    assert d.accept, d.reason
    return d.session, d.event


@pytest.mark.parametrize("noise", ["local", "distributed"])
def test_noise_in_the_answers_matches_the_charged_event(noise):
    """Through decide + PartySession.answer. Steps: linear SVM at weights giving every record a margin > 1 + h,
    so the clipped sum is exactly 0 and each answer is the noise alone: variance (z C)^2, z read from the
    charged PoissonSampledDpEvent(q, GaussianDpEvent(z)) (distributed, simulation: / P), 30 steps x 41
    coordinates. The count (round 0) over 300 parties' sessions: round(sigma Z) with sigma from the charged
    GaussianDpEvent (sensitivity 1; / P when distributed), variance sigma^2 + 1/12. Each chi-square test
    (``noise_checks.assert_gaussian_variance``) has false-alarm rate 1e-4 and rejects half the noise variance."""
    schema, clip, parties = Schema.numeric_box(40, 0.0, 1.0, n_classes=2), 0.7, 4 if noise == "distributed" else 1
    params = {"epsilon": 50.0, "delta": 1e-5, "epochs": 30, "sampling_rate": 1.0, "clip": clip, "noise_multiplier": 3.0,
              "noise": noise, "parties": parties, "count_fraction": 0.01}
    spec = JobSpec(f"noise-{noise}", "linear-svm", params, schema)
    X = np.random.default_rng(0).uniform(size=(200, 40))
    y = np.ones(200, dtype=np.int64)
    W = np.zeros((1, 41))
    W[0, -1] = 10.0
    session, event = _session(X, y, spec)
    (count, _), (step, steps) = (a for a in atoms(event))
    assert steps == 30 and step.sampling_probability == 1.0
    out = np.concatenate([session.answer(Task(spec.job_id, t, "step", arrays={"weights": W}))["grad"].ravel()
                          for t in range(1, 31)])
    sd = step.event.noise_multiplier * clip / math.sqrt(parties)
    assert_gaussian_variance(out, sd ** 2)
    counts = np.array([_session(X[:30], y[:30], spec, f"p{i}")[0].answer(Task(spec.job_id, 0, "count"))["count"][0]
                       for i in range(300)]) - 30
    sc = math.sqrt(count.noise_multiplier ** 2 / parties + 1 / 12)
    assert_gaussian_variance(counts, sc ** 2)


# ------------------------------------------------------------------------------------------ objective perturbation

@pytest.mark.parametrize("n,eps,l2", [(1000, 1.0, 1e-3), (50, 0.5, 1e-3), (30_000, 0.1, 1e-4)])
@pytest.mark.parametrize("c", [0.25, 1.0])
def test_objective_perturbation_noise_is_the_papers(n, eps, l2, c):
    # Chaudhuri, Monteleoni & Sarwate 2011, Algorithm 2 (pure epsilon)
    eps_p = eps - math.log(1 + 2 * c / (n * l2) + (c / (n * l2)) ** 2)
    delta_reg = 0.0
    if eps_p <= 0:
        delta_reg, eps_p = c / (n * (math.exp(eps / 4) - 1)) - l2, eps / 2
    pure = objective_noise(n, eps, 0.0, c, l2)
    assert pure.kind == "gamma" and pure.scale == pytest.approx(2 / eps_p, rel=1e-12)
    assert pure.extra_l2 == pytest.approx(delta_reg, rel=1e-12, abs=1e-15)
    # Kifer, Smith & Thakurta 2012, Theorem 2 (Gaussian): s^2 = zeta^2 (8 log(2/delta) + 4 eps) / eps^2, zeta = 1,
    # and n Delta = 2 c / eps (the rank-one Hessian of a GLM loss, norm <= c)
    approx = objective_noise(n, eps, 1e-5, c, l2)
    assert approx.kind == "gaussian"
    assert approx.scale ** 2 == pytest.approx((8 * math.log(2 / 1e-5) + 4 * eps) / eps ** 2, rel=1e-12)
    assert approx.extra_l2 * n == pytest.approx(2 * c / eps, rel=1e-12)


def test_objective_perturbation_draws_b_with_the_planned_norm():
    """|b| ~ Gamma(d, scale) (mean d * scale, sd sqrt(d) scale): the mean of 400 draws within 5 standard errors
    (false-alarm rate < 1e-6); the Gaussian's coordinates pass the chi-square test."""
    noise = objective_noise(100, 1.0, 0.0, 0.25, 1e-2)
    rng = SecureRNG.from_seed("b")
    d = 6
    norms = np.array([np.linalg.norm(draw_b(noise, d, rng)) for _ in range(400)])
    assert abs(norms.mean() - d * noise.scale) <= 5 * math.sqrt(d) * noise.scale / math.sqrt(400)
    g = objective_noise(100, 1.0, 1e-5, 0.25, 1e-2)
    assert _chi2_ok(np.concatenate([draw_b(g, d, rng) for _ in range(200)]), g.scale)


# ------------------------------------------------------------------------------------------ estimators

def _separable(n: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    y = g.integers(0, classes, n)
    centers = np.eye(classes, 4) * 0.6 + 0.2
    return np.clip(centers[y] + g.normal(0, 0.08, (n, 4)), 0, 1), y


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("cls", [DPLogisticRegression, DPLinearSVM])
@pytest.mark.parametrize("classes,method", [(2, "dpsgd"), (3, "dpsgd"), (2, "objective")])
def test_estimators_learn(cls, classes, method):
    X, y = _separable(3000, classes, 5)
    m = cls(epsilon=2.0, bounds=(0.0, 1.0), method=method, epochs=3, sampling_rate=0.1, random_state=1,
            l2=1e-3 if method == "objective" else 1e-5).fit(X, y)
    assert m.score(*_separable(500, classes, 6)) >= 0.95
    if cls is DPLogisticRegression:
        p = m.predict_proba(X[:5])
        np.testing.assert_allclose(p.sum(1), 1.0)
        assert p.shape == (5, classes)
