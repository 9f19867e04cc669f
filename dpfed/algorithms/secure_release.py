"""The secure release of a learner under distributed noise: a protocol of its own (:class:`SecureRelease`).

:class:`~dpfed.algorithms.contract.PartyAlgorithm` is the plain contract (``job_event``, ``check_task``,
``answer``, ``task_event``). A learner that supports distributed noise under secure aggregation also has a
*secure* party half, a ``PartyAlgorithm`` that implements this protocol too, named by its registry entry
(:attr:`~dpfed.algorithms.contract.Algorithm.secure`) and chosen once per job from the job's public
parameters (:meth:`~dpfed.algorithms.contract.Algorithm.party_for`), never by branches on the noise mode
inside the learner. The protocol is TF Privacy's DPQuery split for distributed noise (Kairouz, Liu &
Steinke, ICML 2021, Alg. 1 and 2) in four parts:

* :meth:`SecureRelease.plan`: the round's public :class:`~dpfed.algorithms.secure_plan.SecurePlan` (noise,
  layout, rotation seed), from the job spec and the task alone; its :meth:`~SecurePlan.event` must lie
  within the half's ``task_event`` for the round (checked by the federation's release gate, whatever the
  learner);
* :meth:`SecureRelease.rows`: the party's per-record rows (or its exact integer vector as one row);
* :meth:`SecureRelease.row_sum`: optionally the party's sum of clipped rows (``"party"`` rounding);
* :meth:`SecureRelease.decode`: the coordinator's decode of the survivors' sum mod 2^B into named arrays.

The secure session (:mod:`dpfed.federation.secure_session`) and the coordinator's gather
(:mod:`dpfed.federation.secure_gather`) use nothing else of a learner's secure path.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Iterator, Protocol

import numpy as np

from dpfed.algorithms.contract import Algorithm, Answer, JobSpec, Released, Task, TaskRejected
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.core.rng import SecureRNG

__all__ = ["SecureRelease", "PlainAnswerRefused", "VectorModule", "VectorRelease", "release_of", "release_for"]


class SecureRelease(ABC):
    """A learner's release under distributed noise and secure aggregation (module docstring)."""

    @abstractmethod
    def plan(self, spec: JobSpec, task: Task) -> SecurePlan | None:
        """The public plan of ``task``'s release (noise plan, layout of the flat vector, rotation seed), from
        ``spec`` and ``task`` alone; None: ``task`` is not a secure round of this job."""

    @abstractmethod
    def rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
             rng: SecureRNG) -> Iterator[np.ndarray]:
        """The task's per-record rows in :meth:`plan`'s layout, in chunks (one row, one privacy unit; clipped by
        the encoder to the plan's clip), or for an ``integer`` plan the party's exact integer vector."""

    def row_sum(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
                rng: SecureRNG) -> np.ndarray | None:
        """For a plan with ``rounding == "party"``: the sum of :meth:`rows`, each row clipped to the plan's
        clip, computed directly (e.g. by ghost clipping); None: the encoder sums :meth:`rows` itself. Used for
        dpfed's own learners only (``PartyAlgorithm.builtin``)."""
        return None

    def decode(self, spec: JobSpec, task: Task, plan: SecurePlan, total: np.ndarray) -> Answer:
        """The coordinator's decode of the survivors' sum mod 2^B into the named arrays of the plan's layout
        (KLS21 Alg. 2; centring only for integer plans). The learner's coordinator half post-processes them."""
        return plan.decode(total)


class VectorModule(Protocol):
    """A learner's secure module whose rounds each release the party's exact integer vector as one row."""

    def secure_plan(self, spec: JobSpec, task: Task) -> SecurePlan | None: ...

    def secure_rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None) -> Iterator[np.ndarray]: ...


class VectorRelease(SecureRelease):
    """A :class:`SecureRelease` whose plan and one row come from the learner's secure module (``vector_module``:
    its ``secure_plan`` and ``secure_rows``; the row needs no randomness of the party's)."""

    vector_module: ClassVar[VectorModule]

    def plan(self, spec: JobSpec, task: Task) -> SecurePlan | None:
        return self.vector_module.secure_plan(spec, task)

    def rows(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
             rng: SecureRNG) -> Iterator[np.ndarray]:
        return self.vector_module.secure_rows(spec, task, X, y)


class PlainAnswerRefused:
    """A secure party half's plain ``answer``: refused, since its job's releases leave only through secure
    aggregation (:meth:`SecureRelease.rows` plus one noise share). Listed first in the bases, before the plain
    party class whose ``answer`` it replaces."""

    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG) -> Released:
        raise TaskRejected("a secure-aggregation job answers only through secure aggregation")


def release_of(half: object) -> SecureRelease | None:
    """``half`` as a :class:`SecureRelease` (None: it has no secure release)."""
    return half if isinstance(half, SecureRelease) else None


def release_for(algo: Algorithm, spec: JobSpec) -> SecureRelease:
    """The secure release of a job (its party half chosen once from the params): what the coordinator's gather
    uses to plan and decode each round. ValueError if the learner has none."""
    release = release_of(algo.party_for(spec.params))
    if release is None:
        raise ValueError(f"{algo.name} has no secure-aggregation release")
    return release
