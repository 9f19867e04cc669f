"""The coordinator's live state: party sessions, running jobs, and what every role does with them.

:class:`CoordinatorBase` holds the state shared by the party calls (:mod:`coordinator.party_calls`),
the job runner (:mod:`coordinator.runner`) and the operator calls (:class:`coordinator.server.Coordinator`),
all guarded by one condition variable, and the few helpers each of them uses.
"""
from __future__ import annotations

import queue
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from coordinator.config import CoordinatorConfig
from coordinator.metrics import Metrics
from coordinator.rpc import caller, check_session, check_version
from coordinator.state import JobRecord, StateStore
from dpfed.algorithms.contract import JobSpec
from dpfed.core.errors import DpfedError
from protos import dpfed_pb2 as pb

__all__ = ["Session", "Active", "JobFailed", "CoordinatorBase"]


@dataclass
class Session:
    """A party's registration: its token, its task stream's outbox, the offers it has answered."""

    name: str
    token: str
    outbox: Any = field(default_factory=queue.Queue)  # a Queue, or a ShardOutbox (coordinator on Ray)
    shard: int = -1                  # the ingress shard serving this session's stream (-1: this process)
    streaming: bool = False
    closed: bool = False
    offers: dict[str, bool] = field(default_factory=dict)  # job id offered -> answered (each offer answered once)


@dataclass
class Active:
    """The running job's volatile state (guarded by Coordinator._cond)."""

    spec: JobSpec
    parties: list[str]
    plan: "futures.Future"           # the plan's DpEvent, computed here from the public spec
    offer: pb.CoordinatorMessage
    responses: dict[str, pb.JobResponse] = field(default_factory=dict)   # first answer to the offer, per party
    ready: set[str] = field(default_factory=set)    # parties whose current session accepted the job
    round: int = -1
    task_id: str = ""
    msgs: dict[str, list[pb.CoordinatorMessage]] = field(default_factory=dict)  # the round's task per party
    answers: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    receiving: set[str] = field(default_factory=set)
    complete: bool = False           # every answer of the current round is in
    mismatch: dict[str, str] = field(default_factory=dict)   # parties whose reported event was refused
    failure: str = ""
    tolerant: bool = False       # secure aggregation: a refused task is a dropout, not a failure
    expects: dict[int, tuple] = field(default_factory=dict)  # coordinator on Ray: the round's expectation per shard
    errors: set[str] = field(default_factory=set)


class JobFailed(DpfedError):
    """A running job ends (failed or cancelled) with this reason."""


class CoordinatorBase:
    """The coordinator's state (set by :class:`coordinator.server.Coordinator`) and shared helpers."""

    config: CoordinatorConfig
    store: StateStore
    metrics: Metrics                            # Prometheus counters and the jobs' timelines
    jobs: dict[str, JobRecord]
    pool: Any                                   # a coordinator.shards.ShardPool on a Ray cluster, else None
    _cond: threading.Condition
    _version: int
    _sessions: dict[str, Session]               # party name -> current session
    _by_token: dict[str, Session]
    _last_seen: dict[str, float]
    _queue: "queue.Queue[str | None]"
    _actives: dict[str, Active]                 # running jobs (several at once), by job id
    _cancel: set[str]
    _running: set[str]
    _stopping: bool
    _planner: futures.ThreadPoolExecutor

    def _changed(self) -> None:
        """Call with self._cond held."""
        self._version += 1
        self._cond.notify_all()

    def _identify(self, context: grpc.ServicerContext, role: str) -> str | None:
        """The caller's certificate name (None on plain text), refusing the wrong role."""
        return caller(context, role, insecure=self.config.insecure, tls=self.config.tls)

    def _session(self, context: grpc.ServicerContext, version: int, token: str) -> Session:
        check_version(version)
        cert_name = self._identify(context, "party")
        with self._cond:
            sess = check_session(self._by_token.get(token), cert_name)
            self._last_seen[sess.name] = time.time()
            return sess

    def _fail(self, act: Active | None, reason: str) -> None:
        """Call with self._cond held: make the running job ``act`` fail with ``reason``."""
        if act is not None and not act.failure:
            act.failure = reason
            self._changed()

    def _offer_to(self, sess: Session, act: Active) -> None:
        """Call with self._cond held: put the job offer on one session's stream."""
        sess.offers[act.spec.job_id] = False
        sess.outbox.put(act.offer)

    def wait_for_parties(self, names: list[str], timeout: float, give_up=lambda: False) -> bool:
        """Block until every party in ``names`` has an open task stream (True) or time runs out."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                missing = [n for n in names if not (n in self._sessions and self._sessions[n].streaming)]
                if not missing:
                    return True
                if self._stopping or give_up():
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(timeout=min(left, 1.0))
