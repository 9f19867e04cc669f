"""What the coordinator saw of each job, round by round, kept in memory for the console (issue 28).

A :class:`JobTimeline` holds public facts only, all of which the coordinator learns anyway: when each
round ended, how long it took, how many bytes of answers arrived for it, refusals with their reasons,
dropouts and aborted rounds. Nothing here comes from a record (the coordinator never has one). The
timelines live as long as the coordinator process: after a restart a job's earlier rounds are in its
record (``rounds``, ``summary``) but not here.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JobTimeline", "Timelines", "MAX_ROUNDS_KEPT", "MAX_JOBS_KEPT"]

MAX_ROUNDS_KEPT = 10_000   # per job: the latest rounds (a plot needs no more)
MAX_JOBS_KEPT = 200        # the most recently active jobs


@dataclass
class JobTimeline:
    """One job's rounds (end time, seconds, answer bytes), refusals, dropouts and aborted rounds."""

    job_id: str
    algorithm: str
    rounds: deque = field(default_factory=lambda: deque(maxlen=MAX_ROUNDS_KEPT))  # (t_end, round, seconds, bytes)
    refusals: list[dict[str, Any]] = field(default_factory=list)  # {"time", "party", "reason", "kind"}
    dropouts: int = 0
    aborted_rounds: int = 0
    round_started: float = field(default_factory=time.time)
    pending_bytes: int = 0

    def seconds_per_round(self, last: int = 20) -> float | None:
        """Mean duration of the latest ``last`` rounds (None before the first round ends)."""
        recent = list(self.rounds)[-last:]
        return sum(r[2] for r in recent) / len(recent) if recent else None

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "algorithm": self.algorithm,
                "rounds": [{"time": t, "round": r, "seconds": s, "answer_bytes": b} for t, r, s, b in self.rounds],
                "refusals": list(self.refusals), "dropouts": self.dropouts, "aborted_rounds": self.aborted_rounds,
                "seconds_per_round": self.seconds_per_round()}


class Timelines:
    """Thread-safe map job id -> :class:`JobTimeline`, keeping the :data:`MAX_JOBS_KEPT` latest jobs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, JobTimeline] = OrderedDict()

    def get(self, job_id: str, algorithm: str = "") -> JobTimeline:
        with self._lock:
            tl = self._jobs.get(job_id)
            if tl is None:
                tl = self._jobs[job_id] = JobTimeline(job_id, algorithm)
                while len(self._jobs) > MAX_JOBS_KEPT:
                    self._jobs.popitem(last=False)
            elif algorithm and not tl.algorithm:
                tl.algorithm = algorithm
            self._jobs.move_to_end(job_id)
            return tl

    def peek(self, job_id: str) -> JobTimeline | None:
        with self._lock:
            return self._jobs.get(job_id)

    def snapshot(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            tl = self._jobs.get(job_id)
            return None if tl is None else tl.to_dict()

    def round_done(self, job_id: str, round_: int, now: float | None = None) -> tuple[float, int]:
        """Close the job's current round: record it, return (its seconds, its answer bytes)."""
        now = time.time() if now is None else now
        with self._lock:
            tl = self._jobs.get(job_id)
            if tl is None:
                return 0.0, 0
            seconds, nbytes = max(now - tl.round_started, 0.0), tl.pending_bytes
            tl.rounds.append((now, int(round_), seconds, nbytes))
            tl.round_started, tl.pending_bytes = now, 0
            return seconds, nbytes

    def add_bytes(self, job_id: str, nbytes: int) -> None:
        with self._lock:
            tl = self._jobs.get(job_id)
            if tl is not None:
                tl.pending_bytes += int(nbytes)
