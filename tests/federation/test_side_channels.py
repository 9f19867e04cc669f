"""Whether a party's answer succeeds never depends on its records (issue 10, findings 3 and 4).

The attacks run through the real party session (:func:`decide`, :meth:`PartySession.answer`), as a
hostile coordinator would drive it; over gRPC the same tasks are sent by
``tests/daemons/test_net_malicious_coordinator.py``.
"""
from __future__ import annotations

import numpy as np
import pytest

from dpfed.algorithms import lvq
from dpfed.algorithms.contract import JobSpec, Task
from dpfed.algorithms.lvq.gradient import clipped_gradient_sum
from dpfed.algorithms.lvq.model import rescale
from dpfed.core.ledger import BudgetLedger
from dpfed.data.schema import Schema
from dpfed.federation.session import PartyContext, TaskError, decide

SCHEMA = Schema.numeric_box(3, 0.0, 1.0, n_classes=2)
TARGET = np.array([0.5, 0.8, 0.3])  # its first coordinate is the box centre: 0.0 exactly once rescaled
ROUNDS = 20


def _others(n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(n, 3))
    X[:, 0] = np.where(np.abs(X[:, 0] - 0.5) < 0.05, 0.9, X[:, 0])  # nobody else sits on the centre
    return X, rng.integers(0, 2, n)


def _attack_broadcast() -> dict[str, np.ndarray]:
    """Finding 3: prototypes near 1e-90 and a rank-one Omega that projects TARGET to exactly 0: its
    d+ and d- are ~1e-180, S*S underflows to 0, and its gradient is 0 * inf = NaN."""
    omega = np.zeros((3, 3))
    omega[0, 0] = 1.0  # Frobenius norm 1 = omega_scale: a broadcast within the public bounds
    return {"prototypes": np.array([[1e-90, 0.0, 0.0], [-2e-90, 0.0, 0.0]]), "omega": omega}


def _run(with_target: bool, exact: bool) -> tuple[int, int]:
    """(task errors, non-finite answers) over ROUNDS poisoned steps at one party."""
    X, y = _others()
    if with_target:
        X, y = np.vstack([X, TARGET]), np.append(y, 0)
    party = PartyContext("p", X, y.astype(np.int64), SCHEMA,
                         BudgetLedger(":memory:", epsilon_limit=100.0, delta_limit=1e-5))
    params = lvq.prepare_params({"epsilon": 5.0, "delta": 1e-5, "epochs": ROUNDS * 0.3, "sampling_rate": 0.3,
                                 "exact_noise": exact})
    d = decide(party, JobSpec(f"attack-{with_target}-{exact}", "gmlvq", params, SCHEMA))
    assert d.accept, d.reason
    d.session.answer(Task(d.job_id, 0, "init"))
    errors = nonfinite = 0
    for r in range(1, ROUNDS + 1):
        try:
            out = d.session.answer(Task(d.job_id, r, "step", arrays=_attack_broadcast()))
        except TaskError:
            errors += 1
            continue
        nonfinite += not all(np.all(np.isfinite(a)) for a in out.values())
    return errors, nonfinite


@pytest.mark.parametrize("exact", [False, True])
def test_gmlvq_membership_side_channel_is_closed(exact):
    """Before the fix: with the target, the rounds that sampled it failed (NaN, refused by the session's
    finiteness check, or with exact noise an exception); without it none. The chance that the target is
    never sampled in 20 rounds (so that the test cannot fail on the old code) is 0.7^20 = 8e-4."""
    assert _run(with_target=False, exact=exact) == (0, 0)
    assert _run(with_target=True, exact=exact) == (0, 0)


def test_the_targets_contribution_stays_within_the_clip():
    z = rescale(TARGET[None], SCHEMA.lower, SCHEMA.upper)
    assert z[0, 0] == 0.0
    b = _attack_broadcast()
    g = clipped_gradient_sum(z, np.array([0]), b["prototypes"], np.array([0, 1]), b["omega"], 0.5)
    flat = np.concatenate([g.prototypes.ravel(), g.omega.ravel()])
    assert np.all(np.isfinite(flat)) and np.linalg.norm(flat) <= 0.5 * (1 + 1e-12)


def test_broadcasts_outside_the_public_bounds_are_refused():
    X, y = _others()
    party = PartyContext("p", X, y.astype(np.int64), SCHEMA,
                         BudgetLedger(":memory:", epsilon_limit=100.0, delta_limit=1e-5))
    params = lvq.prepare_params({"epsilon": 5.0, "delta": 1e-5, "epochs": 1, "sampling_rate": 0.5})
    d = decide(party, JobSpec("bounds", "gmlvq", params, SCHEMA))
    d.session.answer(Task(d.job_id, 0, "init"))
    good = _attack_broadcast()
    for bad, why in [({**good, "prototypes": good["prototypes"] + 1e200}, "prototypes must lie within"),
                     ({**good, "omega": good["omega"] * 1e150}, "Frobenius norm"),
                     ({**good, "omega": good["omega"] * np.nan}, "finite")]:
        with pytest.raises(TaskError, match=why):
            d.session.answer(Task(d.job_id, 1, "step", arrays=bad))
    assert np.all(np.isfinite(d.session.answer(Task(d.job_id, 1, "step", arrays=good))["grad_omega"]))


def test_a_party_lacking_a_class_answers_like_any_other():
    """Finding 4: the init round used to fail at a party without some class (after its charge)."""
    X, y = _others()
    for labels in (y, np.zeros_like(y)):
        party = PartyContext("p", X, labels.astype(np.int64), SCHEMA,
                             BudgetLedger(":memory:", epsilon_limit=100.0, delta_limit=1e-5))
        params = lvq.prepare_params({"epsilon": 1.0, "delta": 1e-5, "epochs": 1, "sampling_rate": 0.5})
        d = decide(party, JobSpec("missing", "glvq", params, SCHEMA))
        out = d.session.answer(Task(d.job_id, 0, "init"))
        assert set(out) == {"counts", "sums"} and np.all(np.isfinite(out["sums"]))
