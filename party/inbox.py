"""The party's incoming task parts, bounded (issue 24).

A task arrives as a header part followed by chunk parts, the last marked ``last``. The coordinator
decides how many parts and how large they are, so the party holds them only under three rules:

- a task of a job this party has no session for (never offered, refused, or ended) is answered at once
  with a refusal and none of its parts is kept;
- at most one incomplete task per job: a new header drops the job's unfinished task;
- the arrays announced by all incomplete tasks together stay within ``max_bytes`` (``party.toml``
  ``max_buffered_bytes``); a task that would exceed it is refused.

Parts of a task that was refused, dropped or never announced are ignored (logged at debug level
only: a flood of them must not fill the log either).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from protos import dpfed_pb2 as pb
from protos.codec import ArrayAssembler, ProtocolError

__all__ = ["TaskInbox", "Arrived"]

log = logging.getLogger("dpfed.party")


@dataclass
class Arrived:
    """A task ready to answer: its header part, its arrays, and the reason to refuse it ("" if none)."""

    head: pb.CoordinatorMessage
    arrays: ArrayAssembler
    error: str = ""


class TaskInbox:
    """Incomplete tasks, one per job, within ``max_bytes`` of announced arrays in all."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self._open: dict[str, Arrived] = {}   # job id -> its one incomplete task

    def buffered(self) -> int:
        """Bytes announced by the incomplete tasks' arrays (an upper bound on what they hold)."""
        return sum(a.arrays.announced for a in self._open.values())

    def drop(self, job_id: str) -> None:
        """Forget ``job_id``'s incomplete task (the job ended)."""
        self._open.pop(job_id, None)

    def add(self, msg: pb.CoordinatorMessage, has_session: bool) -> Arrived | None:
        """Take one task part; return the task once it is complete or refused, else None."""
        job = msg.job_id
        if msg.WhichOneof("body") == "task":
            old = self._open.pop(job, None)
            if old is not None:
                log.warning("job %s: task %s dropped unfinished, task %s follows", job, old.head.task_id, msg.task_id)
            if not has_session:
                return Arrived(msg, ArrayAssembler(0), f"job {job} was not accepted by this party")
            self._open[job] = cur = Arrived(msg, ArrayAssembler(self.max_bytes))
        else:
            cur = self._open.get(job)  # type: ignore[assignment]
            if cur is None or cur.head.task_id != msg.task_id:
                log.debug("job %s: part of task %s ignored (refused, dropped or never announced)", job, msg.task_id)
                return None
        try:
            cur.arrays.add_all(msg.chunks)
            if self.buffered() > self.max_bytes:
                cur.error = (f"task {msg.task_id} would hold more than this party's {self.max_bytes} bytes of "
                             "incomplete tasks (max_buffered_bytes)")
        except ProtocolError as exc:
            cur.error = f"malformed task: {exc}"
        if msg.last or cur.error:
            del self._open[job]
            return cur
        return None
