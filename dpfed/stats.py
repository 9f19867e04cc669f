"""The statistics API: one-party functions in the style of diffprivlib's ``tools`` and a federated :func:`run`.

``dpfed.stats.mean(x, epsilon=1, bounds=(17, 90))`` (also ``count``, ``sum``, ``var``, ``std``, ``histogram``,
``quantile``, ``median``; :mod:`dpfed.algorithms.statistics.tools`) returns an ``Estimate`` with its standard
error and confidence interval. :func:`run` answers several queries over parties' records in ONE job (one plan,
charged to every party's ledger before anything is released) through the same party sessions as every learner:
in this process, or as party processes over gRPC with mutual TLS. Sits with the simulation runners (layer 7).
"""
from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.params import validate
from dpfed.algorithms.registry import get_algorithm
from dpfed.algorithms.statistics.tools import Estimate, count, histogram, mean, median, quantile, std, var
from dpfed.algorithms.statistics.tools import sum as sum  # noqa: A004 - diffprivlib's name
from dpfed.data.schema import Schema

__all__ = ["Estimate", "count", "sum", "mean", "var", "std", "histogram", "quantile", "median", "run", "job_params"]


def job_params(queries: Sequence[Any], *, epsilon: float, delta: float = 1e-6, group_by: str | None = None,
               noise: str = "local", mechanism: str = "auto", confidence: float = 0.95, parties: int = 1,
               schema: Schema | None = None, **secure: Any) -> dict[str, Any]:
    """A statistics job's parameters, validated as every party will (ranges, caps, queries against ``schema``).
    ``noise="distributed"`` runs under secure aggregation (``secure`` may set ``bits``, ``min_survivors``,
    ``colluders``)."""
    params: dict[str, Any] = {"epsilon": float(epsilon), "delta": float(delta), "queries": list(queries),
                              "noise": noise, "mechanism": mechanism, "confidence": float(confidence)}
    if group_by:
        params["group_by"] = group_by
    if noise == "distributed":
        params.update({"secure_aggregation": True, "min_survivors": int(parties), **secure})
    return validate(get_algorithm("statistics"), params, schema)


def run(queries: Sequence[Any], party_data: Sequence[tuple[np.ndarray, np.ndarray | None]], schema: Schema, *,
        epsilon: float, delta: float = 1e-6, group_by: str | None = None, noise: str = "local",
        mechanism: str = "auto", confidence: float = 0.95, transport: str = "inproc", seed: int | None = None,
        job_id: str | None = None, **secure: Any) -> dict[str, Any]:
    """Answer ``queries`` over the parties' records ``[(X, y), ...]`` in one job; returns ``results`` (one dict
    per query: value, se, lower, upper per group), the mechanism, rounds and each party's spend."""
    params = job_params(queries, epsilon=epsilon, delta=delta, group_by=group_by, noise=noise, mechanism=mechanism,
                        confidence=confidence, parties=len(party_data), schema=schema, **secure)
    spec = JobSpec(job_id or (f"stats-seed{seed}" if seed is not None else f"stats-{uuid.uuid4().hex[:12]}"),
                   "statistics", params, schema)
    if transport == "inproc":
        from dpfed.simulation.inprocess import run_inprocess

        res = run_inprocess(spec, party_data, seed=seed)
    elif transport == "grpc":
        from dpfed.simulation.grpc_local import run_grpc_simulation

        res = run_grpc_simulation(spec, party_data, seed=seed)
    else:
        raise ValueError(f"transport must be inproc or grpc, got {transport!r}")
    summary = dict(res.summary)
    return {"job_id": spec.job_id, "epsilon": float(epsilon), "delta": float(delta), "noise": noise,
            "mechanism": summary.get("mechanism"), "confidence": float(confidence),
            "secure_aggregation": bool(summary.get("secure_aggregation", False)), "parties": len(party_data),
            "transport": transport, "rounds": res.rounds, "epsilon_spent": res.epsilon_spent,
            "party_epsilon": dict(res.party_epsilon), "results": summary.get("results", [])}
