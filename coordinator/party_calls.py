"""The coordinator's calls from parties: register, the task stream, answers to offers, result uploads.

Checks on every party message: protocol version, a session issued to this certificate's name (for an
upload: named in the call metadata and checked before the upload is read), the active job id, the
current round and task id, one result per party per task (a replayed, duplicated or out-of-order
result is rejected with a gRPC error and changes nothing). A party that reports another privacy event
than the job's plan (recomputed here from the public spec) is refused and the job fails.
"""
from __future__ import annotations

import logging
import math
import secrets
import time
from typing import Iterator

import grpc

from coordinator.live import Active, CoordinatorBase, Session
from coordinator.rpc import (Abort, admit_result, check_version, first_part, metadata_session, outbox_stream, party_text,
                             read_result)
from dpfed.core import accounting
from dpfed.core.names import NAME_RULE, valid_name
from dpfed.data.schema import Schema
from protos import dpfed_pb2 as pb
from protos.codec import PROTOCOL_VERSION, ProtocolError
from protos.wire_json import check_json
from dpfed.federation.tls import peer_certificate_facts

__all__ = ["PartyCalls"]

log = logging.getLogger("dpfed.coordinator")

#: Algorithm names a party may list when it registers (dpfed has a dozen; plugins add a few).
MAX_ALGORITHMS = 256


class PartyCalls(CoordinatorBase):
    """The Party service's handlers (mixed into :class:`coordinator.server.Coordinator`)."""

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
        if not 0 <= req.public_records <= 10**9:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "public_records must lie in [0, 1e9] (0: none declared)")
        if not (math.isfinite(req.epsilon_spent) and req.epsilon_spent >= 0):
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "epsilon_spent must be finite and >= 0")
        if len(req.algorithms) > MAX_ALGORITHMS or not all(0 < len(a) <= 200 and a.isprintable()
                                                           for a in req.algorithms):
            # kept in parties.json, rewritten whole on every registration: bounded
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT,
                        f"algorithms: at most {MAX_ALGORITHMS} names of 1-200 printable characters")
        token = secrets.token_hex(16)
        shard, outbox = -1, None
        if self.pool is not None:  # the shard learns the session before the party can dial it
            shard = self.pool.assign(req.party)
            outbox = self.pool.open(shard, token, req.party)
        with self._cond:
            old = self._sessions.get(req.party)
            if old is not None:
                self._close_session(old, "the party registered again")
            sess = Session(req.party, token, shard=shard)
            if outbox is not None:
                sess.outbox = outbox
            self._sessions[req.party] = sess
            self._by_token[token] = sess
            self._last_seen[req.party] = time.time()
            self._changed()
        self.store.note_party(req.party, schema=schema.to_dict(), epsilon_limit=req.epsilon_limit,
                              delta_limit=req.delta_limit, epsilon_spent=req.epsilon_spent,
                              algorithms=list(req.algorithms), registered=time.time(),
                              public_records=req.public_records or None,
                              **peer_certificate_facts(context))
        log.info("party %s registered", req.party)
        return pb.RegisterReply(version=PROTOCOL_VERSION, session=token,
                                shard=self.pool.addresses[shard] if self.pool is not None else "")

    def _close_session(self, sess: Session, why: str) -> None:
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

    def _resend(self, act: Active, name: str) -> None:
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
        req.reason = party_text(req.reason)  # kept in the job record, logged, shown by `dpfed status`
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
            if math.isfinite(req.epsilon_total) and req.epsilon_total >= 0:  # what the party's own ledger says
                self.store.note_party(name, epsilon_spent=float(req.epsilon_total), reported=time.time())
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
        size = [0]

        def counted(it: Iterator[pb.ResultPart]) -> Iterator[pb.ResultPart]:
            for part in it:
                size[0] += part.ByteSize()
                yield part

        parts = counted(parts)
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
        self.metrics.received(first.job_id, size[0])
        with self._cond:
            act.receiving.discard(name)
            if self._actives.get(act.spec.job_id) is not act or act.round != first.round or act.task_id != first.task_id or act.complete:
                raise Abort(grpc.StatusCode.FAILED_PRECONDITION, "the task was closed while the result arrived")
            if error and act.tolerant:
                act.errors.add(name)
                log.info("job %s round %d: %s dropped out (%s)", act.spec.job_id, act.round, name, error)
            elif error:
                self.metrics.refusal(act.spec.job_id, name, error)
                self._fail(act, f"party {name!r} refused task {act.round} of job {act.spec.job_id}: {error}")
            else:
                act.answers[name] = arrays
            self._last_seen[name] = time.time()
            self._changed()
        return pb.ResultAck(version=PROTOCOL_VERSION)
