"""Run a federated job in one process: the same party and coordinator halves, no sockets.

For unit tests and research sweeps. Every party still charges its own ledger with the job's
whole spend before it answers anything, and answers only tasks within that plan, exactly as the
party daemon does; the gRPC simulation (``dpfed simulate``) runs the same halves in processes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from dpfed.algorithms import get_algorithm
from dpfed.federated import JobSpec
from dpfed.ledger import BudgetLedger
from dpfed.rng import SecureRNG

__all__ = ["SimulationResult", "run_inprocess", "PURE_DP_DELTA"]

#: The delta at which a pure-DP job (delta = 0) is measured: PLD reports an infinite epsilon at 0.
PURE_DP_DELTA = 1e-12


@dataclass
class SimulationResult:
    model: dict[str, np.ndarray]
    summary: dict[str, Any]
    epsilon_spent: float                 # the largest spend of any party for this job
    party_epsilon: dict[str, float] = field(default_factory=dict)
    rounds: int = 0
    wall_seconds: float = 0.0


def run_inprocess(spec: JobSpec, party_data: Sequence[tuple[np.ndarray, np.ndarray | None]], *,
                  seed: int | None = None, ledgers: Sequence[BudgetLedger] | None = None,
                  party_names: Sequence[str] | None = None,
                  progress: Callable[[float], None] | None = None) -> SimulationResult:
    """Run ``spec`` over parties holding ``party_data`` [(X, y), ...]; return the model and spends.

    ``seed`` makes every party's noise reproducible (simulation only; production parties use
    ``SecureRNG()``). ``ledgers`` default to in-memory ledgers whose limit is the job's own target.
    """
    t0 = time.perf_counter()
    algo = get_algorithm(spec.algorithm)
    names = list(party_names) if party_names is not None else [f"party-{i}" for i in range(len(party_data))]
    if len(names) != len(party_data):
        raise ValueError("one name per party")
    if ledgers is None:
        ledgers = [BudgetLedger(":memory:", epsilon_limit=spec.epsilon * (1 + 1e-9),
                                delta_limit=spec.delta if spec.delta > 0 else PURE_DP_DELTA) for _ in names]
    rngs = (SecureRNG.from_seed(f"{seed}:{spec.job_id}").spawn(len(names)) if seed is not None
            else [SecureRNG() for _ in names])
    halves = [algo.party() for _ in names]
    data = []
    for (X, y) in party_data:
        data.append((spec.schema.validate(X, y), None if y is None else np.asarray(y, dtype=np.int64)))
    # Each party charges the whole job before its first answer (refusal raises BudgetExceededError).
    for name, half, ledger in zip(names, halves, ledgers):
        ledger.charge(spec.job_id, half.job_event(spec), charge_id=f"{spec.job_id}:plan")
    coord = algo.coordinator(spec, names)
    rounds = 0
    while (task := coord.next_task()) is not None:
        answers = {}
        for name, half, (X, y), rng in zip(names, halves, data, rngs):
            half.check_task(spec, task)
            answers[name] = half.answer(spec, task, X, y, rng)
        coord.absorb(task, answers)
        rounds += 1
        if progress is not None:
            progress(coord.progress)
    spent = {n: led.spent(spec.job_id) for n, led in zip(names, ledgers)}
    return SimulationResult(model=coord.model(), summary=coord.summary(), epsilon_spent=max(spent.values()),
                            party_epsilon=spent, rounds=rounds, wall_seconds=time.perf_counter() - t0)
