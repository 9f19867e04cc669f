"""Learners whose whole job is one release of a statistics vector (naive Bayes, linear regression, statistics,
random forest): the party checks of that one task and the coordinator's side of it (who is in the job, the one
task, who contributed to the sum), shared so that each learner supplies only its plan, its vector and its
post-processing."""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

import numpy as np
from dp_accounting import dp_event

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import (Aggregate, CoordinatorAlgorithm, JobSpec, PartyAlgorithm, Released, Task,
                                      TaskRejected)
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.core.rng import SecureRNG

__all__ = ["OneRelease", "OneReleaseParty", "OneReleaseCoordinator", "check_contributors", "integer_total",
           "noisy_vector", "one_task_plan"]


class OneReleaseParty(PartyAlgorithm):
    """The party half of a one-release learner: the job is its one task (``task_kind``, round 0, no parameters)
    and that task's event is the job's; a subclass gives :meth:`release_event` and ``answer``."""

    #: the kind of the learner's one task, and its name in messages
    task_kind: ClassVar[str] = ""
    learner: ClassVar[str] = ""

    @abstractmethod
    def release_event(self, spec: JobSpec) -> dp_event.DpEvent:
        """The event of the job's one release, from ``spec`` alone (ValueError for invalid parameters)."""

    def job_event(self, spec: JobSpec) -> dp_event.DpEvent:
        try:
            return self.release_event(spec)
        except ValueError as exc:
            raise TaskRejected(f"invalid {self.learner} parameters: {exc}") from None

    def check_task(self, spec: JobSpec, task: Task) -> None:
        if task.job_id != spec.job_id:
            raise TaskRejected(f"task is for job {task.job_id!r}, not {spec.job_id!r}")
        if task.kind != self.task_kind or task.round != 0:
            raise TaskRejected(f"{self.learner} answers one task ({self.task_kind!r}, round 0); got {task.kind!r} "
                               f"round {task.round}")
        if task.params or task.arrays:
            raise TaskRejected(f"the {self.learner} task carries no parameters (its plan is the job spec)")

    def task_event(self, spec: JobSpec, task: Task) -> dp_event.DpEvent:
        return self.release_event(spec)  # the job is this one release


def noisy_vector(key: str, vector: np.ndarray, laplace: bool, *, l1: int, epsilon: float, l2: float, sigma: float,
                 rng: SecureRNG) -> Released:
    """The party's integer ``vector`` released under ``key``: plus exact discrete Laplace noise for ``epsilon``
    (``laplace``: pure DP, L1 sensitivity ``l1``), else exact rounded Gaussian noise of ``sigma`` (L2 sensitivity
    ``l2``), with the release's event (the session checks it lies within the charged plan before anything
    leaves)."""
    from dpfed.core.mechanisms import discrete_laplace, rounded_gaussian

    if laplace:
        rel = discrete_laplace(vector, sensitivity=l1, epsilon=epsilon, rng=rng)
    else:
        rel = rounded_gaussian(vector, sensitivity=l2, sigma=sigma, rng=rng)
    return Released({key: np.asarray(rel.value, dtype=np.int64)}, (rel.event,))


def one_task_plan(spec: JobSpec, task: Task, task_kind: str,
                  release: Callable[[JobSpec], tuple[Any, SecurePlan]]) -> SecurePlan | None:
    """The :class:`SecurePlan` of ``task``, the second part of ``release(spec)``; None unless the job is under
    secure aggregation and ``task`` is its one task (``task_kind``, round 0)."""
    if not sn.is_secure(spec.params) or task.kind != task_kind or task.round != 0:
        return None
    return release(spec)[1]


def check_contributors(parties: Sequence[str], combined: Aggregate, *, secure: bool, min_survivors: int,
                       learner: str) -> int:
    """The number of parties in the sum ``combined``: exactly the job's parties, or under secure aggregation the
    survivors (at least ``min_survivors``, none unknown); ValueError otherwise."""
    got = set(combined.parties)
    missing, unknown = set(parties) - got, got - set(parties)
    if secure and not combined.parties:
        raise ValueError(f"the {learner} round was aborted: fewer than {min_survivors} parties "
                         "contributed (nothing was unmasked)")
    if secure and not unknown and len(got) >= min_survivors:  # SecAgg: the survivors' sum
        missing = set()
    if missing or unknown:
        raise ValueError(f"expected answers from exactly the {len(parties)} job parties; "
                         f"missing {sorted(missing)}, unknown {sorted(unknown)}")
    return len(got)


def integer_total(combined: Aggregate, key: str, length: int) -> np.ndarray:
    """The summed integer vector ``key`` of a one-release job as int64; ValueError unless it has ``length``
    integer entries (what each of these learners' coordinators checks before it post-processes)."""
    total = np.asarray(combined.arrays.get(key, np.zeros(0)))
    if total.shape != (length,) or not np.issubdtype(total.dtype, np.integer):
        raise ValueError(f"expected integer {key!r} vectors of length {length}, "
                         f"got dtype {total.dtype} shape {tuple(total.shape)}")
    return total.astype(np.int64)


@dataclass
class OneRelease:
    """The coordinator's side of a one-release job: its parties, whether the sum is secure (and then how many
    survivors it needs), and whether its one task (``task_kind``, round 0, no parameters) was issued."""

    job_id: str
    task_kind: str
    learner: str
    parties: list[str]
    secure: bool
    min_survivors: int
    issued: bool = False

    @classmethod
    def of(cls, spec: JobSpec, parties: Sequence[str], task_kind: str, learner: str) -> OneRelease:
        """The job ``spec`` over ``parties``; ValueError when there are none."""
        names = list(parties)
        if not names:
            raise ValueError(f"a {learner} job needs at least one party")
        secure = sn.is_secure(spec.params)
        need = sn.secure_params(spec.params).min_survivors if secure else len(names)
        return cls(spec.job_id, task_kind, learner, names, secure, need)

    def next_task(self) -> Task | None:
        """The one task the first time, then None."""
        if self.issued:
            return None
        self.issued = True
        return Task(self.job_id, 0, self.task_kind)

    def total(self, task: Task, combined: Aggregate, key: str, length: int, *,
              absorbed: bool) -> tuple[int, np.ndarray]:
        """The number of contributors (:func:`check_contributors`) and the summed vector ``key``
        (:func:`integer_total`) of the answers to the one task; ValueError for another task or when the job
        has ``absorbed`` its answers already."""
        if task.kind != self.task_kind or task.round != 0 or absorbed:
            raise ValueError(f"{self.learner} absorbs exactly one answer set, for its round-0 task")
        got = check_contributors(self.parties, combined, secure=self.secure, min_survivors=self.min_survivors,
                                 learner=self.learner)
        return got, integer_total(combined, key, length)


class OneReleaseCoordinator(CoordinatorAlgorithm):
    """The coordinator half of a one-release learner: its one task, then the summed integer vector ``key`` of the
    contributors (:meth:`OneRelease.total`) post-processed once into the model. A subclass gives
    :attr:`length`, :meth:`model_from` and ``summary``; ``survivors`` is the number of parties in the sum (one
    noise release, or share, each), the job's parties until it is known."""

    #: the name of the summed vector in the parties' answers
    key: ClassVar[str] = "stats"

    def __init__(self, spec: JobSpec, parties: Sequence[str], task_kind: str, learner: str) -> None:
        self.spec, self.release = spec, OneRelease.of(spec, parties, task_kind, learner)
        self.survivors = len(self.release.parties)
        self._model: dict[str, np.ndarray] | None = None

    @property
    @abstractmethod
    def length(self) -> int:
        """The length of the summed vector."""

    @abstractmethod
    def model_from(self, total: np.ndarray, contributors: int) -> dict[str, np.ndarray]:
        """The model from ``total``, the int64 sum of ``contributors`` parties' vectors (post-processing only)."""

    def next_task(self) -> Task | None:
        return self.release.next_task()

    def absorb(self, task: Task, combined: Aggregate) -> None:
        got, total = self.release.total(task, combined, self.key, self.length, absorbed=self._model is not None)
        self.survivors = got
        self._model = self.model_from(total, got)

    @property
    def progress(self) -> float:
        return 1.0 if self._model is not None else 0.0

    def model(self) -> dict[str, np.ndarray]:
        if self._model is None:
            raise RuntimeError(f"the {self.release.learner} job has not finished")
        return dict(self._model)
