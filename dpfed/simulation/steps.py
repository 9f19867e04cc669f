"""The steps every simulation runner shares: name the parties and fix the job (start), follow the
driver's progress (drive), merge the summaries and report the run (report).

A runner (:func:`~dpfed.simulation.inprocess.run_inprocess`, :func:`~dpfed.simulation.ray_runner.run_ray_simulation`,
:func:`~dpfed.simulation.grpc_local.run_grpc_simulation`) goes through the same named steps: ``start`` (the
parties and their transport), ``offer`` (every party decides and charges the job before any answer), ``drive``
(the one driver loop, :func:`dpfed.algorithms.driver.drive`), ``collect`` (the model and each party's spend)
and ``report`` (:class:`SimulationResult`); what the three do alike lives here, once.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from dpfed.algorithms.contract import CoordinatorAlgorithm, JobSpec, Task
from dpfed.algorithms.secure_noise import is_secure

__all__ = ["SimulationResult", "PartyData", "party_names", "secure_spec", "start_job", "on_round", "job_summary",
           "report"]

PartyData = Sequence[tuple[np.ndarray, np.ndarray | None]]


@dataclass
class SimulationResult:
    model: dict[str, np.ndarray]
    summary: dict[str, Any]
    epsilon_spent: float                 # the largest spend of any party for this job
    party_epsilon: dict[str, float] = field(default_factory=dict)
    rounds: int = 0
    wall_seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)  # runner facts (e.g. Ray workers and nodes)


def party_names(party_data: PartyData, names: Sequence[str] | None) -> list[str]:
    """start: the parties' names (``party-0``, ``party-1``, ... by default), one per (X, y), at least one."""
    out = list(names) if names is not None else [f"party-{i}" for i in range(len(party_data))]
    if len(out) != len(party_data) or not out:
        raise ValueError("one name per party, at least one party")
    return out


def secure_spec(spec: JobSpec, names: Sequence[str], records: int) -> JobSpec:
    """A secure job's spec with the roster (and, unless given, the public record bound) filled in."""
    if not is_secure(spec.params):
        return spec
    params = {"roster": list(names), "records": int(records), **dict(spec.params)}
    return JobSpec(spec.job_id, spec.algorithm, params, spec.schema)


def start_job(spec: JobSpec, party_data: PartyData, names: Sequence[str] | None) -> tuple[list[str], JobSpec]:
    """start: the parties' names (:func:`party_names`) and the job as the parties will see it
    (:func:`secure_spec` with the total number of records as the public bound)."""
    out = party_names(party_data, names)
    return out, secure_spec(spec, out, sum(len(X) for X, _ in party_data))


def on_round(progress: Callable[[float], None] | None) -> Callable[[Task, CoordinatorAlgorithm], None] | None:
    """drive: the driver's ``on_round`` reporting the coordinator's progress, or None."""
    if progress is None:
        return None
    return lambda task, coord: progress(coord.progress)


def job_summary(coord: CoordinatorAlgorithm, secure_summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """report: the coordinator's summary and, for a secure job, the secure gather's (else
    ``secure_aggregation: false``)."""
    return {**coord.summary(), **(dict(secure_summary) if secure_summary is not None else {"secure_aggregation": False})}


def report(model: dict[str, np.ndarray], summary: dict[str, Any], spent: Mapping[str, float], names: Sequence[str],
           rounds: int, t0: float, info: dict[str, Any] | None = None) -> SimulationResult:
    """report: the :class:`SimulationResult` of a finished job (``t0``: ``time.perf_counter()`` at start)."""
    party_eps = {n: float(spent.get(n, 0.0)) for n in names}
    return SimulationResult(model=model, summary=summary, epsilon_spent=max(party_eps.values()),
                            party_epsilon=party_eps, rounds=rounds, wall_seconds=time.perf_counter() - t0,
                            info=dict(info or {}))

