"""Learners whose whole job is one release of a statistics vector (naive Bayes, linear regression): the party
checks of that one task and the coordinator's check of who contributed to the sum, shared so that each learner
supplies only its plan, its vector and its post-processing."""
from __future__ import annotations

import numpy as np

from abc import abstractmethod
from typing import ClassVar, Sequence

from dp_accounting import dp_event

from dpfed.algorithms.contract import Aggregate, JobSpec, PartyAlgorithm, Task, TaskRejected

__all__ = ["OneReleaseParty", "check_contributors", "integer_total"]


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
