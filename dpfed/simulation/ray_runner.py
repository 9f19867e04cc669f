"""Scale-out on Ray: every party is a Ray actor holding its own data, ledger and generator.

For researchers who simulate many parties on one machine or a Ray cluster (``ray start`` / KubeRay,
see ``deploy/``). The actors run the party session that the party daemon runs (charge the job's
whole spend to the party's own ledger first, then answer planned tasks, each round once); the
driver runs the coordinator half in the one driver loop. Parties answer each task in parallel. Transport is Ray's object
store inside one trusted cluster, so this is a simulation backend, not a deployment between
mutually distrusting owners (that is the gRPC/mutual-TLS path).
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from dpfed.algorithms import get_algorithm
from dpfed.algorithms.contract import Aggregate, JobSpec, Task
from dpfed.algorithms.driver import drive
from dpfed.simulation.inprocess import SimulationResult

__all__ = ["run_ray_simulation"]


def _party_actor_class():
    import ray

    @ray.remote(num_cpus=0.25)
    class PartyActor:
        """One party: its records, its ledger, its generator, and its session for the job."""

        def __init__(self, name: str, spec_json: str, X: np.ndarray, y: np.ndarray | None,
                     seed: int | None, ledger_path: str) -> None:
            from dpfed.simulation.inprocess import default_ledger, make_parties

            self.spec = JobSpec.from_json(spec_json)
            self.party = make_parties(self.spec, [(X, y)], seed=seed, party_names=[name],
                                      ledgers=[default_ledger(self.spec, ledger_path)])[0]
            self.session = None

        def decide(self) -> tuple[bool, str]:
            from dpfed.simulation.inprocess import open_sessions

            self.session = open_sessions(self.spec, [self.party])[0]
            return True, ""

        def answer(self, task: Task) -> dict[str, np.ndarray]:
            return self.session.answer(task)

        def spent(self) -> float:
            return self.party.ledger.spent(self.spec.job_id)

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
        if len(paths) != len(names):
            raise ValueError("one ledger path per party")
        actor = _party_actor_class()
        parties = [actor.remote(n, spec.to_json(), X, y, seed, p) for n, (X, y), p in zip(names, party_data, paths, strict=True)]
        ray.get([p.decide.remote() for p in parties])  # every party charges before any answer
        algo = get_algorithm(spec.algorithm)
        coord = algo.coordinator(spec, names)

        def gather(task: Task) -> list[Aggregate]:
            return [Aggregate(a, (n,)) for n, a in zip(names, ray.get([p.answer.remote(task) for p in parties]), strict=True)]

        rounds = drive(coord, gather, algo.combine,
                       on_round=None if progress is None else (lambda task, c: progress(c.progress)))
        spent = dict(zip(names, ray.get([p.spent.remote() for p in parties]), strict=True))
        return SimulationResult(model=coord.model(), summary=coord.summary(), epsilon_spent=max(spent.values()),
                                party_epsilon=spent, rounds=rounds, wall_seconds=time.perf_counter() - t0)
    finally:
        if started_here:
            ray.shutdown()
