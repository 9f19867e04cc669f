"""DP-GLVQ / DP-GMLVQ: gradients, ghost clipping, privacy plan, party refusals, bad input, accuracy.

Budget: < 1 minute on a loaded 2-core machine. Fixed seeds throughout; the one statistical check
(noise scale) states its false-alarm rate.
"""
from __future__ import annotations

import argparse
import math
import zlib

import numpy as np
import pytest

from dpfed.algorithms.contract import JobSpec, Task, TaskRejected
from dpfed.algorithms.lvq import (
    DEFAULTS,
    DPGLVQ,
    DPGMLVQ,
    LVQCoordinator,
    LVQParty,
    add_arguments,
    params_from_args,
    prepare_params,
    privacy_plan,
)
from dpfed.algorithms.lvq.gradient import clipped_gradient_sum, per_sample_gradients_naive
from dpfed.algorithms.lvq.model import cost
from dpfed.core import accounting
from dpfed.core.ledger import BudgetExceededError, BudgetLedger
from dpfed.core.rng import SecureRNG
from dpfed.data.datasets import kfold_indices
from dpfed.data.schema import DataValidationError, Schema
from dpfed.simulation import run_inprocess

pytestmark = pytest.mark.filterwarnings("ignore::dpfed.core.rng.ReproducibleSeedWarning")


def _problem(seed: int = 0, n: int = 9, d: int = 6, c: int = 3, ppc: int = 2, r: int = 4):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, d))
    y = rng.integers(0, c, n)
    W = rng.uniform(-1, 1, (c * ppc, d))
    wl = np.repeat(np.arange(c), ppc)
    omega = rng.normal(size=(r, d))
    return X, y, W, wl, omega


def _numeric_grad(f, A: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central finite differences of the scalar f at A."""
    out = np.zeros_like(A)
    for idx in np.ndindex(A.shape):
        Ap, Am = A.copy(), A.copy()
        Ap[idx] += h
        Am[idx] -= h
        out[idx] = (f(Ap) - f(Am)) / (2 * h)
    return out


@pytest.mark.parametrize("use_omega", [False, True])
@pytest.mark.parametrize("phi", ["identity", "logistic"])
def test_gradients_match_finite_differences(use_omega: bool, phi: str) -> None:
    X, y, W, wl, omega = _problem()
    om = omega if use_omega else None
    g = clipped_gradient_sum(X, y, W, wl, om, None, phi=phi, beta=3.0)
    np.testing.assert_allclose(g.prototypes, _numeric_grad(lambda A: cost(X, y, A, wl, om, phi, 3.0), W), atol=1e-7)
    if use_omega:
        fo = _numeric_grad(lambda A: cost(X, y, W, wl, A, phi, 3.0), omega)
        np.testing.assert_allclose(g.omega, fo, atol=1e-7)


@pytest.mark.parametrize("use_omega", [False, True])
def test_ghost_clipping_matches_materialised(use_omega: bool) -> None:
    X, y, W, wl, omega = _problem(seed=3, n=40)
    om = omega if use_omega else None
    gW, gO = per_sample_gradients_naive(X, y, W, wl, om)
    sq = (gW ** 2).sum((1, 2)) + (0.0 if gO is None else (gO ** 2).sum((1, 2)))
    norms = np.sqrt(sq)
    clip = float(np.median(norms))  # about half the records are clipped
    s = np.minimum(1.0, clip / norms)
    g = clipped_gradient_sum(X, y, W, wl, om, clip)
    assert 10 <= g.clipped <= 30
    np.testing.assert_allclose(g.norms, norms, rtol=1e-10)
    np.testing.assert_allclose(g.prototypes, (gW * s[:, None, None]).sum(0), atol=1e-12)
    if use_omega:
        np.testing.assert_allclose(g.omega, (gO * s[:, None, None]).sum(0), atol=1e-12)
    # the unclipped (non-private) path is the plain sum
    u = clipped_gradient_sum(X, y, W, wl, om, None)
    np.testing.assert_allclose(u.prototypes, gW.sum(0), atol=1e-12)
    if use_omega:
        np.testing.assert_allclose(u.omega, gO.sum(0), atol=1e-12)
    # every clipped per-record gradient really has norm <= clip
    assert np.all(norms * s <= clip * (1 + 1e-12))


def _spec(algorithm: str = "gmlvq", schema: Schema | None = None, **kw) -> JobSpec:
    schema = schema or Schema.numeric_box(4, -1.0, 1.0, n_classes=3)
    params = prepare_params({"epsilon": 1.0, "delta": 1e-5, "epochs": 1, "sampling_rate": 0.05, **kw})
    return JobSpec(f"test-{algorithm}-{zlib.crc32(repr(sorted(kw.items())).encode()):08x}", algorithm, params, schema)


def _data(n: int = 300, d: int = 4, c: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % c
    centers = rng.uniform(-0.6, 0.6, (c, d))
    X = np.clip(centers[y] + 0.15 * rng.normal(size=(n, d)), -1, 1)
    return X, y


@pytest.mark.parametrize("init", ["gaussian", "laplace", "zero"])
def test_composed_spend_equals_claim(init: str) -> None:
    spec = _spec(init=init, parties=2)
    plan = privacy_plan(spec.params)
    assert plan.steps == 20
    # the composed event (initialisation + all T steps) meets the target, and tightly
    eps = accounting.epsilon(plan.event, spec.delta)
    assert spec.epsilon * (1 - 2e-3) <= eps <= spec.epsilon
    # the initialisation alone spends epsilon_1 = 0.2 epsilon (to PLD discretisation accuracy)
    assert accounting.epsilon(plan.init_event, spec.delta) == pytest.approx(0.2 * spec.epsilon, rel=1e-3)
    # each party's ledger is charged exactly that, once, before any answer
    ledgers = [BudgetLedger(":memory:", epsilon_limit=1.0, delta_limit=1e-5) for _ in range(2)]
    res = run_inprocess(spec, [_data(seed=1), _data(seed=2)], seed=0, ledgers=ledgers)
    assert res.rounds == plan.steps + 1
    for led in ledgers:
        assert led.spent(spec.job_id) == pytest.approx(eps, rel=1e-6)
    # the paper's sigma = 2 q sqrt(T log(1/delta)) / epsilon_2 is needlessly large
    paper = 2 * 0.05 * math.sqrt(plan.steps * math.log(1 / 1e-5)) / 0.8
    assert plan.noise_multiplier < paper


def test_party_refuses_job_over_its_budget() -> None:
    spec = _spec()
    ledger = BudgetLedger(":memory:", epsilon_limit=0.5, delta_limit=1e-5)
    with pytest.raises(BudgetExceededError):
        run_inprocess(spec, [_data()], seed=0, ledgers=[ledger])
    assert ledger.spent() == 0.0


def test_party_refuses_understated_noise_and_out_of_plan_rounds() -> None:
    spec = _spec()
    party = LVQParty()
    cheat = JobSpec(spec.job_id, spec.algorithm,
                    {**spec.params, "noise_multiplier": 0.5 * spec.params["noise_multiplier"]}, spec.schema)
    with pytest.raises(TaskRejected, match="epsilon"):
        party.job_event(cheat)
    party.job_event(spec)
    X, y = _data()
    rng = SecureRNG.from_seed(0)
    with pytest.raises(TaskRejected, match="init"):
        party.check_task(spec, Task(spec.job_id, 0, "step"))
    party.answer(spec, Task(spec.job_id, 0, "init"), X, y, rng)
    with pytest.raises(TaskRejected, match="already answered"):
        party.check_task(spec, Task(spec.job_id, 0, "init"))
    coord = LVQCoordinator(spec, ["p"])
    coord.round = 1
    ok = coord.next_task()
    with pytest.raises(TaskRejected, match="beyond"):
        party.check_task(spec, Task(spec.job_id, 21, "step", arrays=ok.arrays))
    with pytest.raises(TaskRejected, match="shape"):
        party.check_task(spec, Task(spec.job_id, 1, "step", arrays={**ok.arrays, "omega": np.eye(3)}))
    with pytest.raises(TaskRejected, match="parameters"):
        party.check_task(spec, Task(spec.job_id, 1, "step", params={"clip": 10.0}, arrays=ok.arrays))
    party.answer(spec, ok, X, y, rng)


@pytest.mark.parametrize("noise,parties", [("local", 4), ("distributed", 4)])
def test_step_noise_scale(noise: str, parties: int) -> None:
    """Records placed on their prototypes have zero gradient, so the answer is pure noise.

    The std of 4 x 4 + 4 x 4 = 32... values per answer, pooled over 40 answers (1280 draws),
    has relative standard error 2 %; the 12 % tolerance is 6 standard errors (false alarm < 1e-8).
    """
    spec = _spec(noise=noise, parties=parties, epochs=2, sampling_rate=0.05)
    party = LVQParty()
    coord = LVQCoordinator(spec, ["p"])
    W = coord.W.copy()
    Z = W[np.repeat(np.arange(3), 10)]
    y = np.repeat(np.arange(3), 10)
    rng = SecureRNG.from_seed(5)
    party.answer(spec, Task(spec.job_id, 0, "init"), Z, y, rng)
    draws = []
    for t in range(1, 41):
        a = party.answer(spec, Task(spec.job_id, t, "step", arrays={"prototypes": W, "omega": coord.omega}), Z, y,
                         rng).arrays
        draws += [a["grad_prototypes"].ravel(), a["grad_omega"].ravel()]
    sd = np.concatenate(draws).std()
    want = spec.params["noise_multiplier"] * spec.params["clip"] / (math.sqrt(parties) if noise == "distributed" else 1)
    assert sd == pytest.approx(want, rel=0.12)


def test_bad_input_gives_clear_errors() -> None:
    spec = _spec()
    X, y = _data()
    # a class absent at a party is answered like any other (a refusal after the charge would reveal it)
    res = run_inprocess(spec, [(X, y), (X[y != 2], y[y != 2])], seed=0)
    assert np.all(np.isfinite(res.model["prototypes"]))
    # d mismatch
    with pytest.raises(DataValidationError, match="columns"):
        run_inprocess(spec, [(X[:, :3], y)], seed=0)
    with pytest.raises(DataValidationError, match="columns"):
        LVQParty().answer(spec, Task(spec.job_id, 0, "init"), X[:, :3], y, SecureRNG.from_seed(0))
    # NaN
    Xn = X.copy()
    Xn[5, 1] = np.nan
    with pytest.raises(DataValidationError, match="NaN"):
        run_inprocess(spec, [(Xn, y)], seed=0)
    with pytest.raises(DataValidationError, match="NaN"):
        LVQParty().answer(spec, Task(spec.job_id, 0, "init"), Xn, y, SecureRNG.from_seed(0))
    with pytest.raises(ValueError, match="NaN"):
        DPGLVQ(bounds=(-1, 1)).fit(Xn, y)
    # private training without public bounds; labels outside `classes`
    with pytest.raises(ValueError, match="bounds"):
        DPGLVQ(epsilon=1.0).fit(X, y)
    with pytest.raises(ValueError, match="classes"):
        DPGLVQ(bounds=(-1, 1), classes=[0, 1]).fit(X, y)
    # a non-private job is never answered by a party
    with pytest.raises(TaskRejected, match="non-private"):
        LVQParty().job_event(JobSpec("np", "glvq", {**spec.params, "private": False}, spec.schema))


def test_cli_options_and_params() -> None:
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--noise", "distributed", "--optimizer", "adam"])
    assert (args.epochs, args.sampling_rate, args.clip) == (50, 0.01, 0.5)
    args.epsilon, args.delta, args.parties = 1.5, None, 5
    params = params_from_args(args)
    assert params["noise"] == "distributed" and params["parties"] == 5 and params["optimizer"] == "adam"
    assert 0.5 < params["noise_multiplier"] < 5.0
    assert set(DEFAULTS) <= set(params)


def test_estimator_api_and_accuracy_on_segmentation(segmentation) -> None:
    ds = segmentation
    tr, te = kfold_indices(len(ds.X), 5, seed=0)[0]
    bounds = (ds.schema.lower, ds.schema.upper)
    m = DPGMLVQ(epsilon=2.5, bounds=bounds, classes=np.arange(7), random_state=0, epochs=20)
    assert m.get_params()["epsilon"] == 2.5
    m.set_params(epochs=25)
    m.fit(ds.X[tr], ds.y[tr])
    assert m.prototypes_.shape == (7, 19) and m.omega_.shape == (19, 19)
    lam = m.relevance_matrix_
    assert np.all(np.linalg.eigvalsh(lam) > -1e-9)
    assert m.epsilon_spent_ <= 2.5
    err = 1 - m.score(ds.X[te], ds.y[te])
    assert err < 0.35, err  # paper: 0.17 at epsilon 2.5 (E = 50); chance is 0.86
    base = DPGLVQ(private=False, bounds=bounds, random_state=0, epochs=10).fit(ds.X[tr], ds.y[tr])
    assert base.summary_["noise_multiplier"] == 0.0
    assert 1 - base.score(ds.X[te], ds.y[te]) < 0.35
    assert set(np.unique(base.predict(ds.X[te]))) <= set(range(7))


def test_init_clip_bounds_each_record_and_is_refused_with_laplace() -> None:
    from dpfed.algorithms.lvq.model import init_rows

    X, _ = _data(d=4)
    p = {**DEFAULTS, "init_center": "lower", "init_clip": 1.5}
    S, l2, l1 = init_rows(p, X)
    assert l2 == 1.5 and l1 == 8.0
    assert np.all(np.linalg.norm(S, axis=1) <= 1.5 * (1 + 1e-12))
    small = np.linalg.norm(X + 1, axis=1) <= 1.5
    np.testing.assert_array_equal(S[small], (X + 1)[small])  # rows inside the ball are unchanged
    S0, l2_0, _ = init_rows({**DEFAULTS}, X)
    assert l2_0 == 2.0 and np.array_equal(S0, X)  # no clip, box centre: sensitivity sqrt(d)
    spec = _spec(init="laplace", init_clip=1.0)
    with pytest.raises(TaskRejected, match="init_clip"):
        LVQParty().job_event(spec)
