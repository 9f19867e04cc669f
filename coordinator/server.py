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
it from the public spec (``algo.party_for(spec.params).job_event(spec)``); a party reporting any other event is
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
import threading
import time
import uuid
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Iterator

import grpc
import numpy as np

from coordinator.config import CoordinatorConfig
from coordinator.gate import gated_server
from coordinator.console import console_routes
from coordinator.metrics import CONTENT_TYPE, Metrics
from coordinator.web import Reply, WebServer, start_web
from coordinator.party_calls import PartyCalls
from coordinator.runner import JobRunner
from coordinator.rpc import Abort, check_version, guard, guard_stream
from coordinator.state import RESUMABLE_STATES, JobRecord, StateStore
from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.offer import offer_refusal
from dpfed.algorithms.params import validate
from dpfed.core.names import NAME_RULE, valid_name
from dpfed.data.schema import Schema
from protos import dpfed_pb2 as pb
from protos import dpfed_pb2_grpc as pbg
from protos.codec import PROTOCOL_VERSION, chunk_groups, encode_arrays
from protos.wire_json import check_json, loads
from dpfed.federation.plugins import load_algorithm
from dpfed.federation.own_cert import check_own_certificate
from dpfed.federation.tls import server_credentials, warn_insecure

__all__ = ["Coordinator", "serve"]

log = logging.getLogger("dpfed.coordinator")


class Coordinator(PartyCalls, JobRunner):
    """Registry of parties, job queue and runner. Thread-safe; one instance per server. The parties'
    calls are in :mod:`coordinator.party_calls`, the job runner in :mod:`coordinator.runner`, the state
    they share in :mod:`coordinator.live`; the operators' calls are here."""

    def __init__(self, config: CoordinatorConfig) -> None:
        self.config = config
        self.store = StateStore(config.state_dir)
        self.metrics = Metrics(self.status)
        self.jobs: dict[str, JobRecord] = self.store.load_jobs()
        self._cond = threading.Condition()
        self._version = 0                               # bumped on every observable change
        self._sessions = {}        # party name -> current session
        self._by_token = {}
        self._last_seen: dict[str, float] = {}
        self._queue: "queue.Queue[str | None]" = queue.Queue()
        self._actives = {}          # running jobs (several at once), by job id
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
        with self._cond:
            shard_of = {n: s.shard for n, s in self._sessions.items()}
        for name in sorted(set(budget) | set(self.store.parties) | connected):
            facts = self.store.parties.get(name, {})
            last = now if name in connected else seen.get(name, facts.get("registered"))
            parties.append({"name": name, "connected": name in connected, "last_seen": last,
                            "shard": shard_of.get(name, -1), "public_records": facts.get("public_records"),
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
        why = offer_refusal(algo, JobSpec(job_id, req.algorithm, params, Schema.from_dict(schema))) if schema else None
        if why:  # the parties' own check of the job's spend, cheap even for a typo (dpfed.algorithms.offer)
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"job refused: {why}")
        with self._cond:
            if job_id in self.jobs:
                old = self.jobs[job_id]
                hint = (f" (to continue it: dpfed job resume {job_id})" if old.resumable
                        else f" ({old.state}; choose another job id)")
                raise Abort(grpc.StatusCode.ALREADY_EXISTS, f"job {job_id!r} exists already{hint}")
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

    def stop(self, join_seconds: float = 10.0) -> None:
        """Interrupt the running jobs (they stay queued on disk and resume on restart), close the sessions, stop the
        ingress shards (Ray actors; half of ``join_seconds`` at most), wait up to ``join_seconds`` in all for the
        runner threads, close the state store (after any write in
        progress: a job record or checkpoint is written whole, each ledger charge is one transaction)."""
        with self._cond:
            self._stopping = True
            for act in self._actives.values():
                self._fail(act, "the coordinator is shutting down")
            for sess in list(self._sessions.values()):
                self._close_session(sess, "the coordinator is shutting down")
        for _ in self._runners:
            self._queue.put(None)
        end = time.monotonic() + join_seconds
        if self.pool is not None:  # the shards first: with the jobs interrupted and the sessions closed they serve
            self.pool.stop(join_seconds / 2)  # nothing, and a runner still busy must not hold them up to the hard stop
        for t in self._runners:
            t.join(timeout=max(end - time.monotonic(), 0.0))
        self._planner.shutdown(wait=False, cancel_futures=True)
        self.store.close()


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
    """A started coordinator: ``port`` it listens on; ``stop()`` shuts it down. ``console`` and ``metrics``:
    its read-only HTTPS servers when ``console_port`` / ``metrics_port`` are set (their ``port``)."""

    coordinator: Coordinator
    server: grpc.Server
    port: int
    console: WebServer | None = None
    metrics: WebServer | None = None

    def stop(self, grace: float = 2.0, join_seconds: float = 10.0) -> None:
        """Refuse new calls at once, give the calls in flight ``grace`` seconds and the job runners
        ``join_seconds``, close the state (``dpfed coordinator serve`` on SIGTERM: 1 s each, at the same time)."""
        for web in (self.console, self.metrics):
            if web is not None:
                web.stop()
        done = self.server.stop(grace)
        self.coordinator.stop(join_seconds=join_seconds)
        done.wait()


#: gRPC handler threads: every connected party's task stream holds one for as long as it is open, so
#: this bounds the parties one coordinator process (or one ingress shard) serves, plus operators' calls.
MAX_HANDLER_THREADS = 2048


def serve(config: CoordinatorConfig, *, max_workers: int = MAX_HANDLER_THREADS) -> RunningServer:
    """Start the coordinator on ``config.listen`` (port 0 picks a free port); return at once."""
    if config.insecure:
        warn_insecure(log)
    else:  # the cause in one line, not gRPC's "Failed to bind to address" (issue 29)
        check_own_certificate(config.tls, "coordinator")
    coord = Coordinator(config)
    server, gate = gated_server(max_workers=max_workers, max_message_bytes=config.max_message_bytes,
                                min_ping_interval=config.min_ping_interval,
                                max_calls_per_peer=config.max_calls_per_peer, idle_timeout=config.idle_timeout,
                                handshake_timeout=config.handshake_timeout, max_connections=config.max_connections,
                                name="dpfed-rpc")
    gate.add_service(pbg.add_PartyServicer_to_server, _PartyService(coord), server)
    gate.add_service(pbg.add_AdminServicer_to_server, _AdminService(coord), server)
    try:
        if config.insecure:
            port = server.add_insecure_port(config.listen)
        else:
            port = server.add_secure_port(config.listen, server_credentials(config.tls))
    except RuntimeError:  # newer gRPC raises "Failed to bind" instead of returning 0
        port = 0
    if port == 0:
        coord.stop()
        raise OSError(f"could not listen on {config.listen}: port in use (or the address is not this machine's)")
    server.start()
    log.info("coordinator listening on %s (port %d)", config.listen, port)
    running = RunningServer(coord, server, port)
    try:
        _start_web(running, config)
    except OSError:
        running.stop()
        raise
    return running


def _start_web(running: RunningServer, config: CoordinatorConfig) -> None:
    """The console and the metrics endpoint, on the host of ``listen``, when their ports are set."""
    host = config.listen.rpartition(":")[0].strip("[]") or "0.0.0.0"
    tls = None if config.insecure else config.tls
    coord = running.coordinator
    if config.console_port >= 0:
        exact, prefixes = console_routes(coord)
        running.console = start_web(host, config.console_port, exact, tls, "console", prefixes)
    if config.metrics_port >= 0:
        metrics = coord.metrics

        def scrape(q: dict[str, str]) -> Reply:
            return Reply(metrics.exposition(), CONTENT_TYPE)

        running.metrics = start_web(host, config.metrics_port, {"/metrics": scrape}, tls, "metrics")
