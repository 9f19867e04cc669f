"""One release path: every built-in algorithm's plan, its rounds and its answers, checked independently.

For every algorithm and option (naive Bayes Gaussian / Laplace; GLVQ / GMLVQ with gaussian, laplace and
zero initialisation, local and distributed noise; k-means sample-and-aggregate with the mean and the
center-of-attention aggregators, and DP Lloyd):

(a) the composition of ``task_event`` over every round is ``job_event``;
(b) ``job_event`` equals an event built HERE from the public parameters with dp_accounting classes
    (each noise parameter re-derived by this file's own bisection against dp_accounting's PLD);
(c) running the real party session (:func:`dpfed.federation.session.decide` and
    :meth:`PartySession.answer`) against the real coordinator half, every answer reports events, and
    they lie within the round's planned event;
(d) planted bugs are refused by the session before anything leaves: an answer reporting an extra
    release, a release spending with half the noise multiplier (or twice the epsilon), and a built-in
    returning a bare answer without its events.
"""
from __future__ import annotations

import functools
import math

import attr
import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.dp_event import DiscreteLaplaceDpEvent
from dp_accounting.pld import pld_privacy_accountant

from dpfed.algorithms import lvq
from dpfed.algorithms.contract import Aggregate, JobSpec, Released
from dpfed.algorithms.driver import drive
from dpfed.algorithms.registry import get_algorithm
from dpfed.core import accounting
from dpfed.core.accounting import EpsilonDeltaBoundDpEvent
from dpfed.core.ledger import BudgetLedger
from dpfed.data.schema import Feature, Schema
from dpfed.federation.session import PartyContext, TaskError, decide

BOX = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)


# ----------------------------------------------------------------------------- independent helpers

def _pld_eps(event: dpa.DpEvent, delta: float) -> float:
    """epsilon by dp_accounting's own PLD accountant (dpfed's only for dpfed's extra event classes)."""
    try:
        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(event)
        return acc.get_epsilon(delta)
    except Exception:  # noqa: BLE001 - EpsilonDeltaBoundDpEvent: dp_accounting has no class for it
        return accounting.epsilon(event, delta)


def _largest(ok, lo: float, hi: float, rtol: float = 1e-6) -> float:
    """Largest x in [lo, hi] with ok(x) (ok true below a threshold), by bisection."""
    assert ok(lo) and not ok(hi)
    while hi - lo > rtol * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


@functools.cache
def _gauss_z(eps: float, delta: float) -> float:
    """Smallest z with one GaussianDpEvent(z) (eps, delta)-DP under PLD: 1 / largest 1/z."""
    z0 = math.sqrt(2 * math.log(1.25 / delta)) / eps  # classic Gaussian: a bracket [z0 / 4, 4 z0]
    return 1.0 / _largest(lambda inv: _pld_eps(dpa.GaussianDpEvent(1.0 / inv), delta) <= eps, 0.25 / z0, 4.0 / z0)


def _leaves(event: dpa.DpEvent, mult: int = 1) -> list[tuple[str, tuple, int]]:
    """Atomic releases of a composition as (class, parameters, count), nested events unrolled."""
    if isinstance(event, dpa.ComposedDpEvent):
        return [leaf for e in event.events for leaf in _leaves(e, mult)]
    if isinstance(event, dpa.SelfComposedDpEvent):
        return _leaves(event.event, mult * event.count)
    if isinstance(event, dpa.PoissonSampledDpEvent):
        (cls, params, n), = _leaves(event.event, mult)
        return [("Poisson:" + cls, (event.sampling_probability,) + params, n)]
    fields = attr.astuple(event, recurse=False)
    assert fields, f"no parameters read from {event!r}"
    return [(type(event).__name__, fields, mult)]


def _same_event(a: dpa.DpEvent, b: dpa.DpEvent, rel: float) -> None:
    """a and b release the same mechanisms the same number of times, parameters within ``rel``."""
    def canon(ev):
        counts: dict[tuple, int] = {}
        for cls, params, n in _leaves(ev):
            key = (cls, tuple(round(float(p), 9) if isinstance(p, float) else p for p in params))
            counts[key] = counts.get(key, 0) + n
        return sorted((cls, params, n) for (cls, params), n in counts.items())

    ca, cb = canon(a), canon(b)
    assert [(c, n) for c, _, n in ca] == [(c, n) for c, _, n in cb], (ca, cb)
    for (_, pa, _), (_, pb, _) in zip(ca, cb, strict=True):
        assert pa == pytest.approx(pb, rel=rel), (ca, cb)


# ----------------------------------------------------------------------------- the configurations

def _nb_spec(adult, mech: str, delta: float) -> JobSpec:
    return JobSpec("nb", "naive-bayes", {"epsilon": 1.0, "delta": delta, "mechanism": mech}, adult.schema)


def _nb_expected(spec: JobSpec) -> dpa.DpEvent:
    if spec.params["mechanism"] == "laplace":  # pure epsilon: the binary RR pair of dp_accounting
        return DiscreteLaplaceDpEvent(spec.epsilon, 1)
    return dpa.GaussianDpEvent(_gauss_z(spec.epsilon, spec.delta))


LVQ_CASES = [("glvq", "gaussian", "local"), ("glvq", "laplace", "local"), ("glvq", "zero", "local"),
             ("gmlvq", "gaussian", "distributed"), ("gmlvq", "gaussian", "local")]


def _lvq_spec(algo: str, init: str, noise: str, parties: int) -> JobSpec:
    params = lvq.prepare_params({"epsilon": 1.0, "delta": 1e-5, "epochs": 0.3, "sampling_rate": 0.1, "init": init,
                                 "noise": noise, "parties": parties, "omega_rank": 2})
    return JobSpec(f"lvq-{algo}-{init}-{noise}", algo, params, BOX)


def _lvq_expected(spec: JobSpec) -> dpa.DpEvent:
    """Initialisation (epsilon_1 = 0.2 eps, counts 5 % of it) composed with T = E/q subsampled Gaussians."""
    p = spec.params
    eps1, cf, q = 0.2 * spec.epsilon, 0.05, p["sampling_rate"]
    steps = round(p["epochs"] / q)
    if p["init"] == "laplace":
        init = [DiscreteLaplaceDpEvent(cf * eps1, 1), EpsilonDeltaBoundDpEvent((1 - cf) * eps1, 0.0)]
    else:
        z1 = _gauss_z(eps1, spec.delta)
        init = [dpa.GaussianDpEvent(z1)] if p["init"] == "zero" else [
            dpa.GaussianDpEvent(z1 / math.sqrt(cf)), dpa.GaussianDpEvent(z1 / math.sqrt(1 - cf))]
    # DP-SGD's multiplier is a public job parameter: check it is the smallest that meets the target
    z = p["noise_multiplier"]

    def job(zz):
        return dpa.ComposedDpEvent(init + [dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(
            q, dpa.GaussianDpEvent(zz)), steps)])

    assert _pld_eps(job(z), spec.delta) <= spec.epsilon < _pld_eps(job(z * (1 - 3e-4)), spec.delta)
    return job(z)


KM_CASES = [("sample-aggregate", "mean", 1), ("sample-aggregate", "coa", 0), ("lloyd", "mean", 2)]


def _km_spec(method: str, agg: str, steps: int) -> JobSpec:
    params = {"epsilon": 1.0, "delta": 1e-6, "method": method, "aggregator": agg, "k": 2, "per_cluster": 10,
              ("lloyd_iters" if method == "lloyd" else "refine_steps"): steps}
    return JobSpec(f"km-{method}-{agg}", "kmeans", params, BOX)


def _km_expected(spec: JobSpec) -> dpa.DpEvent:
    """Pure shares (record count 2 %, sizes 5 %, all step counts 5 %), the rest split between the
    aggregator (half when refining) and equal Gaussian steps at the classic exchange rate
    z = sqrt(2 ln(1.25/delta)) / share, scaled by the largest x that meets the target."""
    p, eps, delta = spec.params, spec.epsilon, spec.delta
    sa = p["method"] == "sample-aggregate"
    steps = p.get("refine_steps", 0) if sa else p["lloyd_iters"]
    w = (1.0 if steps == 0 else 0.5) if sa else 0.0
    c = math.sqrt(2 * math.log(1.25 / delta))

    def event(x):
        ev = [DiscreteLaplaceDpEvent(0.02 * eps, 1)] if sa else []
        if sa:
            ev.append(EpsilonDeltaBoundDpEvent(x * eps * w, delta / 2) if p["aggregator"] == "coa"
                      else dpa.GaussianDpEvent(c / (x * eps * w)))
        for _ in range(steps):
            ev += [dpa.GaussianDpEvent(c / (x * eps * (1 - w) / steps)), DiscreteLaplaceDpEvent(0.05 * eps / steps, 1)]
        return dpa.ComposedDpEvent(ev + [DiscreteLaplaceDpEvent(0.05 * eps, 1)])

    x = _largest(lambda v: _pld_eps(event(v), delta) <= eps, 0.1, 10.0, rtol=5e-4)
    return event(x)


LR_SCHEMA = Schema(BOX.features, target=Feature("t", "numeric", lower=0.0, upper=6.0))


def _lr_spec(method: str) -> JobSpec:
    delta = 0.0 if method == "functional" else 1e-5
    return JobSpec(f"lr-{method}", "linear-regression", {"epsilon": 1.0, "delta": delta, "method": method}, LR_SCHEMA)


def _lr_expected(spec: JobSpec) -> dpa.DpEvent:
    """AdaSSP: one Gaussian at the smallest multiplier meeting the target; functional: pure epsilon."""
    if spec.params["method"] == "functional":
        return DiscreteLaplaceDpEvent(spec.epsilon, 1)
    return dpa.GaussianDpEvent(_gauss_z(spec.epsilon, spec.delta))


def _dt_spec(adult) -> JobSpec:
    return JobSpec("dt", "decision-tree", {"epsilon": 1.0, "delta": 1e-6, "depth": 3, "bins": 8,
                                           "leaf_share": 0.25}, adult.schema)


def _dt_expected(spec: JobSpec) -> dpa.DpEvent:
    """Three levels and the leaves, Gaussians whose rho shares are 0.25 each: multipliers z / sqrt(0.25) with z
    the single Gaussian's (a composition of Gaussians is the Gaussian of the summed 1 / z^2)."""
    z = _gauss_z(spec.epsilon, spec.delta)
    return dpa.ComposedDpEvent([dpa.GaussianDpEvent(z / math.sqrt(0.25))] * 4)


def _cases(adult):
    """(name, spec, data X, y, parties, expected-event builder, relative tolerance of (b))."""
    rng = np.random.default_rng(0)
    Xa, ya = adult.X_train[:3000], adult.y_train[:3000]
    Xb = rng.uniform(size=(600, 3))
    yb = (Xb[:, 0] > 0.5).astype(np.int64)
    out = [("nb-gaussian", _nb_spec(adult, "gaussian", 1e-6), Xa, ya, 1, _nb_expected, 2e-5),
           ("nb-laplace", _nb_spec(adult, "laplace", 1e-6), Xa, ya, 1, _nb_expected, 0.0)]
    for algo, init, noise in LVQ_CASES:
        parties = 2 if noise == "distributed" else 1
        out.append((f"{algo}-{init}-{noise}", _lvq_spec(algo, init, noise, parties), Xb, yb, parties, _lvq_expected,
                    2e-5))
    for method, agg, steps in KM_CASES:
        out.append((f"kmeans-{method}-{agg}", _km_spec(method, agg, steps), Xb, None, 1, _km_expected, 2e-3))
    yr = Xb @ np.array([1.0, 2.0, 3.0])
    for method in ("adassp", "functional"):
        out.append((f"lr-{method}", _lr_spec(method), Xb, yr, 2, _lr_expected, 2e-5))
    out.append(("dt", _dt_spec(adult), Xa, ya, 2, _dt_expected, 1e-3))
    return out


CASE_NAMES = (["nb-gaussian", "nb-laplace"] + [f"{a}-{i}-{n}" for a, i, n in LVQ_CASES]
              + [f"kmeans-{m}-{a}" for m, a, _ in KM_CASES] + ["lr-adassp", "lr-functional", "dt"])


@pytest.fixture(scope="module")
def cases(adult):
    return {c[0]: c for c in _cases(adult)}


def _rounds(spec: JobSpec, n_parties: int):
    coord = get_algorithm(spec.algorithm).coordinator(spec, [f"p{i}" for i in range(n_parties)])
    return coord


def _sessions(tmp_path, spec, X, y, parties):
    out = []
    for i in range(parties):
        rows = slice(i, None, parties)
        ctx = PartyContext(f"p{i}", X[rows], None if y is None else y[rows], spec.schema,
                           BudgetLedger(tmp_path / f"p{i}.db", epsilon_limit=10.0, delta_limit=1e-4),
                           secure_aggregation=True, seed=7)
        d = decide(ctx, spec)
        assert d.accept, d.reason
        out.append(d.session)
    return out


def _run(tmp_path, spec, X, y, parties, wrap=None):
    """Drive the real coordinator half against real party sessions; return [(task, planned, events)]."""
    algo = get_algorithm(spec.algorithm)
    sessions = _sessions(tmp_path, spec, X, y, parties)
    seen = []
    for s in sessions:
        inner = s.half.answer

        def answer(spec_, task, X_, y_, rng, inner=inner, half=s.half):
            out = inner(spec_, task, X_, y_, rng)
            seen.append((task, half.task_event(spec_, task), out.events if isinstance(out, Released) else None))
            return wrap(task, out) if wrap else out

        s.half.answer = answer
    coord = algo.coordinator(spec, [s.party.name for s in sessions])
    drive(coord, lambda task: [Aggregate(s.answer(task), (s.party.name,)) for s in sessions], algo.combine)
    return seen


# ----------------------------------------------------------------------------- (a) and (b)

@pytest.mark.parametrize("name", CASE_NAMES)
def test_plan_is_the_rounds_and_equals_an_independent_event(cases, name):
    _, spec, _, _, parties, expected, rel = cases[name]
    half = get_algorithm(spec.algorithm).party_for(spec.params)
    job = half.job_event(spec)
    coord = _rounds(spec, parties)
    rounds = []  # (a): every round the coordinator may issue, composed
    if spec.algorithm in ("glvq", "gmlvq"):
        rounds = [coord.next_task()] + [type(coord.next_task())(spec.job_id, t, "step") for t in
                                        range(1, lvq.privacy_plan(spec.params).steps + 1)]
    elif spec.algorithm == "decision-tree":  # the levels, then the leaves: the kinds the schedule fixes
        first = coord.next_task()
        depth = spec.params["depth"]
        rounds = [first] + [type(first)(spec.job_id, r, "dt-leaves" if r == depth else "dt-level", arrays=first.arrays)
                            for r in range(1, depth + 1)]
    else:
        rounds = [coord.next_task()]
    composed = accounting.compose([half.task_event(spec, t) for t in rounds])
    assert accounting.event_to_json(composed) == accounting.event_to_json(accounting.compose([job]))
    _same_event(job, expected(spec), rel)  # (b)


# ----------------------------------------------------------------------------- (c)

@pytest.mark.parametrize("name", CASE_NAMES)
def test_every_answer_reports_events_within_its_round(cases, name, tmp_path):
    _, spec, X, y, parties, _, _ = cases[name]
    seen = _run(tmp_path, spec, X, y, parties)
    assert seen and len({t.round for t, _, _ in seen}) == len(seen) // parties
    for task, planned, events in seen:
        assert events, f"round {task.round} reported no release"
        assert accounting.within(events, planned) == []
        # and each reported release is one of this round's planned releases, by class and count
        assert sum(n for *_, n in _leaves(dpa.ComposedDpEvent(list(events)))) == \
            sum(n for *_, n in _leaves(planned))


# ----------------------------------------------------------------------------- (d)

def _halve(ev: dpa.DpEvent) -> dpa.DpEvent:
    """The same release with half the noise multiplier (or twice the epsilon)."""
    if isinstance(ev, dpa.PoissonSampledDpEvent):
        return dpa.PoissonSampledDpEvent(ev.sampling_probability, _halve(ev.event))
    if isinstance(ev, dpa.GaussianDpEvent):
        return dpa.GaussianDpEvent(ev.noise_multiplier / 2)
    if isinstance(ev, dpa.LaplaceDpEvent):
        return dpa.LaplaceDpEvent(ev.noise_multiplier / 2)
    if isinstance(ev, DiscreteLaplaceDpEvent):
        return DiscreteLaplaceDpEvent(ev.noise_parameter * 2, ev.sensitivity)
    if isinstance(ev, EpsilonDeltaBoundDpEvent):
        return EpsilonDeltaBoundDpEvent(ev.epsilon * 2, ev.delta)
    raise AssertionError(f"no halving for {ev}")


PLANTED = {
    "extra release": lambda task, out: Released(out.arrays, out.events + out.events[:1]),
    "half the noise": lambda task, out: Released(out.arrays, (_halve(out.events[0]),) + out.events[1:]),
    "bare answer": lambda task, out: out.arrays,
}


@pytest.mark.parametrize("bug", sorted(PLANTED))
@pytest.mark.parametrize("name", ["nb-gaussian", "nb-laplace", "glvq-gaussian-local", "glvq-laplace-local",
                                  "gmlvq-gaussian-distributed", "kmeans-sample-aggregate-mean",
                                  "kmeans-sample-aggregate-coa", "kmeans-lloyd-mean", "lr-adassp", "lr-functional",
                                  "dt"])
def test_planted_bug_is_refused(cases, name, bug, tmp_path):
    _, spec, X, y, parties, _, _ = cases[name]
    last = 0 if spec.algorithm not in ("glvq", "gmlvq") else 1  # LVQ: plant it in a DP-SGD step

    def wrap(task, out):
        return PLANTED[bug](task, out) if task.round == last else out

    with pytest.raises(TaskError, match="outside the charged plan|without reporting its releases"):
        _run(tmp_path, spec, X, y, parties, wrap=wrap)


def test_lvq_step_with_half_the_noise_in_the_mechanism_is_refused(cases, tmp_path, monkeypatch):
    """The bug in the code, not in the report: DP-SGD noise drawn with z/2 reports GaussianDpEvent(z/2)."""
    _, spec, X, y, parties, _, _ = cases["glvq-gaussian-local"]
    from dpfed.algorithms.dpsgd import release as dpsgd_release

    real = dpsgd_release.float_gaussian
    monkeypatch.setattr(dpsgd_release, "float_gaussian",
                        lambda v, *, noise_multiplier, **kw: real(v, noise_multiplier=noise_multiplier / 2, **kw))
    with pytest.raises(TaskError, match="outside the charged plan"):
        _run(tmp_path, spec, X, y, parties)


def test_readme_dp_sgd_sigmas():
    """The README's sigma 3.62 / 2.02 / 1.39 at the paper's q = 0.01, E = 50, delta = 1e-5 (GMLVQ,
    Gaussian initialisation with 20 % of epsilon), each the smallest that meets its target."""
    for eps, want in ((0.75, 3.62), (1.5, 2.02), (2.5, 1.39)):
        z = lvq.privacy_plan({"epsilon": eps, "delta": 1e-5}).noise_multiplier
        assert round(z, 2) == want
