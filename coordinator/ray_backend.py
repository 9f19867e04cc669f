"""Scale-out on Ray: every party is a Ray actor holding its own data, ledger and generator.

For researchers who simulate many parties on one machine or a Ray cluster (``ray start`` / KubeRay,
see ``deploy/``). The actors run exactly the party half that the party daemon runs (charge the
job's whole spend to the party's own ledger first, then ``check_task`` and ``answer`` per task); the
driver runs the coordinator half. Parties answer each task in parallel. Transport is Ray's object
store inside one trusted cluster, so this is a simulation backend, not a deployment between
mutually distrusting owners (that is the gRPC/mutual-TLS path).
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from dpfed.algorithms import get_algorithm
from dpfed.federated import JobSpec, Task
from dpfed.simulation import PURE_DP_DELTA, SimulationResult

__all__ = ["run_ray_simulation"]


def _party_actor_class():
    import ray

    @ray.remote(num_cpus=0.25)
    class PartyActor:
        """One party: its records, its ledger, its party half, its generator."""

        def __init__(self, name: str, spec_json: str, X: np.ndarray, y: np.ndarray | None,
                     seed: str | None, ledger_path: str, epsilon_limit: float, delta_limit: float) -> None:
            from dpfed.ledger import BudgetLedger
            from dpfed.rng import SecureRNG

            self.name = name
            self.spec = JobSpec.from_json(spec_json)
            self.half = get_algorithm(self.spec.algorithm).party()
            self.X = self.spec.schema.validate(X, y)
            self.y = None if y is None else np.asarray(y, dtype=np.int64)
            self.rng = SecureRNG.from_seed(seed) if seed is not None else SecureRNG()
            self.ledger = BudgetLedger(ledger_path, epsilon_limit=epsilon_limit, delta_limit=delta_limit)

        def charge_plan(self) -> float:
            return self.ledger.charge(self.spec.job_id, self.half.job_event(self.spec),
                                      charge_id=f"{self.spec.job_id}:plan")

        def answer(self, task: Task) -> dict[str, np.ndarray]:
            self.half.check_task(self.spec, task)
            return self.half.answer(self.spec, task, self.X, self.y, self.rng)

        def spent(self) -> float:
            return self.ledger.spent(self.spec.job_id)

    return PartyActor


def run_ray_simulation(spec: JobSpec, party_data: Sequence[tuple[np.ndarray, np.ndarray | None]], *,
                       seed: int | None = None, address: str | None = None,
                       ledger_paths: Sequence[str] | None = None,
                       progress: Callable[[float], None] | None = None) -> SimulationResult:
    """Run ``spec`` with one Ray actor per party; ``address`` joins an existing cluster (else local)."""
    import ray

    t0 = time.perf_counter()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        names = [f"party-{i}" for i in range(len(party_data))]
        paths = list(ledger_paths) if ledger_paths is not None else [":memory:"] * len(names)
        actor = _party_actor_class()
        parties = [actor.remote(n, spec.to_json(), X, y,
                                None if seed is None else f"{seed}:{spec.job_id}:{n}", p,
                                spec.epsilon * (1 + 1e-9), spec.delta if spec.delta > 0 else PURE_DP_DELTA)
                   for n, (X, y), p in zip(names, party_data, paths)]
        ray.get([p.charge_plan.remote() for p in parties])  # every party charges before any answer
        coord = get_algorithm(spec.algorithm).coordinator(spec, names)
        rounds = 0
        while (task := coord.next_task()) is not None:
            answers = ray.get([p.answer.remote(task) for p in parties])
            coord.absorb(task, dict(zip(names, answers)))
            rounds += 1
            if progress is not None:
                progress(coord.progress)
        spent = dict(zip(names, ray.get([p.spent.remote() for p in parties])))
        return SimulationResult(model=coord.model(), summary=coord.summary(), epsilon_spent=max(spent.values()),
                                party_epsilon=spent, rounds=rounds, wall_seconds=time.perf_counter() - t0)
    finally:
        if started_here:
            ray.shutdown()
