"""The contract between an algorithm and the federation layer (no networking here).

A job runs as a sequence of tasks. The coordinator half (:class:`CoordinatorAlgorithm`) decides each
task (public parameters plus public broadcast arrays, e.g. the current model), every party half
(:class:`PartyAlgorithm`) answers it from its own records, and the coordinator absorbs the answers
(sums them, steps the model). This is TF Privacy's DPQuery split (preprocess, accumulate, merge,
noise) made the unit of distribution, so both halves read side by side in one module.

Privacy is decided by the party: before it answers anything for a job it computes the job's whole
spend from the job's public parameters (:meth:`PartyAlgorithm.job_event`), charges it durably to its
own ledger, and refuses the job if that would exceed its limit. Afterwards it answers only tasks that
lie within the plan it charged (:meth:`PartyAlgorithm.check_task`). The same halves run in-process
(:mod:`dpfed.simulation`) and over gRPC (``party``/``coordinator``), so what is tested here is what
runs in deployment.
"""
from __future__ import annotations

import argparse
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from dp_accounting import DpEvent

from dpfed.rng import SecureRNG
from dpfed.schema import Schema

__all__ = ["JobSpec", "Task", "Answer", "TaskRejected", "PartyAlgorithm", "CoordinatorAlgorithm", "Algorithm"]

Answer = dict[str, np.ndarray]


class TaskRejected(ValueError):
    """A party refuses a job or task: outside the charged plan, wrong schema, bad parameters."""


@dataclass(frozen=True)
class JobSpec:
    """What a job is, all public: id, algorithm name, parameters (JSON values) and data schema.

    ``params`` always holds ``epsilon`` and ``delta`` (the per-party target of the whole job) and the
    algorithm's options; it is what a party reads to compute its spend.
    """

    job_id: str
    algorithm: str
    params: Mapping[str, Any]
    schema: Schema

    def __post_init__(self) -> None:
        eps = self.params.get("epsilon")
        if not isinstance(eps, (int, float)) or not eps > 0 or eps != eps or eps == float("inf"):
            raise ValueError("job params need a finite epsilon > 0")
        d = self.params.get("delta", 0.0)
        if not isinstance(d, (int, float)) or not 0.0 <= d < 1.0:
            raise ValueError("job params need 0 <= delta < 1")

    @property
    def epsilon(self) -> float:
        return float(self.params["epsilon"])

    @property
    def delta(self) -> float:
        return float(self.params.get("delta", 0.0))

    def to_json(self) -> str:
        return json.dumps({"job_id": self.job_id, "algorithm": self.algorithm, "params": dict(self.params),
                           "schema": self.schema.to_dict()}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "JobSpec":
        d = json.loads(text)
        return cls(str(d["job_id"]), str(d["algorithm"]), dict(d["params"]), Schema.from_dict(d["schema"]))


@dataclass(frozen=True)
class Task:
    """One request to every party: ``round`` counts from 0 and increases by one per task."""

    job_id: str
    round: int
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)


class PartyAlgorithm(ABC):
    """The party half: spend from public parameters, then clipped and noised answers."""

    @abstractmethod
    def job_event(self, spec: JobSpec) -> DpEvent:
        """The whole job's privacy cost at this party, computed from ``spec`` alone (never from data)."""

    @abstractmethod
    def check_task(self, spec: JobSpec, task: Task) -> None:
        """Raise :class:`TaskRejected` unless ``task`` lies within the plan that ``job_event`` charged."""

    @abstractmethod
    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Answer:
        """Compute the task's release from local records (already validated against ``spec.schema``)."""

    def needs_secure_aggregation(self, spec: JobSpec) -> bool:
        """True when this job's answers are private against the coordinator only if a secure
        aggregation hides each party's single answer (e.g. distributed noise). dpfed has no secure
        aggregation yet, so a party daemon refuses such jobs unless it runs in a simulation."""
        return False


class CoordinatorAlgorithm(ABC):
    """The coordinator half: issues tasks, aggregates answers (post-processing only), builds the model."""

    @abstractmethod
    def next_task(self) -> Task | None:
        """The next task, or None when the job is finished."""

    @abstractmethod
    def absorb(self, task: Task, answers: Mapping[str, Answer]) -> None:
        """Aggregate the parties' answers to ``task`` (keyed by party name)."""

    @property
    @abstractmethod
    def progress(self) -> float:
        """Fraction of the job done, in [0, 1]."""

    @abstractmethod
    def model(self) -> dict[str, np.ndarray]:
        """The trained model as named arrays (saved with ``np.savez``; includes ``algorithm``)."""

    def summary(self) -> dict[str, Any]:
        """Extra JSON-able facts for reports (e.g. ``noise_multiplier``)."""
        return {}


@dataclass(frozen=True)
class Algorithm:
    """A registry entry: the two halves, evaluation, and the algorithm's command-line options."""

    name: str
    party: Callable[[], PartyAlgorithm]
    coordinator: Callable[[JobSpec, Sequence[str]], CoordinatorAlgorithm]
    evaluate: Callable[[Mapping[str, np.ndarray], np.ndarray, np.ndarray | None, Schema], dict[str, float]]
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    params_from_args: Callable[[argparse.Namespace], dict[str, Any]] | None = None
    default_delta: float = 1e-6
    needs_labels: bool = True
