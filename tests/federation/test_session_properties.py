"""Property test of the party's rules (hypothesis): for any parameters and any sequence of tasks, the
party session refuses with a reason or charges exactly its plan, never crashes (only refusals and
:class:`TaskError`), never answers outside the plan, never answers a round twice with different
bytes and never releases a non-finite value. The task sequences mix the honest coordinator's tasks, repeats
of earlier ones and arbitrary ones, and every job is offered a second time (a restarted coordinator, an
operator's resubmission) and the same tasks are sent again: the bytes of a round never change."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.contract import JobSpec, Task
from dpfed.core import accounting
from dpfed.core.ledger import BudgetLedger
from dpfed.data.schema import Schema
from dpfed.federation.session import PartyContext, TaskError, decide

SCHEMA = Schema.numeric_box(2, 0.0, 1.0, n_classes=2)
_RNG = np.random.default_rng(0)
X = _RNG.uniform(size=(60, 2))
Y = _RNG.integers(0, 2, 60)

numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**12, 10**12),
                    st.sampled_from([0, 1, 2, 0.5, 1e-300, 1e300, -1]))
values = st.one_of(numbers, st.booleans(), st.text(max_size=5), st.none(), st.lists(numbers, max_size=3))
KEYS = ["epsilon", "delta", "k", "method", "aggregator", "refine_steps", "lloyd_iters", "epochs", "sampling_rate",
        "noise_multiplier", "clip", "prototypes_per_class", "omega_rank", "mechanism", "noise", "init",
        "exact_noise", "omega_scale"]
params = st.dictionaries(st.sampled_from(KEYS), values, max_size=5)
arrays = st.dictionaries(st.sampled_from(["prototypes", "omega", "x"]),
                         st.sampled_from([np.zeros((2, 2)), np.full((2, 2), 1e-90), np.full((2, 2), np.nan),
                                          np.eye(2), np.full((2, 2), 1e300), np.zeros(0)]), max_size=2)
arbitrary = st.tuples(st.integers(-2, 6), st.sampled_from(["init", "step", "fit", "nb-statistics", "x"]), arrays)
# ("honest", r): the honest coordinator's round-r task; ("repeat", i): the i-th task sent so far, again
tasks = st.lists(st.one_of(arbitrary, st.tuples(st.just("honest"), st.integers(0, 3)),
                           st.tuples(st.just("repeat"), st.integers(0, 5))), max_size=8)


def _honest(spec: JobSpec, rnd: int) -> Task | None:
    """The honest coordinator's task for round ``rnd`` (steps reuse its initial model), if it has one."""
    try:
        coord = get_algorithm(spec.algorithm).coordinator(spec, ["p"])
        first = coord.next_task()
    except Exception:  # noqa: BLE001 - parameters the coordinator refuses: no honest task
        return None
    if first is None or rnd == 0:
        return first
    if not hasattr(coord, "W"):
        return None
    arrays = {"prototypes": coord.W} | ({} if getattr(coord, "omega", None) is None else {"omega": coord.omega})
    return Task(spec.job_id, rnd, "step", {}, arrays)


def _concrete(spec: JobSpec, seq) -> list[Task]:
    out: list[Task] = []
    for a, b, *rest in seq:
        task = (_honest(spec, b) if a == "honest" else out[b] if a == "repeat" and b < len(out) else
                None if a == "repeat" else Task("job", a, b, {}, rest[0]))
        if task is not None:
            out.append(task)
    return out


def pack_answer(arrays: dict) -> bytes:
    """Bytes of an answer, independent of the session's own encoding (names, dtypes, shapes, buffers)."""
    return b"|".join(k.encode() + np.asarray(arrays[k]).dtype.str.encode() + str(np.shape(arrays[k])).encode()
                     + np.ascontiguousarray(arrays[k]).tobytes() for k in sorted(arrays))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(algorithm=st.sampled_from(["naive-bayes", "kmeans", "glvq", "gmlvq"]), extra=params, seq=tasks,
       base=st.sampled_from([{"epsilon": 1.0, "delta": 1e-6}, {"epsilon": 1.0, "delta": 1e-6, "epochs": 1,
                                                                 "sampling_rate": 0.5, "noise_multiplier": 2.0},
                             {}]))
def test_decide_and_answer_never_misbehave(algorithm, extra, seq, base):
    ledger = BudgetLedger(":memory:", epsilon_limit=20.0, delta_limit=1e-5)
    party = PartyContext("p", X, Y, SCHEMA, ledger)
    try:
        spec = JobSpec("job", algorithm, {**base, **extra}, SCHEMA)
    except (ValueError, TypeError):
        return  # not even a job spec: the wire layer refuses it as malformed
    d = decide(party, spec.to_json() if _jsonable(spec) else spec)
    if not d.accept:
        assert d.reason and ledger.charge_ids() == []
        return
    # charged exactly its plan, once
    assert ledger.charge_ids() == ["job:plan"]
    planned = accounting.epsilon(d.event, 1e-5, pld_discretization=ledger.pld_discretization)  # the ledger's grid
    assert math.isclose(ledger.spent("job"), planned, rel_tol=1e-9, abs_tol=1e-12)
    half = get_algorithm(algorithm).party_for(spec.params)
    sent: dict[int, bytes] = {}
    concrete = _concrete(spec, seq)
    for session in (d.session, None):
        if session is None:  # the same job offered again: a resume, never a second charge or a fresh draw
            again = decide(party, spec.to_json() if _jsonable(spec) else spec)
            if not again.accept:
                assert again.reason
                break
            session = again.session
        for task in concrete:
            try:
                out = session.answer(task)
            except TaskError as exc:
                assert str(exc)
                continue
            half.check_task(spec, task)  # within the plan (an independent half: raises if not)
            for a in out.values():
                assert np.asarray(a).dtype.kind in "biuf" and np.all(np.isfinite(a))
            data = pack_answer(out)
            assert sent.setdefault(task.round, data) == data  # a round is never answered with different bytes
    assert ledger.charge_ids() == ["job:plan"]


def _jsonable(spec: JobSpec) -> bool:
    try:
        spec.to_json()
        return True
    except (ValueError, TypeError):
        return False
