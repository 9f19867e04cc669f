"""The one driver loop of a job: ``next_task`` -> gather the answers -> ``combine`` -> ``absorb``.

Every runner uses :func:`drive`: the coordinator daemon (answers over gRPC), the in-process and
Ray simulations, and the estimators' local ``fit`` (:func:`run_local`). A runner supplies only
``gather``, how one task reaches the parties and how their answers come back, as a list of
partial :class:`~dpfed.algorithms.contract.Aggregate`s (one per party, or one per worker that
already combined its parties' answers); the loop merges them with the algorithm's ``combine``.
It lives in the algorithms layer, below the federation, so that the estimators can use it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from dpfed.algorithms.contract import (Aggregate, Algorithm, CoordinatorAlgorithm, JobSpec, PartyAlgorithm,
                                       Released, Task, released_arrays)
from dpfed.core.rng import SecureRNG

__all__ = ["drive", "run_local", "LocalRun"]

Gather = Callable[[Task], Sequence[Aggregate]]
Combine = Callable[[Task, Sequence[Aggregate]], Aggregate]


def drive(coord: CoordinatorAlgorithm, gather: Gather, combine: Combine, *,
          on_round: Callable[[Task, CoordinatorAlgorithm], None] | None = None, first: Task | None = None) -> int:
    """Run ``coord`` to the end; return the number of rounds. ``on_round`` runs after each absorb
    (progress). ``first`` resumes a checkpointed job: the task ``coord.next_task()`` had issued when
    ``coord`` was saved (asked again as it was, so that parties can replay their stored answers)."""
    rounds = 0
    task = first if first is not None else coord.next_task()
    while task is not None:
        coord.absorb(task, combine(task, list(gather(task))))
        rounds += 1
        if on_round is not None:
            on_round(task, coord)
        task = coord.next_task()
    return rounds


@dataclass
class LocalRun:
    coordinator: CoordinatorAlgorithm
    event: object  # the DpEvent of the whole job (None for a non-private baseline)
    rounds: int


def run_local(algo: Algorithm, spec: JobSpec, X: np.ndarray, y: np.ndarray | None, rng: SecureRNG, *,
              answer: Callable[[Task], dict] | None = None, private: bool = True) -> LocalRun:
    """One party, no ledger, no network: an estimator's ``fit``.

    The party half validates the job (``job_event``) and checks every task against its plan, as a
    party does; ``answer`` replaces the party's answer (non-private baselines only).
    """
    half: PartyAlgorithm = algo.party_for(spec.params)
    event = half.job_event(spec) if private else None
    coord = algo.coordinator(spec, ["local"])

    def gather(task: Task) -> list[Aggregate]:
        if answer is not None:
            return [Aggregate(answer(task), ("local",))]
        half.check_task(spec, task)
        planned = half.task_event(spec, task) if private else None
        out = half.answer(spec, task, X, y, rng)
        arrays = released_arrays(half, task, out, planned) if private else (
            out.arrays if isinstance(out, Released) else out)
        return [Aggregate(arrays, ("local",))]

    rounds = drive(coord, gather, algo.combine)
    return LocalRun(coord, event, rounds)
