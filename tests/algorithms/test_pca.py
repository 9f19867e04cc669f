"""PCA (issue 26 item 3) against independent references: the plan equals an event built here from the
parameters; the statistics before noise equal a NumPy computation on the clipped records; the noise measured
from the parties' actual answers (through the real party session) matches the plan; a record far outside the
bounds moves each answer by at most the planned sensitivity; the estimator recovers a planted subspace.
Statistical checks: two-sided chi-square intervals with false-alarm rate 1e-4 each (noise_checks.ALPHA)."""
from __future__ import annotations

import functools
import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant

from dpfed.algorithms import DPPCA, get_algorithm, pca
from dpfed.algorithms.contract import JobSpec, Released, Task
from dpfed.algorithms.params import validate
from dpfed.core.ledger import BudgetLedger
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Schema
from dpfed.federation.session import PartyContext, decide
from noise_checks import assert_gaussian_variance

D = 6
BOX = Schema.numeric_box(D, 0.0, 4.0)
PARAMS = {"epsilon": 1.0, "delta": 1e-5, "k": 2, "clip": 0.5, "origin": "lower", "mean_share": 0.2}


def _spec(**kw) -> JobSpec:
    return JobSpec("pca-t", "pca", validate(get_algorithm("pca"), {**PARAMS, **kw}, BOX), BOX)


def _data(n: int = 300, seed: int = 0) -> np.ndarray:
    g = np.random.default_rng(seed)
    return np.clip(2.0 + g.normal(size=(n, 2)) @ g.normal(size=(2, D)) * 0.6 + 0.1 * g.normal(size=(n, D)), 0, 4)


def _pld_eps(event, delta: float) -> float:
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event)
    return acc.get_epsilon(delta)


@functools.cache
def _expected_event(eps: float, delta: float, f: float) -> dpa.DpEvent:
    """Two Gaussians with 1/z0^2 = f/z^2, 1/z1^2 = (1-f)/z^2, z the smallest multiplier meeting (eps, delta)
    under dp_accounting's PLD, found here by bisection."""
    z0 = math.sqrt(2 * math.log(1.25 / delta)) / eps  # the classic Gaussian's multiplier: a bracket
    lo, hi = z0 / 4, 2 * z0
    while hi - lo > 2e-5 * hi:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _pld_eps(dpa.GaussianDpEvent(mid), delta) <= eps else (mid, hi)
    return dpa.ComposedDpEvent([dpa.GaussianDpEvent(hi / math.sqrt(f)), dpa.GaussianDpEvent(hi / math.sqrt(1 - f))])


def test_plan_equals_an_event_built_from_the_parameters():
    spec = _spec()
    job = get_algorithm("pca").party_for(spec.params).job_event(spec)
    want = _expected_event(1.0, 1e-5, 0.2)
    assert isinstance(job, dpa.ComposedDpEvent) and len(job.events) == 2
    for got, exp in zip(job.events, want.events, strict=True):
        assert got.noise_multiplier == pytest.approx(exp.noise_multiplier, rel=3e-4)
    assert _pld_eps(job, 1e-5) <= 1.0 + 1e-3
    half = get_algorithm("pca").party()  # the rounds compose to the job
    tasks = [Task("pca-t", 0, "pca-mean"), Task("pca-t", 1, "pca-covariance", arrays={"center": np.zeros(D)})]
    assert dpa.ComposedDpEvent([half.task_event(spec, t) for t in tasks]) == job


def _reference(X: np.ndarray, origin: np.ndarray, scale: float, clip: float, a: int) -> tuple[np.ndarray, np.ndarray]:
    """Round 0 (sum q, GRID n) and round 1 (upper triangle of sum z z^T) by plain NumPy, from the parameters."""
    K, d = 1024, X.shape[1]
    k_in = K - math.ceil(math.sqrt(d) / 2)
    U = (X - origin) / scale
    norms = np.linalg.norm(U, axis=1, keepdims=True)
    Uc = np.where(norms > clip, U * clip / norms, U)
    Q = np.rint(Uc * k_in / clip)
    assert np.all(np.linalg.norm(Q, axis=1) <= K)
    mean = np.append(Q.sum(0), a * len(X))
    Z = np.hstack([Q, np.full((len(X), 1), a)])
    M = sum(np.outer(z, z) for z in Z)  # one record at a time, as the definition reads
    return mean.astype(np.int64), M[np.triu_indices(d + 1)].astype(np.int64)


def test_statistics_before_noise_equal_numpy_on_the_clipped_records():
    X = _data(200)
    plan = pca.plan_release(_spec())
    center = np.full(D, 1.7)
    g0, g1 = plan.rounds[0].geometry, plan.rounds[1].geometry.at(center)
    box_radius = math.sqrt(D)  # origin at the lower bounds, scale 4: every record within sqrt(D)
    m_ref, c_ref = _reference(X, np.zeros(D), 4.0, box_radius, 1024)
    np.testing.assert_array_equal(pca.mean_sum(X, g0), m_ref)
    _, c_ref = _reference(X, center, 4.0, 0.5, round(0.25 * 1024))
    np.testing.assert_array_equal(pca.covariance_sum(X, g1), c_ref)


def _party(X, name="p") -> PartyContext:
    return PartyContext(name, X, None, BOX, BudgetLedger(":memory:", epsilon_limit=1e6, delta_limit=0.5))


def test_noise_measured_from_the_parties_answers_matches_the_plan():
    """Residual = session answer - the NumPy statistic; sigma from the CHARGED event x the sensitivity
    derived here (round 0: sqrt(2) K; round 1: sqrt(K^4 + a^2 K^2 + a^4)). Round 0 pooled over 40 parties,
    round 1 over 20 (with 4, the power check's half-noise case passed in about 1 run of 4)."""
    X = _data(150)
    spec = _spec()
    job = None
    K, a = 1024.0, float(round(0.25 * 1024))
    l2 = (math.sqrt(2) * K, math.sqrt(K ** 4 + a * a * K * K + a ** 4))
    center = np.full(D, 1.9)
    mean_ref, _ = _reference(X, np.zeros(D), 4.0, math.sqrt(D), 1024)
    _, cov_ref = _reference(X, center, 4.0, 0.5, int(a))
    res0, res1 = [], []
    for i in range(40):
        d = decide(_party(X, f"p{i}"), spec)
        assert d.accept, d.reason
        job = d.event
        res0.append(d.session.answer(Task("pca-t", 0, "pca-mean"))["mean"] - mean_ref)
        if i < 20:  # 20 x 28 residuals: enough that the power check (half the noise must fail) fails < 1e-4
            task = Task("pca-t", 1, "pca-covariance", arrays={"center": center})
            res1.append(d.session.answer(task)["cov"] - cov_ref)
    z0, z1 = (e.noise_multiplier for e in job.events)
    assert_gaussian_variance(np.concatenate(res0), (z0 * l2[0]) ** 2 + 1 / 12)
    assert_gaussian_variance(np.concatenate(res1), (z1 * l2[1]) ** 2 + 1 / 12)


@pytest.mark.parametrize("far", [1e6, np.inf, -np.inf])
def test_a_far_record_moves_each_answer_by_at_most_the_planned_sensitivity(far):
    X = _data(100)
    spec = _spec()
    plan = pca.plan_release(spec)
    half = get_algorithm("pca").party()
    outlier = np.full((1, D), far)
    outlier[0, 1] = -far
    for r, task in enumerate([Task("pca-t", 0, "pca-mean"),
                              Task("pca-t", 1, "pca-covariance", arrays={"center": np.full(D, 2.0)})]):
        def release(X, task=task, r=r):
            out = half.answer(spec, task, X, None, SecureRNG.from_seed("pca-outlier"))
            assert isinstance(out, Released)
            return out.arrays[("mean", "cov")[r]].astype(np.float64)

        diff = release(np.vstack([X, outlier])) - release(X)
        rp = plan.rounds[r]
        assert np.linalg.norm(diff) <= rp.l2 and np.abs(diff).sum() <= rp.l1
        if np.isfinite(far):  # the outlier does count: clipped, not dropped (+-inf entries count as the origin)
            assert np.linalg.norm(diff) > 0.3 * rp.l2


def test_a_far_center_is_clamped_and_a_bad_one_refused():
    spec = _spec()
    half = get_algorithm("pca").party()
    from dpfed.algorithms.contract import TaskRejected

    for bad in (np.zeros(D - 1), np.array([np.nan] * D), np.zeros((D, 1))):
        with pytest.raises(TaskRejected):
            half.check_task(spec, Task("pca-t", 1, "pca-covariance", arrays={"center": bad}))
    with pytest.raises(TaskRejected):
        half.check_task(spec, Task("pca-t", 2, "pca-covariance", arrays={"center": np.zeros(D)}))
    with pytest.raises(TaskRejected):
        half.check_task(spec, Task("pca-t", 0, "pca-mean", arrays={"center": np.zeros(D)}))


def test_estimator_recovers_a_planted_subspace_and_follows_sklearn_names():
    g = np.random.default_rng(3)
    basis = np.linalg.qr(g.normal(size=(20, 3)))[0].T  # 3 orthonormal rows in 20 dimensions
    X = np.clip(0.5 + (g.normal(size=(20000, 3)) * [0.2, 0.15, 0.1]) @ basis + 0.01 * g.normal(size=(20000, 20)), 0, 1)
    m = DPPCA(3, epsilon=2.0, delta=1e-6, bounds=(0.0, 1.0), clip=0.6, random_state=1).fit(X)
    assert m.components_.shape == (3, 20) and m.explained_variance_.shape == (3,)
    np.testing.assert_allclose(m.components_ @ m.components_.T, np.eye(3), atol=1e-8)
    # the span matches the planted one: its projection keeps each planted direction
    assert np.linalg.norm(m.components_ @ basis.T, axis=0).min() > 0.97
    np.testing.assert_allclose(m.mean_, X.mean(0), atol=0.02)
    Z = m.transform(X)
    np.testing.assert_allclose(Z, (X - m.mean_) @ m.components_.T)
    np.testing.assert_allclose(m.fit_transform(X), Z)  # same seed, same noise
    assert np.all(np.diff(m.explained_variance_) <= 0)
    assert m.explained_variance_ == pytest.approx(np.array([0.2, 0.15, 0.1]) ** 2, rel=0.1)


# ------------------------------------------------------------------------------------------ PCA as a first step

PIPE = {"epsilon": 2.0, "delta": 1e-5, "pca_k": 2, "pca_clip": 0.5, "pca_origin": "lower", "pca_mean_share": 0.2,
        "pca_share": 0.3, "k": 2, "method": "lloyd", "lloyd_iters": 2}


def _pipe_spec() -> JobSpec:
    algo = get_algorithm("pca+kmeans")
    return JobSpec("pipe", "pca+kmeans", validate(algo, PIPE, BOX), BOX)


def test_pipeline_charges_one_composed_plan_equal_to_an_independent_composition():
    """PCA at (0.3 eps, 0.3 delta) by this file's own bisection, composed with k-means' own job event on the
    spec the test builds: the box [-C, C]^k, (0.7 eps, 0.7 delta). The party charges exactly that one event at
    decide, before any release, and nothing more while it answers every round."""
    spec = _pipe_spec()
    km = get_algorithm("kmeans")
    km_params = {k: v for k, v in PIPE.items() if not k.startswith("pca_")}
    km_params.update(epsilon=0.7 * 2.0, delta=0.7 * 1e-5)
    km_spec = JobSpec("pipe", "kmeans", validate(km, km_params, Schema.numeric_box(2, -0.5, 0.5)),
                      Schema.numeric_box(2, -0.5, 0.5, prefix="pc"))
    want_pca = _expected_event(0.6, 0.3e-5, 0.2)
    want = dpa.ComposedDpEvent([want_pca, km.party_for(km_spec.params).job_event(km_spec)])
    party = PartyContext("p", _data(300), None, BOX, BudgetLedger(":memory:", epsilon_limit=1e6, delta_limit=0.5))
    d = decide(party, spec)
    assert d.accept, d.reason
    got = d.event
    assert isinstance(got, dpa.ComposedDpEvent) and len(got.events) == 2
    assert got.events[1] == want.events[1]
    for g_, w_ in zip(got.events[0].events, want_pca.events, strict=True):
        assert g_.noise_multiplier == pytest.approx(w_.noise_multiplier, rel=3e-4)
    spent = party.ledger.spent("pipe")
    assert spent == pytest.approx(d.epsilon_job) and spent <= 2.0 * (1 + 1e-9)
    # run the job: the coordinator's rounds through this session; the ledger's spend does not move
    algo = get_algorithm("pca+kmeans")
    coord = algo.coordinator(spec, ["p"])
    from dpfed.algorithms.contract import Aggregate
    from dpfed.algorithms.driver import drive

    rounds = drive(coord, lambda t: [Aggregate(d.session.answer(t), ("p",))], algo.combine)
    assert rounds == 2 + 1 and party.ledger.spent("pipe") == spent  # PCA: 2 rounds, local k-means: 1
    model = coord.model()
    assert model["pca_components"].shape == (2, D) and model["cluster_centers"].shape == (2, 2)
    assert set(algo.evaluate(model, _data(50, 1), None, BOX)) >= {"inertia"}


@pytest.mark.parametrize("step", [0, 1, 2])
def test_the_release_gate_checks_each_step_against_its_part_of_the_one_plan(step):
    """An answer reporting twice its round's spend (PCA's rounds 0 and 1, k-means' first round) is refused by the
    party session before anything leaves."""
    from dpfed.federation.session import TaskError

    spec = _pipe_spec()
    party = PartyContext("p", _data(300), None, BOX, BudgetLedger(":memory:", epsilon_limit=1e6, delta_limit=0.5))
    d = decide(party, spec)
    half = d.session.half
    inner = half.answer

    def doubled(spec_, task, X, y, rng):
        out = inner(spec_, task, X, y, rng)
        return Released(out.arrays, out.events + out.events) if task.round == step else out

    half.answer = doubled
    algo = get_algorithm("pca+kmeans")
    coord = algo.coordinator(spec, ["p"])
    from dpfed.algorithms.contract import Aggregate
    from dpfed.algorithms.driver import drive

    with pytest.raises(TaskError, match="outside the charged plan"):
        drive(coord, lambda t: [Aggregate(d.session.answer(t), ("p",))], algo.combine)


def test_pipeline_parties_clamp_the_projection_and_refuse_bad_pca_arrays():
    from dpfed.algorithms.contract import TaskRejected
    from dpfed.algorithms.pipeline import project

    spec = _pipe_spec()
    half = get_algorithm("pca+kmeans").party()
    task = Task("pipe", 2, "fit", arrays={"pca_center": np.zeros(D), "pca_components": np.full((2, D), 1e9)})
    Y = project(spec, task, _data(40))
    assert np.abs(Y).max() <= 0.5  # the box [-C, C] whatever components arrive
    for bad in ({"pca_center": np.zeros(D)}, {"pca_center": np.zeros(D), "pca_components": np.zeros((3, D))},
                {"pca_center": np.full(D, np.nan), "pca_components": np.zeros((2, D))}):
        with pytest.raises(TaskRejected):
            half.check_task(spec, Task("pipe", 2, "fit", arrays=bad))
