"""A small, real DP algorithm for the networking tests and benchmark: Laplace noisy means.

Each of ``rounds`` tasks asks every party for the noisy vector (count, column sums tiled to
``width`` entries) of its records scaled to [0, 1] by the schema's public bounds. One record
changes each entry by at most 1, so the L1 sensitivity is ``1 + width`` and Laplace noise of
scale ``(1 + width) * rounds / epsilon`` per round gives epsilon-DP for the whole job (basic
composition over rounds; Dwork & Roth 2014, Thm 3.6 and 3.16). The coordinator sums the answers
(parallel composition over parties) and its model is the noisy mean. ``broadcast`` makes the
coordinator send a public array of that many float64s with every task (benchmarks). ``stall_rounds`` (a list)
and ``stall_seconds`` make every party spend that long computing those rounds' answers, ``absorb_stall_rounds`` the
coordinator that long absorbing those rounds' sums (a daemon busy mid-round, for the shutdown tests).

Registered through the daemons' ``plugins`` setting (``plugins = ["net_noisy_mean"]``).
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from dp_accounting import LaplaceDpEvent, SelfComposedDpEvent

from dpfed.algorithms.contract import (
    Aggregate,
    Algorithm,
    Answer,
    CoordinatorAlgorithm,
    JobSpec,
    PartyAlgorithm,
    Task,
    TaskRejected,
)
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Schema

NAME = "noisy-mean"


def _shape(spec: JobSpec) -> tuple[int, int, int]:
    p = spec.params
    rounds, width = int(p.get("rounds", 1)), int(p.get("width", spec.schema.n_features))
    broadcast = int(p.get("broadcast", 0))
    if rounds < 1 or width < 1 or broadcast < 0:
        raise TaskRejected("rounds and width must be >= 1, broadcast >= 0")
    return rounds, width, broadcast


def _scaled(X: np.ndarray, schema: Schema) -> np.ndarray:
    lo = np.array([0.0 if f.kind == "categorical" else f.lower for f in schema.features])
    hi = np.array([max(f.categories - 1, 1) if f.kind == "categorical" else f.upper for f in schema.features])
    return np.clip((X - lo) / (hi - lo), 0.0, 1.0)


def _laplace(rng: SecureRNG, scale: float, size: int) -> np.ndarray:
    """Inverse-CDF Laplace draws from keystream uniforms."""
    u = rng.uniform(size) - 0.5
    return -scale * np.sign(u) * np.log1p(-2.0 * np.abs(u))


class NoisyMeanParty(PartyAlgorithm):
    def job_event(self, spec: JobSpec) -> SelfComposedDpEvent:
        rounds, _, _ = _shape(spec)
        return SelfComposedDpEvent(LaplaceDpEvent(noise_multiplier=rounds / spec.epsilon), rounds)

    def check_task(self, spec: JobSpec, task: Task) -> None:
        rounds, width, broadcast = _shape(spec)
        if task.kind != "sum" or not 0 <= task.round < rounds:
            raise TaskRejected(f"task {task.kind!r} round {task.round} is outside the plan of {rounds} sum rounds")
        if int(task.params.get("width", -1)) != width:
            raise TaskRejected("task width differs from the job's")
        if task.arrays.get("model", np.zeros(0)).shape != (broadcast,):
            raise TaskRejected("broadcast array has the wrong shape")

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Answer:
        rounds, width, _ = _shape(spec)
        if task.round in spec.params.get("stall_rounds", ()):
            time.sleep(float(spec.params.get("stall_seconds", 0.0)))
        sums = _scaled(X, spec.schema).sum(axis=0) if len(X) else np.zeros(spec.schema.n_features)
        vec = np.concatenate([[float(len(X))], np.tile(sums, -(-width // max(sums.size, 1)))[:width]])
        return {"sum": vec + _laplace(rng, (1 + width) * rounds / spec.epsilon, vec.size)}


class NoisyMeanCoordinator(CoordinatorAlgorithm):
    def __init__(self, spec: JobSpec, parties: Sequence[str]) -> None:
        self.spec, self.parties = spec, list(parties)
        self.rounds, self.width, self.broadcast = _shape(spec)
        self.done = 0
        self.total = np.zeros(1 + self.width)

    def next_task(self) -> Task | None:
        if self.done >= self.rounds:
            return None
        return Task(self.spec.job_id, self.done, "sum", {"width": self.width},
                    {"model": np.full(self.broadcast, float(self.done))})

    def absorb(self, task: Task, combined: Aggregate) -> None:
        if sorted(combined.parties) != sorted(self.parties):
            raise ValueError("answers from the wrong set of parties")
        total = combined.arrays.get("sum")
        if total is None or total.shape != (1 + self.width,):
            raise ValueError("answers of the wrong shape")
        if task.round in self.spec.params.get("absorb_stall_rounds", ()):
            time.sleep(float(self.spec.params.get("stall_seconds", 0.0)))
        self.total = self.total + total
        self.done += 1

    @property
    def progress(self) -> float:
        return self.done / self.rounds

    def model(self) -> dict[str, np.ndarray]:
        avg = self.total / max(self.done, 1)
        return {"algorithm": np.array(NAME), "count": np.array(avg[0]),
                "mean": avg[1:self.spec.schema.n_features + 1] / max(avg[0], 1.0)}

    def summary(self) -> dict:
        return {"rounds": self.done}


def evaluate(model, X, y, schema):
    return {"mean_abs_error": float(np.abs(model["mean"] - _scaled(X, schema).mean(axis=0)).mean())}


ALGORITHMS = {NAME: Algorithm(NAME, NoisyMeanParty, NoisyMeanCoordinator, evaluate, default_delta=0.0,
                              needs_labels=False)}
