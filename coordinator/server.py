"""The coordinator daemon: gRPC services for parties and operators, and the job runner.

Parties dial in, register under the name in their certificate, and keep one task stream open.
Up to ``max_concurrent_jobs`` jobs run at once, each on its own runner thread with its own driver
(:meth:`Coordinator._run_job`); a party may take part in several (its stream carries every job's
messages, each tagged with its job id; its ledger composes the jobs atomically). Every chosen party is offered the job spec
and accepts only after charging its own ledger (or refuses with a reason, shown to the operator);
then the one driver loop (:func:`dpfed.algorithms.driver.drive`) runs the algorithm's coordinator
half: each task is broadcast to all parties on their streams, and once all answers have arrived
(no polling: a condition variable wakes the runner on every result) they are merged by the
algorithm's ``combine`` and absorbed.

Checks on every party message: protocol version, a session issued to this certificate's name,
the active job id, the current round and task id, one result per party per task (a replayed,
duplicated or out-of-order result is rejected with a gRPC error and changes nothing).

The global budget records, for every party that accepts, the job's plan as the coordinator computes
it from the public spec (``algo.party().job_event(spec)``); a party reporting any other event is
refused and the job fails (nothing of the job has left any party yet).

Faults, and resuming at no extra privacy cost. A job is its id and its parameters: offered again
with both unchanged, a party treats it as a resume (no new charge; it replays its stored answer to
the latest round and computes only rounds it has not answered). The coordinator checkpoints its
half of the job durably (:meth:`StateStore.save_checkpoint`) before broadcasting every round: the
algorithm's state after the previous round and the task about to be sent. So:

- *The coordinator stops or crashes* (``kill -9`` included): on restart every job that was offering
  or running is queued again; it waits up to ``accept_timeout`` for its parties to reconnect,
  re-offers the same spec and continues from the checkpointed round, re-sending the identical task.
- *A party disconnects* mid-job: the job does not fail. When the party registers again within the
  round's ``answer_timeout`` it is re-offered the job and, once it has accepted (a resume), sent the
  current round's task again unless its answer had already arrived.
- *A party stays silent* (does not answer an offer within ``accept_timeout`` or a task within
  ``answer_timeout``, counted from the broadcast) or refuses a task: the job fails with the reason,
  its checkpoint is kept, and ``dpfed job resume JOB`` (Admin ``ResumeJob``) queues it again; the
  queue moves on to the next job meanwhile. Cancelled and refused jobs may be resumed too.

Charges already made stay recorded: each party's own ledger holds its charge, and the global
budget holds every accepted plan exactly once (charge id ``JOB:plan``). When one party refuses an
offer, the parties that accepted have already charged their plan (each decides alone, before it
knows the others' answers); the job ends as ``refused`` and those charges stay recorded.
"""
from __future__ import annotations

import json
import logging
import queue
import secrets
import threading
import time
import uuid
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import grpc
import numpy as np

from coordinator.config import CoordinatorConfig
from coordinator.gate import gated_server
from coordinator.rpc import (Abort, admit_result, caller, check_session, check_version, first_part, guard, guard_stream,
                             metadata_session, outbox_stream, read_result)
from coordinator.state import RESUMABLE_STATES, CheckpointError, JobRecord, StateStore
from dpfed.algorithms.contract import Aggregate, CoordinatorAlgorithm, JobSpec, Task, jsonable
from dpfed.algorithms.driver import Combine, drive
from dpfed.algorithms.params import validate
from dpfed.core import accounting
from dpfed.core.names import NAME_RULE, valid_name
from dpfed.data.schema import Schema
from protos import dpfed_pb2 as pb
from protos import dpfed_pb2_grpc as pbg
from protos.codec import PROTOCOL_VERSION, ProtocolError, chunk_groups, encode_arrays
from protos.wire_json import check_json, loads
from dpfed.algorithms.secure_noise import is_secure
from dpfed.federation.plugins import load_algorithm
from dpfed.federation.secure_gather import SecureGather
from dpfed.federation.tls import server_credentials, warn_insecure

__all__ = ["Coordinator", "serve"]

log = logging.getLogger("dpfed.coordinator")


@dataclass
class _Session:
    name: str
    token: str
    outbox: Any = field(default_factory=queue.Queue)  # a Queue, or a ShardOutbox (coordinator on Ray)
    shard: int = -1                  # the ingress shard serving this session's stream (-1: this process)
    streaming: bool = False
    closed: bool = False
    offers: dict[str, bool] = field(default_factory=dict)  # job id offered -> answered (each offer answered once)


@dataclass
class _Active:
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


class Coordinator:
    """Registry of parties, job queue and runner. Thread-safe; one instance per server."""

    def __init__(self, config: CoordinatorConfig) -> None:
        self.config = config
        self.store = StateStore(config.state_dir)
        self.jobs: dict[str, JobRecord] = self.store.load_jobs()
        self._cond = threading.Condition()
        self._version = 0                               # bumped on every observable change
        self._sessions: dict[str, _Session] = {}        # party name -> current session
        self._by_token: dict[str, _Session] = {}
        self._last_seen: dict[str, float] = {}
        self._queue: "queue.Queue[str | None]" = queue.Queue()
        self._actives: dict[str, _Active] = {}          # running jobs (several at once), by job id
        self._cancel: set[str] = set()
        self._running: set[str] = set()                 # job ids a runner thread is working on
        self._stopping = False
        for rec in sorted(self.jobs.values(), key=lambda r: r.created):
            if rec.state == "queued":  # queued, or interrupted by a restart: run (resume) them in order
                self._queue.put(rec.job_id)
        self._planner = futures.ThreadPoolExecutor(1, thread_name_prefix="dpfed-plan")
        self.pool = None
        if config.ray_address:  # the parties' data path through ingress shards on a Ray cluster
            from coordinator.shards import ShardPool

            self.pool = ShardPool(config, self._shard_event)
        self._runners = [threading.Thread(target=self._run_loop, name=f"dpfed-job-runner-{i}", daemon=True)
                         for i in range(config.max_concurrent_jobs)]
        for t in self._runners:
            t.start()

    # ------------------------------------------------------------------ helpers
    def _changed(self) -> None:
        """Call with self._cond held."""
        self._version += 1
        self._cond.notify_all()

    def _identify(self, context: grpc.ServicerContext, role: str) -> str | None:
        """The caller's certificate name (None on plain text), refusing the wrong role."""
        return caller(context, role, insecure=self.config.insecure, tls=self.config.tls)

    def _session(self, context: grpc.ServicerContext, version: int, token: str) -> _Session:
        check_version(version)
        cert_name = self._identify(context, "party")
        with self._cond:
            sess = check_session(self._by_token.get(token), cert_name)
            self._last_seen[sess.name] = time.time()
            return sess

    def _fail(self, act: _Active | None, reason: str) -> None:
        """Call with self._cond held: make the running job ``act`` fail with ``reason``."""
        if act is not None and not act.failure:
            act.failure = reason
            self._changed()

    # ------------------------------------------------------------------ party service
    def register(self, req: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.RegisterReply:
        check_version(req.version)
        cert_name = self._identify(context, "party")
        if not valid_name(req.party):
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"party name must be {NAME_RULE}")
        if cert_name is not None and req.party != cert_name:
            raise Abort(grpc.StatusCode.PERMISSION_DENIED,
                         f"certificate is issued to {cert_name!r} but the party claims to be {req.party!r}")
        try:
            check_json(req.schema_json, "schema")
            schema = Schema.from_json(req.schema_json)
        except (ValueError, TypeError) as exc:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed schema: {exc}") from None
        if not (req.epsilon_limit >= 0 and 0 < req.delta_limit < 1):
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "epsilon_limit >= 0 and 0 < delta_limit < 1 required")
        token = secrets.token_hex(16)
        shard, outbox = -1, None
        if self.pool is not None:  # the shard learns the session before the party can dial it
            shard = self.pool.assign(req.party)
            outbox = self.pool.open(shard, token, req.party)
        with self._cond:
            old = self._sessions.get(req.party)
            if old is not None:
                self._close_session(old, "the party registered again")
            sess = _Session(req.party, token, shard=shard)
            if outbox is not None:
                sess.outbox = outbox
            self._sessions[req.party] = sess
            self._by_token[token] = sess
            self._last_seen[req.party] = time.time()
            self._changed()
        self.store.note_party(req.party, schema=schema.to_dict(), epsilon_limit=req.epsilon_limit,
                              delta_limit=req.delta_limit, epsilon_spent=req.epsilon_spent,
                              algorithms=list(req.algorithms), registered=time.time())
        log.info("party %s registered", req.party)
        return pb.RegisterReply(version=PROTOCOL_VERSION, session=token,
                                shard=self.pool.addresses[shard] if self.pool is not None else "")

    def _close_session(self, sess: _Session, why: str) -> None:
        """Call with self._cond held."""
        if sess.closed:
            return
        sess.closed = True
        sess.outbox.put(None)
        self._by_token.pop(sess.token, None)
        if self._sessions.get(sess.name) is sess:
            del self._sessions[sess.name]
            for act in self._actives.values():
                if sess.name in act.parties:
                    # Not a failure: the party may come back within the round's timeout and resume.
                    act.ready.discard(sess.name)
                    if self.pool is not None and sess.shard >= 0:
                        self.pool.submit(sess.shard, ("ready", act.spec.job_id, sess.name, False))
                    log.warning("party %s left job %s in round %d (%s); waiting for it to come back",
                                sess.name, act.spec.job_id, act.round, why)
        self._changed()

    def task_stream(self, req: pb.StreamRequest, context: grpc.ServicerContext) -> Iterator[pb.CoordinatorMessage]:
        sess = self._session(context, req.version, req.session)
        if sess.shard >= 0:
            raise Abort(grpc.StatusCode.FAILED_PRECONDITION,
                         f"open the task stream at your ingress shard {self.pool.addresses[sess.shard]}")
        with self._cond:
            if sess.streaming:
                raise Abort(grpc.StatusCode.ALREADY_EXISTS, "this session already has a task stream")
            sess.streaming = True
            for act in self._actives.values():
                if sess.name in act.parties and sess.name not in act.ready and act.offer is not None:
                    self._offer_to(sess, act)  # the party came back during a job: offer it again (a resume)
            self._changed()

        def gone() -> None:
            with self._cond:
                self._close_session(sess, "its task stream ended")

        context.add_callback(gone)
        log.info("party %s connected", sess.name)
        yield from outbox_stream(sess.outbox, context, self.config.heartbeat_seconds)

    def _shard_event(self, kind: str, token: str, name: str) -> None:
        """A party's task stream opened or closed at its ingress shard (coordinator on Ray)."""
        with self._cond:
            sess = self._by_token.get(token)
            if sess is None or sess.closed or sess.name != name:
                return
            if kind == "open":
                sess.streaming = True
                self._last_seen[name] = time.time()
                for act in self._actives.values():
                    if name in act.parties and name not in act.ready and act.offer is not None:
                        self._offer_to(sess, act)  # back during a job: offer it again (a resume)
                log.info("party %s connected (ingress shard %d)", name, sess.shard)
                self._changed()
            elif kind == "closed":
                self._close_session(sess, "its task stream ended")

    def _offer_to(self, sess: _Session, act: _Active) -> None:
        """Call with self._cond held: put the job offer on one session's stream."""
        sess.offers[act.spec.job_id] = False
        sess.outbox.put(act.offer)

    def _resend(self, act: _Active, name: str) -> None:
        """Call with self._cond held: give ``name``'s current session the current round's task if it
        has accepted the job and its answer is neither in nor arriving."""
        sess = self._sessions.get(name)
        if sess is None or self._actives.get(act.spec.job_id) is not act or name not in act.ready \
                or act.round < 0 or act.complete:
            return
        if sess.shard >= 0:  # the shard knows whether the answer is in or arriving
            self.pool.submit(sess.shard, ("resend", act.spec.job_id, act.round, act.task_id, sess.token,
                                          act.msgs.get(name, []), act.expects.get(sess.shard)))
        elif name not in act.answers and name not in act.receiving:
            for m in act.msgs.get(name, []):
                sess.outbox.put(m)

    def respond_job(self, req: pb.JobResponse, context: grpc.ServicerContext) -> pb.JobResponseAck:
        sess = self._session(context, req.version, req.session)
        name = sess.name
        with self._cond:
            act = self._actives.get(req.job_id)
            if act is None:
                raise Abort(grpc.StatusCode.NOT_FOUND, f"unknown job id {req.job_id!r} (no such job is on offer)")
            if name not in act.parties:
                raise Abort(grpc.StatusCode.PERMISSION_DENIED, f"{name!r} takes no part in job {req.job_id}")
            if req.round != -1 or req.task_id:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "a job response carries round -1 and no task id")
            if sess.offers.get(req.job_id, True):
                raise Abort(grpc.StatusCode.ALREADY_EXISTS, f"{name!r} already answered the offer of {req.job_id}")
        if req.accept:
            # The global budget records the plan as the coordinator computes it from the public spec; a
            # party reporting another event is refused and the job fails (finding 12). A malformed event
            # is rejected and the party may answer again.
            try:
                check_json(req.event_json, "privacy event")
                reported = accounting.flatten([accounting.event_from_json(req.event_json)])
            except (ValueError, TypeError, KeyError) as exc:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed privacy event: {exc}") from None
            try:  # computed while the parties decided (it may take seconds, e.g. k-means)
                expected = act.plan.result()
            except Exception as exc:  # noqa: BLE001 - the parameters are bad: the job fails with the reason
                with self._cond:
                    self._fail(act, f"bad job: {type(exc).__name__}: {exc}")
                raise Abort(grpc.StatusCode.FAILED_PRECONDITION, "the job's parameters are invalid") from None
            if reported != accounting.flatten([expected]):
                why = "its reported privacy event differs from the job's plan (recomputed by the coordinator)"
                with self._cond:
                    if not sess.offers.get(req.job_id, True):
                        sess.offers[req.job_id] = True
                        act.mismatch[name] = f"party {name!r} accepted job {req.job_id} but {why}; not recorded"
                        if name in act.responses:  # mid-job: fail now
                            self._fail(act, act.mismatch[name])
                        else:  # the offer phase ends (the others' charges are recorded), then the job fails
                            act.responses[name] = req
                        self._changed()
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, why)
        with self._cond:
            if sess.offers.get(req.job_id, True):
                raise Abort(grpc.StatusCode.ALREADY_EXISTS, f"{name!r} already answered the offer of {req.job_id}")
            sess.offers[req.job_id] = True
            rejoin = name in act.responses
        if req.accept:
            self.store.record_release(name, req.job_id, accounting.event_to_json(act.plan.result()))
        with self._cond:
            if not rejoin:
                act.responses[name] = req
            if req.accept:
                act.ready.add(name)
                if sess.shard >= 0:
                    self.pool.submit(sess.shard, ("ready", req.job_id, name, True))
                self._resend(act, name)  # back after a disconnect: the current round's task again
            elif rejoin:
                self._fail(act, f"party {name!r} refused to resume job {req.job_id}: "
                                  f"{req.reason or 'no reason given'}")
            self._changed()
        return pb.JobResponseAck(version=PROTOCOL_VERSION)

    def submit_result(self, parts: Iterator[pb.ResultPart], context: grpc.ServicerContext) -> pb.ResultAck:
        sess = self._session(context, PROTOCOL_VERSION, metadata_session(context))  # before any part is read
        first = first_part(parts, sess.token)
        name = sess.name
        if sess.shard >= 0:
            raise Abort(grpc.StatusCode.FAILED_PRECONDITION,
                         f"send results to your ingress shard {self.pool.addresses[sess.shard]}")
        with self._cond:
            act = self._actives.get(first.job_id)
            if act is None:
                raise Abort(grpc.StatusCode.NOT_FOUND, f"unknown job id {first.job_id!r}")
            admit_result(first, name, parties=act.parties, ready=act.ready, round_=act.round, closed=act.complete,
                         task_id=act.task_id, arrived=name in act.answers or name in act.receiving)
            act.receiving.add(name)
        try:
            arrays, error = read_result(first, parts)
        except ProtocolError as exc:
            with self._cond:
                act.receiving.discard(name)
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed result: {exc}") from None
        except BaseException:
            with self._cond:
                act.receiving.discard(name)
                if self._sessions.get(name) is not sess:  # the upload died with its connection; the party
                    self._resend(act, name)               # came back meanwhile: ask its new session
            raise
        with self._cond:
            act.receiving.discard(name)
            if self._actives.get(act.spec.job_id) is not act or act.round != first.round or act.task_id != first.task_id or act.complete:
                raise Abort(grpc.StatusCode.FAILED_PRECONDITION, "the task was closed while the result arrived")
            if error and act.tolerant:
                act.errors.add(name)
                log.info("job %s round %d: %s dropped out (%s)", act.spec.job_id, act.round, name, error)
            elif error:
                self._fail(act, f"party {name!r} refused task {act.round} of job {act.spec.job_id}: {error}")
            else:
                act.answers[name] = arrays
            self._last_seen[name] = time.time()
            self._changed()
        return pb.ResultAck(version=PROTOCOL_VERSION)

    # ------------------------------------------------------------------ admin service
    def _check_admin(self, context: grpc.ServicerContext, version: int) -> None:
        check_version(version)
        self._identify(context, "operator")

    def status(self) -> dict[str, Any]:
        now = time.time()
        with self._cond:
            connected = {n for n, s in self._sessions.items() if s.streaming and not s.closed}
            seen = dict(self._last_seen)
            jobs = [j.to_dict() for j in sorted(self.jobs.values(), key=lambda j: j.created)]
        budget = self.store.budget()
        parties = []
        for name in sorted(set(budget) | set(self.store.parties) | connected):
            facts = self.store.parties.get(name, {})
            last = now if name in connected else seen.get(name, facts.get("registered"))
            parties.append({"name": name, "connected": name in connected, "last_seen": last,
                            **budget.get(name, {"epsilon_spent": 0.0})})
        out = {"parties": parties, "jobs": jobs, "now": now, "max_concurrent_jobs": self.config.max_concurrent_jobs}
        if self.pool is not None:
            with self._cond:
                per = [sorted(s.name for s in self._sessions.values() if s.shard == i and s.streaming)
                       for i in range(len(self.pool.addresses))]
            out["shards"] = [{"index": i, "address": a, "node": n, "parties": per[i]}
                             for i, (a, n) in enumerate(zip(self.pool.addresses, self.pool.nodes, strict=True))]
        return out

    def submit_job(self, req: pb.SubmitJobRequest) -> str:
        try:
            params = loads(req.params_json or "{}", "params")
            if not isinstance(params, dict):
                raise ValueError("params must be a JSON object")
        except ValueError as exc:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed params: {exc}") from None
        try:
            algo = load_algorithm(req.algorithm, self.config.plugins)
        except (ValueError, ImportError, KeyError) as exc:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        params.setdefault("delta", algo.default_delta)
        job_id = req.job_id or f"job-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        if not valid_name(job_id):
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"job id {job_id[:80]!r} refused: a job id is {NAME_RULE}")
        schema = None
        if req.schema_json:
            try:
                check_json(req.schema_json, "schema")
                schema = Schema.from_json(req.schema_json).to_dict()
            except (ValueError, TypeError) as exc:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed schema: {exc}") from None
        try:  # validate epsilon/delta now, with a placeholder schema if none was given
            JobSpec(job_id, req.algorithm, params, Schema.from_dict(schema) if schema else Schema(()))
        except ValueError as exc:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        try:  # the algorithm's declared ranges and caps (dpfed.algorithms.params), as the parties check them
            validate(algo, params, Schema.from_dict(schema) if schema else None)
        except ValueError as exc:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        with self._cond:
            if job_id in self.jobs:
                raise Abort(grpc.StatusCode.ALREADY_EXISTS, f"job {job_id!r} exists already (to continue it after "
                             f"a failure: dpfed job resume {job_id})")
            rec = JobRecord(job_id, req.algorithm, params, schema, list(req.parties))
            self.jobs[job_id] = rec
            self.store.save_job(rec)
            self._changed()
        self._queue.put(job_id)
        log.info("job %s queued (%s)", job_id, req.algorithm)
        return job_id

    def cancel_job(self, job_id: str) -> JobRecord:
        with self._cond:
            rec = self.jobs.get(job_id)
            if rec is None:
                raise Abort(grpc.StatusCode.NOT_FOUND, f"unknown job id {job_id!r}")
            if rec.state == "queued":
                rec.state, rec.reason, rec.finished = "cancelled", "cancelled by the operator before it started", time.time()
                rec.resumable = True
                self.store.save_job(rec)
                self._changed()
            elif not rec.terminal:
                self._cancel.add(job_id)
                self._fail(self._actives.get(job_id), "cancelled by the operator")
                self._changed()
            return rec

    def resume_job(self, job_id: str) -> JobRecord:
        """Queue a failed, cancelled or refused job again under the same id and parameters: its parties
        treat it as a resume (no new charge) and it continues from its last checkpointed round."""
        with self._cond:
            rec = self.jobs.get(job_id)
            if rec is None:
                raise Abort(grpc.StatusCode.NOT_FOUND, f"unknown job id {job_id!r}")
            if rec.state not in RESUMABLE_STATES:
                raise Abort(grpc.StatusCode.FAILED_PRECONDITION,
                             f"job {job_id} is {rec.state}; only failed, cancelled or refused jobs can be resumed")
            rec.state, rec.reason, rec.finished, rec.resumable = "queued", "", None, False
            rec.resumes += 1
            self.store.save_job(rec)
            self._changed()
        self._queue.put(job_id)
        log.info("job %s queued to resume", job_id)
        return rec

    def watch(self, job_id: str, context: grpc.ServicerContext | None = None,
              timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Yield the job record whenever it changes, until it reaches a terminal state; while nothing
        changes, yield it again every ``heartbeat_seconds`` (data on the stream keeps it alive). Changes
        elsewhere (other jobs, parties' answers) wake the watch but send nothing."""
        seen, sent, beat = -1, None, 0.0
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._cond:
                while True:  # until this job's record changes or the heartbeat is due
                    rec = self.jobs.get(job_id)
                    if rec is None:
                        raise Abort(grpc.StatusCode.NOT_FOUND, f"unknown job id {job_id!r}")
                    if context is not None and not context.is_active():
                        return
                    if deadline is not None and time.monotonic() > deadline:
                        return
                    if self._version != seen:  # something changed: this job, or another, or a party
                        seen, key = self._version, rec.progress_key()
                        if key != sent:
                            break
                    if time.monotonic() >= beat:
                        key = rec.progress_key()
                        break
                    self._cond.wait(timeout=max(min(1.0, beat - time.monotonic()), 0.0))
                sent, beat = key, time.monotonic() + self.config.heartbeat_seconds
                snap = rec.to_dict()
            yield snap
            if snap["state"] in ("done", "failed", "refused", "cancelled"):
                return

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

    # ------------------------------------------------------------------ job runner
    def _run_loop(self) -> None:
        while True:
            job_id = self._queue.get()
            if job_id is None:
                return
            rec = self.jobs[job_id]
            with self._cond:
                if rec.terminal or job_id in self._running:  # cancelled while queued, or queued twice
                    continue
                self._running.add(job_id)
            try:
                self._run_job(rec)
            except Exception as exc:  # the coordinator keeps serving whatever a job does
                log.exception("job %s failed", job_id)
                self._finish(rec, "failed", f"{type(exc).__name__}: {exc}")
            finally:
                with self._cond:
                    self._running.discard(job_id)

    def _finish(self, rec: JobRecord, state: str, reason: str = "") -> None:
        with self._cond:
            act = self._actives.pop(rec.job_id, None)
            if self._stopping and state in ("failed", "cancelled") and rec.job_id not in self._cancel:
                # interrupted by the shutdown: keeps its state on disk and resumes on restart
                rec.reason = f"interrupted: {reason}"
                self.store.save_job(rec)
                self._changed()
                return
            rec.state, rec.reason, rec.finished = state, reason, time.time()
            rec.resumable = state in RESUMABLE_STATES
            if rec.resumable and reason:
                rec.reason = f"{reason} (continue it with: dpfed job resume {rec.job_id})"
            self._cancel.discard(rec.job_id)
            self.store.save_job(rec)
            if self.pool is not None:
                for i in range(len(self.pool.addresses)):
                    self.pool.submit(i, ("end", rec.job_id))
            parties = act.parties if act is not None else []
            for name in parties:
                sess = self._sessions.get(name)
                if sess is not None:
                    sess.outbox.put(pb.CoordinatorMessage(version=PROTOCOL_VERSION, job_id=rec.job_id, round=-1,
                                                          job_end=f"{state}: {reason}" if reason else state))
            self._changed()
        if state == "done":
            self.store.drop_checkpoint(rec.job_id)
        log.info("job %s %s %s", rec.job_id, state, reason)

    def _wait(self, act: _Active, done, timeout: float, what: str, waiting) -> None:
        """Wait (on the condition) until ``done()`` or the job fails; raise on failure or timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not act.failure and not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    self._fail(act, f"timed out after {timeout:g} s waiting for {what} from "
                                      f"{', '.join(waiting())}")
                    break
                self._cond.wait(timeout=left)
            if act.failure:
                raise _JobFailed(act.failure)

    def _run_job(self, rec: JobRecord) -> None:
        cfg = self.config
        if rec.parties:  # named parties (every resumed job): give them time to (re)connect
            self.wait_for_parties(list(rec.parties), cfg.offer_timeout, lambda: rec.terminal)
        with self._cond:
            if rec.terminal:  # cancelled while it waited for its parties
                return
            if rec.job_id in self._cancel:
                self._finish(rec, "cancelled", "cancelled by the operator before it started")
                return
            connected = sorted(n for n, s in self._sessions.items() if s.streaming and not s.closed)
            parties = list(rec.parties) or connected
            missing = [p for p in parties if p not in connected]
        if not parties:
            self._finish(rec, "failed", "no party is connected")
            return
        if missing:
            self._finish(rec, "failed", f"party {', '.join(missing)} not connected (waited {cfg.offer_timeout:g} s)")
            return
        schemas = {json.dumps(self.store.parties.get(p, {}).get("schema"), sort_keys=True) for p in parties}
        if rec.schema is None:
            if len(schemas) != 1:
                self._finish(rec, "failed", "the parties declare different schemas; give the job a schema")
                return
            rec.schema = json.loads(schemas.pop())
        try:
            params = dict(rec.params)
            if is_secure(params):  # the roster is part of the public spec each party checks
                params.setdefault("roster", list(parties))
            spec = JobSpec(rec.job_id, rec.algorithm, params, Schema.from_dict(rec.schema))
            algo = load_algorithm(rec.algorithm, cfg.plugins)
        except Exception as exc:  # noqa: BLE001 - any bad parameter ends this job only
            self._finish(rec, "failed", f"bad job: {type(exc).__name__}: {exc}")
            return
        try:
            checkpoint = self.store.load_checkpoint(rec.job_id)
        except CheckpointError as exc:
            self._finish(rec, "failed", str(exc))
            return
        offer = pb.CoordinatorMessage(version=PROTOCOL_VERSION, job_id=spec.job_id, round=-1,
                                      offer=pb.JobOffer(spec_json=spec.to_json()))
        # the plan every party must charge, from the public parameters; computed while the parties decide
        act = _Active(spec, parties, self._planner.submit(lambda: algo.party().job_event(spec)), offer)
        with self._cond:
            self._actives[spec.job_id] = act
            rec.parties, rec.state, rec.refusals = parties, "offering", {}
            rec.started = rec.started or time.time()
            self.store.save_job(rec)
            for p in parties:
                self._offer_to(self._sessions[p], act)
            self._changed()
        try:
            self._wait(act, lambda: len(act.responses) == len(parties), cfg.offer_timeout, "an answer to the offer",
                       lambda: [p for p in parties if p not in act.responses])
        except _JobFailed as exc:
            self._record_offer(rec, act)
            self._finish(rec, "cancelled" if rec.job_id in self._cancel else "failed", str(exc))
            return
        self._record_offer(rec, act)
        if act.plan.exception() is not None:
            exc = act.plan.exception()
            self._finish(rec, "failed", f"bad job: {type(exc).__name__}: {exc}")
            return
        if act.mismatch:
            self._finish(rec, "failed", "; ".join(v for _, v in sorted(act.mismatch.items())))
            return
        if rec.refusals:
            self._finish(rec, "refused", "; ".join(f"{p} refused: {r}" for p, r in sorted(rec.refusals.items())))
            return
        first: Task | None = None
        if checkpoint is None:
            coord, rec.rounds = algo.coordinator(spec, parties), 0
        elif checkpoint.get("spec_json") != spec.to_json() or checkpoint.get("parties") != parties:
            self._finish(rec, "failed", "the job's checkpoint belongs to another spec or set of parties")
            return
        else:
            coord, first, rec.rounds = checkpoint["coordinator"], checkpoint["task"], int(checkpoint["rounds"])
            rec.resumed_at.append(int(first.round))
            log.info("job %s resumes at round %d", rec.job_id, first.round)
        with self._cond:
            rec.state, rec.progress = "running", float(coord.progress)
            self.store.save_job(rec)
            self._changed()
        last_save = time.monotonic()

        def send(tasks: Mapping[str, Task]) -> dict[str, dict[str, np.ndarray]]:
            """One SecAgg step: a task per party; whoever refuses or is late has dropped out."""
            if self.pool is not None:
                return {agg.parties[0]: dict(agg.arrays) for agg in send_merged(tasks, None)}
            self._broadcast(act, next(iter(tasks.values())), tasks)
            deadline = time.monotonic() + cfg.task_timeout
            with self._cond:
                while not act.failure and not set(tasks) <= set(act.answers) | act.errors:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(timeout=left)
                if act.failure:
                    raise _JobFailed(act.failure)
                answers, act.answers, act.errors, act.complete = act.answers, {}, set(), True
            return answers

        def send_merged(tasks: Mapping[str, Task], merge: Combine | None) -> list[Aggregate]:
            """Coordinator on Ray: a SecAgg step whose answers each shard merges with ``merge`` (the
            masked inputs: one partial sum per shard), or hands on per party (``merge`` None)."""
            self._broadcast(act, next(iter(tasks.values())), tasks, merge=merge)
            return self._collect(act, tasks, tolerant=True)

        secure = SecureGather(spec, algo.party(), send, send_merged=send_merged if self.pool is not None else None) \
            if is_secure(spec.params) else None
        act.tolerant = secure is not None

        def gather(task: Task) -> list[Aggregate]:
            # Durable before the round leaves: the state after the previous round and this very task.
            self.store.save_checkpoint(rec.job_id, {"spec_json": spec.to_json(), "parties": parties,
                                                    "rounds": rec.rounds, "coordinator": coord, "task": task})
            if secure is not None:
                return secure(task)
            self._broadcast(act, task)
            if self.pool is not None:  # one partial aggregate per shard (merged there)
                return self._collect(act, parties, tolerant=False)
            self._wait(act, lambda: len(act.answers) == len(parties), cfg.task_timeout,
                       f"results of round {task.round}", lambda: [p for p in parties if p not in act.answers])
            with self._cond:
                answers, act.answers, act.complete = act.answers, {}, True
            return [Aggregate(a, (name,)) for name, a in sorted(answers.items())]

        def on_round(task: Task, c: CoordinatorAlgorithm) -> None:
            nonlocal last_save
            with self._cond:
                rec.rounds += 1
                rec.progress = float(c.progress)
                if time.monotonic() - last_save > 2.0:
                    self.store.save_job(rec)
                    last_save = time.monotonic()
                self._changed()

        try:
            drive(coord, gather, algo.combine, on_round=on_round, first=first)
        except _JobFailed as exc:
            self._finish(rec, "cancelled" if rec.job_id in self._cancel else "failed", str(exc))
            return
        model = coord.model()
        self.store.save_model(rec.job_id, model)
        rec.summary = jsonable({**coord.summary(), **(secure.summary() if secure is not None else {})})
        rec.progress = 1.0
        self._finish(rec, "done")

    def _collect(self, act: _Active, parties, tolerant: bool) -> list[Aggregate]:
        """Coordinator on Ray: the current round's parts from every shard holding one of ``parties``.
        Non-tolerant (a plain round): a refusal fails the job, so does a party silent for
        ``answer_timeout``. Tolerant (a SecAgg step): refusals and late parties are dropouts."""
        cfg, job = self.config, act.spec.job_id
        with self._cond:
            calls = {i: (job, act.round, act.task_id) for i in sorted({self.pool.assign(p) for p in parties})}
        deadline = time.monotonic() + cfg.task_timeout
        parts: list[Aggregate] = []
        while calls:
            with self._cond:
                if act.failure:
                    raise _JobFailed(act.failure)
            left = deadline - time.monotonic()
            final = left <= 0
            results = self.pool.collect(calls, wait=min(1.0, max(left, 0.0)), final=final and tolerant)
            missing: list[str] = []
            for i, r in results.items():
                if r["errors"] and not tolerant:
                    who, err = sorted(r["errors"].items())[0]
                    with self._cond:
                        self._fail(act, f"party {who!r} refused task {act.round} of job {job}: {err}")
                        raise _JobFailed(act.failure)
                if r["stale"]:  # the shard moved on: this round cannot complete any more
                    with self._cond:
                        self._fail(act, f"ingress shard {i} no longer holds round {act.round} of job {job}")
                        raise _JobFailed(act.failure)
                if r["complete"] or (final and tolerant):
                    parts.extend(r["parts"])
                    for who, err in r["errors"].items():
                        log.info("job %s round %d: %s dropped out (%s)", job, act.round, who, err)
                    del calls[i]
                else:
                    missing.extend(r["missing"])
            if calls and final:
                with self._cond:
                    self._fail(act, f"timed out after {cfg.task_timeout:g} s waiting for results of round "
                                    f"{act.round} from {', '.join(sorted(missing)) or 'a shard'}")
                    raise _JobFailed(act.failure)
        with self._cond:
            act.complete = True
            self._changed()
        return parts

    def _record_offer(self, rec: JobRecord, act: _Active) -> None:
        with self._cond:
            for p, r in act.responses.items():
                if p in act.mismatch:
                    continue
                if r.accept:
                    rec.party_epsilon[p] = float(r.epsilon_job)
                else:
                    rec.refusals[p] = r.reason or "no reason given"
            self.store.save_job(rec)

    def _broadcast(self, act: _Active, task: Task, per_party: Mapping[str, Task] | None = None,
                   merge: Combine | None = None) -> None:
        """Put the task on the stream of every party that has accepted: a header part, then chunk groups
        (``per_party``: each listed party gets its own task of the same round and task id, e.g. a SecAgg
        step; ``merge``: the shards merge those answers with it). A party that is away gets it when it
        comes back and accepts again (:meth:`respond_job`)."""
        cfg = self.config
        task_id = uuid.uuid4().hex
        ids = dict(version=PROTOCOL_VERSION, job_id=act.spec.job_id, round=int(task.round), task_id=task_id)

        def messages(t: Task) -> list[pb.CoordinatorMessage]:
            groups = list(chunk_groups(encode_arrays(t.arrays, cfg.chunk_bytes), cfg.chunk_bytes))
            msgs = []
            for i, g in enumerate(groups):
                m = pb.CoordinatorMessage(**ids, chunks=g, last=i == len(groups) - 1)
                if i == 0:
                    m.task.CopyFrom(pb.TaskHeader(kind=t.kind, params_json=json.dumps(jsonable(dict(t.params)))))
                msgs.append(m)
            return msgs

        out = {p: messages(t) for p, t in per_party.items()} if per_party is not None else \
            dict.fromkeys(act.parties, messages(task))
        log.debug("job %s round %d: %s sent to %d parties", act.spec.job_id, task.round, task.kind, len(out))
        with self._cond:
            if act.failure:
                raise _JobFailed(act.failure)
            act.round, act.task_id, act.answers, act.errors = int(task.round), task_id, {}, set()
            act.msgs, act.complete = out, False
            if self.pool is not None:
                self._broadcast_to_shards(act, task, out, per_party is not None, merge)
                return
            for p, msgs in out.items():
                sess = self._sessions.get(p)
                if sess is None or p not in act.ready:
                    log.warning("party %s is away; round %d of job %s waits for it", p, task.round, act.spec.job_id)
                    continue
                for m in msgs:
                    sess.outbox.put(m)

    def _broadcast_to_shards(self, act: _Active, task: Task, out: Mapping[str, list], per_party: bool,
                             merge: Combine | None = None) -> None:
        """Call with self._cond held: tell each shard which of its parties answer this round and how it
        merges their answers (the algorithm's combine; ``merge``; per party for a SecAgg step without
        one), then put the task on the streams of those that accepted (one operation per shard and
        message list)."""
        job = act.spec.job_id
        by_shard: dict[int, list[str]] = {}
        for p in out:
            by_shard.setdefault(self.pool.assign(p), []).append(p)
        header = Task(task.job_id, task.round, task.kind, task.params, {} if per_party else task.arrays)
        act.expects = {}
        for i, names in sorted(by_shard.items()):
            act.expects[i] = (job, act.round, act.task_id, header, act.spec.algorithm, names,
                              per_party and merge is None, act.tolerant, merge)
            self.pool.submit(i, ("expect", *act.expects[i]))
            groups: dict[int, tuple[list[str], list]] = {}
            for p in names:
                sess = self._sessions.get(p)
                if sess is None or p not in act.ready:
                    log.warning("party %s is away; round %d of job %s waits for it", p, task.round, job)
                    continue
                groups.setdefault(id(out[p]), ([], out[p]))[0].append(sess.token)
            for tokens, msgs in groups.values():
                self.pool.submit(i, ("send", tokens, msgs))

    def model_of(self, job_id: str) -> tuple[JobRecord, dict[str, np.ndarray]]:
        with self._cond:
            rec = self.jobs.get(job_id)
        if rec is None:
            raise Abort(grpc.StatusCode.NOT_FOUND, f"unknown job id {job_id!r}")
        model = self.store.load_model(job_id)
        if model is None:
            raise Abort(grpc.StatusCode.FAILED_PRECONDITION,
                         f"job {job_id} has no model (state {rec.state}{': ' + rec.reason if rec.reason else ''})")
        return rec, model

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            for act in self._actives.values():
                self._fail(act, "the coordinator is shutting down")
            for sess in list(self._sessions.values()):
                self._close_session(sess, "the coordinator is shutting down")
        for _ in self._runners:
            self._queue.put(None)
        for t in self._runners:
            t.join(timeout=10)
        self._planner.shutdown(wait=False, cancel_futures=True)
        if self.pool is not None:
            self.pool.stop()
        self.store.close()


class _JobFailed(Exception):
    pass


# ---------------------------------------------------------------------- gRPC glue
class _PartyService(pbg.PartyServicer):
    def __init__(self, coord: Coordinator) -> None:
        self.c = coord

    @guard
    def Register(self, request, context):
        return self.c.register(request, context)

    @guard_stream
    def TaskStream(self, request, context):
        yield from self.c.task_stream(request, context)

    @guard
    def RespondJob(self, request, context):
        return self.c.respond_job(request, context)

    @guard
    def SubmitResult(self, request_iterator, context):
        return self.c.submit_result(request_iterator, context)


class _AdminService(pbg.AdminServicer):
    def __init__(self, coord: Coordinator) -> None:
        self.c = coord

    @guard
    def Status(self, request, context):
        self.c._check_admin(context, request.version)
        return pb.StatusReply(version=PROTOCOL_VERSION, status_json=json.dumps(self.c.status(), allow_nan=True))

    @guard
    def SubmitJob(self, request, context):
        self.c._check_admin(context, request.version)
        return pb.SubmitJobReply(version=PROTOCOL_VERSION, job_id=self.c.submit_job(request))

    @guard_stream
    def WatchJob(self, request, context):
        self.c._check_admin(context, request.version)
        for snap in self.c.watch(request.job_id, context):
            yield pb.JobState(version=PROTOCOL_VERSION, job_json=json.dumps(snap, allow_nan=True))

    @guard
    def CancelJob(self, request, context):
        self.c._check_admin(context, request.version)
        rec = self.c.cancel_job(request.job_id)
        return pb.JobState(version=PROTOCOL_VERSION, job_json=json.dumps(rec.to_dict(), allow_nan=True))

    @guard
    def ResumeJob(self, request, context):
        self.c._check_admin(context, request.version)
        rec = self.c.resume_job(request.job_id)
        return pb.JobState(version=PROTOCOL_VERSION, job_json=json.dumps(rec.to_dict(), allow_nan=True))

    @guard_stream
    def GetModel(self, request, context):
        self.c._check_admin(context, request.version)
        rec, model = self.c.model_of(request.job_id)
        cb = self.c.config.chunk_bytes
        first = True
        for group in chunk_groups(encode_arrays(model, cb), cb):
            yield pb.ModelPart(version=PROTOCOL_VERSION, job_id=rec.job_id,
                               job_json=json.dumps(rec.to_dict(), allow_nan=True) if first else "", chunks=group)
            first = False


@dataclass
class RunningServer:
    """A started coordinator: ``port`` it listens on; ``stop()`` shuts it down."""

    coordinator: Coordinator
    server: grpc.Server
    port: int

    def stop(self, grace: float = 2.0) -> None:
        self.coordinator.stop()
        self.server.stop(grace).wait()


#: gRPC handler threads: every connected party's task stream holds one for as long as it is open, so
#: this bounds the parties one coordinator process (or one ingress shard) serves, plus operators' calls.
MAX_HANDLER_THREADS = 2048


def serve(config: CoordinatorConfig, *, max_workers: int = MAX_HANDLER_THREADS) -> RunningServer:
    """Start the coordinator on ``config.listen`` (port 0 picks a free port); return at once."""
    if config.insecure:
        warn_insecure(log)
    coord = Coordinator(config)
    server, gate = gated_server(max_workers=max_workers, max_message_bytes=config.max_message_bytes,
                                min_ping_interval=config.min_ping_interval,
                                max_calls_per_peer=config.max_calls_per_peer, idle_timeout=config.idle_timeout,
                                handshake_timeout=config.handshake_timeout, max_connections=config.max_connections,
                                name="dpfed-rpc")
    gate.add_service(pbg.add_PartyServicer_to_server, _PartyService(coord), server)
    gate.add_service(pbg.add_AdminServicer_to_server, _AdminService(coord), server)
    if config.insecure:
        port = server.add_insecure_port(config.listen)
    else:
        port = server.add_secure_port(config.listen, server_credentials(config.tls))
    if port == 0:
        coord.stop()
        raise OSError(f"could not listen on {config.listen}")
    server.start()
    log.info("coordinator listening on %s (port %d)", config.listen, port)
    return RunningServer(coord, server, port)
