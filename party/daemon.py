"""The party daemon: holds one owner's records and ledger, decides and answers the coordinator's jobs.

It dials out to the coordinator (no inbound port), registers under its certificate's name and
keeps one task stream open, reconnecting after failures. Every offer and task goes through the
party session (:mod:`dpfed.federation.session`): the job's whole spend is computed from the
public spec and charged durably before anything leaves, refusals carry a reason the coordinator
shows the operator, every task is checked against the charged plan and each round is answered
once. Error messages sent out carry public facts only (never data values): for a failure while
computing an answer only the exception type leaves the party; details go to its local log.

Run: ``dpfed party serve --config party.toml`` or ``python -m party.daemon --config party.toml``.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import grpc
import numpy as np

from dpfed.algorithms import algorithm_names
from dpfed.algorithms.contract import Task
from dpfed.core.errors import DpfedError
from dpfed.core.ledger import BudgetLedger, LedgerError
from dpfed.core.names import NAME_RULE, printable, valid_name
from dpfed.federation.secure_session import SecAggParty
from dpfed.federation.shutdown import stop_on_signals
from dpfed.federation.session import PartyContext, PartySession, TaskError, decide
from party.config import ConfigError, PartyConfig
from party.inbox import TaskInbox
from party.ledger_lock import hold_ledger
from party.ledger_page import serve_ledger_page
from protos import dpfed_pb2 as pb
from protos import dpfed_pb2_grpc as pbg
from protos import wire_json
from protos.codec import (PROTOCOL_VERSION, SESSION_METADATA, ArrayAssembler, ProtocolError, channel_options,
                          chunk_groups, encode_arrays)
from dpfed.federation.own_cert import CertificateProblem, check_own_certificate
from dpfed.federation.tls import (HandshakeFailed, PeerRefused, channel_credentials, check_coordinator, revoked_serials,
                                  warn_insecure)

__all__ = ["PartyDaemon", "main"]

log = logging.getLogger("dpfed.party")


_FATAL = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION)


def _shown(text: str | None, limit: int = 300) -> str:
    """The coordinator's text (a status's details, a job's end) as this party logs it: cut and escaped."""
    return printable(str(text or ""), limit)


class AuthenticationFailed(DpfedError, ConnectionError):
    """The coordinator and this party could not authenticate each other ``max_auth_failures`` times in a row."""


class _Refused(Exception):
    """The coordinator refused the registration itself."""

    def __init__(self, error: grpc.RpcError) -> None:
        super().__init__(error.details())
        self.error = error


class PartyDaemon:
    """One party. ``run()`` blocks until ``stop()``; data must already be validated."""

    def __init__(self, config: PartyConfig, X: np.ndarray, y: np.ndarray | None) -> None:
        self.config = config
        self.X, self.y = X, y
        self.ledger = BudgetLedger(config.ledger, epsilon_limit=config.epsilon_limit,
                                   delta_limit=config.delta_limit, accountant=config.accountant)
        try:
            self._held = hold_ledger(config.ledger)  # one daemon per ledger (party/ledger_lock.py)
        except LedgerError:
            self.ledger.close()
            raise
        self.party = PartyContext(config.name, X, y, config.schema, self.ledger, plugins=config.plugins,
                                  secure_aggregation=config.simulation, seed=config.seed, secagg=_secagg(config))
        self._jobs: dict[str, PartySession] = {}
        self._stop = threading.Event()
        self._channel: grpc.Channel | None = None
        self._shard_channel: grpc.Channel | None = None
        self._call = None
        self.connected = threading.Event()
        self._close_lock, self._closed = threading.Lock(), False
        try:
            self.page = serve_ledger_page(self.ledger, config.name, config.console_port) \
                if config.console_port >= 0 else None  # the data owner's ledger report on 127.0.0.1
        except OSError as exc:  # the port is taken: one line, and the ledger and its lock let go
            self.ledger.close()
            self._held.close()
            raise ConfigError(f"console_port {config.console_port}: the ledger page cannot listen on 127.0.0.1:"
                              f"{config.console_port} ({exc.strerror or exc}); choose another port, or -1 for no "
                              "page") from None

    @classmethod
    def from_config(cls, config: PartyConfig) -> "PartyDaemon":
        if not config.insecure and config.tls is not None:  # the cause here, not only in the coordinator's log
            check_own_certificate(config.tls, "party", config.name)
        X, y = config.load_data()
        log.info("party %s: %d records, %d features validated against the schema", config.name, *X.shape)
        return cls(config, X, y)

    # ------------------------------------------------------------------ connection
    def _open_channel(self, address: str | None = None) -> grpc.Channel:
        """A channel to the coordinator, or to ``address``: its ingress shard on a Ray cluster, which holds
        the coordinator's certificate (checked under the coordinator's host name: the shard's own
        address need not be in the certificate; chain and role are checked by ``check_coordinator``)."""
        opts: list = channel_options(self.config.max_message_bytes)
        if self.config.insecure:
            return grpc.insecure_channel(address or self.config.coordinator, options=opts)
        if address is not None:
            host = self.config.coordinator.split("://", 1)[-1].rpartition(":")[0].strip("[]")
            opts = [*opts, ("grpc.ssl_target_name_override", host)]
        return grpc.secure_channel(address or self.config.coordinator, channel_credentials(self.config.tls),
                                   options=opts)

    def stop(self) -> None:
        self._stop.set()
        call = self._call
        if call is not None:
            call.cancel()

    def close(self) -> None:
        """Stop the ledger page and close the ledger (idempotent, from any thread: the ledger's lock waits for
        a charge or an answer record in progress, each one transaction)."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self.page is not None:
            self.page.stop()
        self.ledger.close()
        self._held.close()  # releases the daemon's lock on the ledger

    def run(self) -> None:
        """Connect, serve the task stream, reconnect on failure; return after :meth:`stop`."""
        if self.config.insecure:
            warn_insecure(log)
        refused = 0  # TLS handshakes refused in a row (our certificate, or theirs)
        while not self._stop.is_set():
            try:
                self._serve_once()
                refused = 0
            except _Refused as exc:
                log.error("coordinator refused party %s: %s", self.config.name, _shown(exc.error.details()))
                raise exc.error from None
            except (PeerRefused, OSError) as exc:  # not our coordinator (or unreachable): never register there
                if self._stop.is_set():
                    break
                # counted: the coordinator refused OUR certificate (an alert); an impostor's certificate that we
                # refuse is not counted (the party keeps refusing it and waits for its coordinator)
                refused = refused + 1 if isinstance(exc, HandshakeFailed) and exc.refused_us else 0
                self._give_up(refused, exc)
                log.error("not connecting to %s: %s; retrying in %.1f s", self.config.coordinator, exc,
                          self.config.reconnect_seconds)
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                if self._stop.is_set():
                    break
                details = str(exc.details() if hasattr(exc, "details") else exc)
                refused = 0
                log.warning("connection to %s lost (%s: %s); retrying in %.1f s", self.config.coordinator,
                            code.name if code else exc, _shown(" ".join(details.split())), self.config.reconnect_seconds)
            finally:
                self.connected.clear()
                for ch in (self._channel, self._shard_channel):
                    if ch is not None:
                        ch.close()
                self._channel = self._shard_channel = None
            self._stop.wait(self.config.reconnect_seconds)

    def _serve_once(self) -> None:
        cfg = self.config
        if not cfg.insecure:  # the server must hold an unrevoked coordinator certificate of our CA
            self.party.coordinator = f"{check_coordinator(cfg.coordinator, cfg.tls)}@{cfg.coordinator}"
        else:
            self.party.coordinator = f"unverified (insecure)@{cfg.coordinator}"
        self._channel = ch = self._open_channel()
        stub = pbg.PartyStub(ch)
        try:
            reg = stub.Register(pb.RegisterRequest(
                version=PROTOCOL_VERSION, party=cfg.name, schema_json=cfg.schema.to_json(),
                epsilon_limit=cfg.epsilon_limit, delta_limit=cfg.delta_limit, epsilon_spent=self.ledger.spent(),
                algorithms=algorithm_names(), public_records=cfg.public_records or 0), timeout=30)
        except grpc.RpcError as exc:
            if exc.code() in _FATAL:  # wrong name, role, schema or version: retrying cannot help
                raise _Refused(exc) from None
            raise
        session = reg.session
        data = stub  # TaskStream and SubmitResult: at the coordinator, or at the ingress shard it names
        if reg.shard:
            if not cfg.insecure:
                check_coordinator(reg.shard, cfg.tls)
            self._shard_channel = self._open_channel(reg.shard)
            data = pbg.PartyStub(self._shard_channel)
        self._call = call = data.TaskStream(pb.StreamRequest(version=PROTOCOL_VERSION, session=session))
        if self._stop.is_set():  # stop() ran before the call existed: it could not cancel it
            call.cancel()
        self.connected.set()
        log.info("party %s connected to %s%s", cfg.name, cfg.coordinator,
                 f" (ingress shard {reg.shard})" if reg.shard else "")
        inbox = TaskInbox(cfg.max_buffered_bytes)
        for msg in call:
            if self._stop.is_set():
                break
            which = msg.WhichOneof("body")
            if msg.version != PROTOCOL_VERSION:
                log.error("ignoring a message of protocol version %d", msg.version)
                continue
            if which == "heartbeat":
                continue
            if not valid_name(msg.job_id):  # a NUL or newline would reach file names and forge log lines
                log.error("ignoring a %s message with an invalid job id %s (%s)", which, repr(msg.job_id)[:80], NAME_RULE)
                continue
            try:
                self._dispatch(stub, data, session, msg, which, inbox)
            except grpc.RpcError as exc:
                if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAUTHENTICATED):
                    raise  # reconnect (and register again)
                # the coordinator rejected one reply (e.g. the job failed meanwhile): the stream goes on
                log.warning("coordinator rejected a reply: %s %s", exc.code().name, _shown(exc.details()))

    def _dispatch(self, stub: pbg.PartyStub, data: pbg.PartyStub, session: str, msg: pb.CoordinatorMessage,
                  which: str, inbox: TaskInbox) -> None:
        if which == "offer":
            self._on_offer(stub, session, msg)
        elif which == "job_end":
            self._jobs.pop(msg.job_id, None)
            inbox.drop(msg.job_id)
            log.info("job %s ended: %s", msg.job_id, _shown(msg.job_end, 200))
        else:  # a task part: the first carries the header, the last has last=True (bounded: party/inbox.py)
            task = inbox.add(msg, msg.job_id in self._jobs)
            if task is not None:
                self._on_task(data, session, task.head, task.arrays, task.error)

    # ------------------------------------------------------------------ decisions (all in the session)
    def _on_offer(self, stub: pbg.PartyStub, session: str, msg: pb.CoordinatorMessage) -> None:
        d = decide(self.party, msg.offer.spec_json)
        if d.session is not None:
            self._jobs[d.job_id] = d.session
        resp = pb.JobResponse(version=PROTOCOL_VERSION, session=session, job_id=d.job_id or msg.job_id, round=-1,
                              task_id="", accept=d.accept, reason=d.reason, event_json=d.event_json,
                              epsilon_job=d.epsilon_job, epsilon_total=d.epsilon_total)
        stub.RespondJob(resp, timeout=60)

    def _on_task(self, stub: pbg.PartyStub, session: str, head: pb.CoordinatorMessage, asm: ArrayAssembler,
                 error: str) -> None:
        ids = dict(version=PROTOCOL_VERSION, session=session, job_id=head.job_id, round=head.round,
                   task_id=head.task_id)
        answer: dict[str, np.ndarray] = {}
        job = self._jobs.get(head.job_id)
        if not error and job is None:
            error = f"job {head.job_id} was not accepted by this party"
        if not error:
            try:
                params = wire_json.loads(head.task.params_json or "{}", "task parameters")
                task = Task(head.job_id, int(head.round), head.task.kind, params, asm.finish())
            except (ProtocolError, ValueError, TypeError) as exc:
                error = f"task rejected: {exc}"
        if not error:
            try:
                answer = job.answer(task)
            except TaskError as exc:
                error = str(exc)
        stub.SubmitResult(self._result_parts(ids, answer, error), timeout=3600,
                          metadata=((SESSION_METADATA, session),))  # checked before the upload is read

    def _give_up(self, refused: int, cause: object) -> None:
        """Stop after ``max_auth_failures`` refused handshakes in a row, the cause in this party's own log."""
        if refused >= self.config.max_auth_failures > 0:
            log.error("giving up after %d refused TLS handshakes with %s: %s", refused, self.config.coordinator, cause)
            raise AuthenticationFailed(f"{refused} TLS handshakes with {self.config.coordinator} refused in a row "
                                       f"(max_auth_failures); last: {cause}")

    def _result_parts(self, ids: dict, answer: dict[str, np.ndarray], error: str) -> Iterator[pb.ResultPart]:
        cb = self.config.chunk_bytes
        groups = list(chunk_groups(encode_arrays(answer, cb), cb)) if not error else [[]]
        for i, g in enumerate(groups):
            yield pb.ResultPart(**ids, error=error, chunks=g, last=i == len(groups) - 1)


def _secagg(config: PartyConfig) -> SecAggParty | None:
    """The party's secure-aggregation setup: its TLS certificate and key sign its SecAgg keys."""
    if not config.secure_aggregation or config.tls is None:
        return None
    tls = config.tls
    return SecAggParty(Path(tls.cert).read_bytes(), Path(tls.key).read_bytes(), Path(tls.ca).read_bytes(),
                       min_survivors=config.min_survivors, dropout=config.dropout, colluders=config.colluders,
                       min_honest_shares=config.min_honest_shares, peers=config.peers,
                       public_records=config.public_records,
                       revocation=functools.partial(revoked_serials, tls))  # re-read when it changes


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)


def main(argv: list[str] | None = None) -> int:
    """``python -m party.daemon --config party.toml``: validate the data, then serve until signalled."""
    ap = argparse.ArgumentParser(prog="party.daemon", description="dpfed party daemon")
    ap.add_argument("--config", required=True, help="party.toml")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    return serve_from_config(args.config, log_level=args.log_level)


def serve_from_config(path: str, log_level: str = "INFO", insecure: bool = False) -> int:
    """Load ``party.toml``, validate the data, serve until SIGTERM/SIGINT; return an exit code."""
    logging.basicConfig(level=log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from dpfed.data.schema import DataValidationError

    try:
        cfg = PartyConfig.load(path)
        if insecure:
            cfg = dataclasses.replace(cfg, insecure=True, tls=None)
        daemon = PartyDaemon.from_config(cfg)
    except (ConfigError, DataValidationError, CertificateProblem, LedgerError) as exc:
        log.error("%s", exc)
        print(f"dpfed party: error: {exc}", file=sys.stderr)
        return 2
    if cfg.exit_with_parent:
        threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()

    stop_on_signals(daemon.stop, daemon.close, f"party {cfg.name}")  # closed and gone within 2 s
    try:
        daemon.run()
    except grpc.RpcError as exc:
        print(f"dpfed party: error: the coordinator refused this party: {_shown(exc.details())}", file=sys.stderr)
        return 1
    except AuthenticationFailed as exc:
        print(f"dpfed party: error: {exc}", file=sys.stderr)
        return 1
    finally:
        daemon.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
