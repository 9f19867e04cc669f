"""The operator's Python API to a running coordinator (what ``dpfed status/job/model`` use).

Example::

    from coordinator.client import AdminClient
    with AdminClient("coord.example.org:50051", cert="certs/operator.crt") as admin:
        job = admin.submit_job("naive-bayes", epsilon=1.0)
        record = admin.wait(job)                  # the final job record (state, reason, spends)
        model, record = admin.get_model(job)      # named arrays, as saved by ``model get``

``cert`` is an operator certificate (``dpfed certs issue operator --ca DIR``); ``key`` defaults to
the same path with ``.key`` and ``ca`` to ``ca.crt`` beside it.
"""
from __future__ import annotations

from dpfed.core.errors import DpfedError

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import grpc
import numpy as np

from dpfed.data.schema import Schema
from protos import dpfed_pb2 as pb
from protos import dpfed_pb2_grpc as pbg
from protos.codec import (DEFAULT_MAX_MESSAGE_BYTES, KEEPALIVE_SECONDS, PROTOCOL_VERSION, ArrayAssembler,
                          channel_options)
from dpfed.federation.tls import TlsFiles, channel_credentials, warn_insecure

__all__ = ["AdminClient", "JobError", "tls_files"]


class JobError(DpfedError, RuntimeError):
    """A job ended in a state other than ``done``; ``record`` holds its final record."""

    def __init__(self, record: Mapping[str, Any]) -> None:
        self.record = dict(record)
        super().__init__(f"job {record.get('job_id')} {record.get('state')}: {record.get('reason') or 'no reason'}")


def tls_files(cert: str | os.PathLike, key: str | os.PathLike | None = None,
              ca: str | os.PathLike | None = None) -> TlsFiles:
    """TLS files from a certificate path (key: same stem + .key; ca: ca.crt in the same directory)."""
    c = Path(cert)
    return TlsFiles(ca=Path(ca) if ca else c.with_name("ca.crt"), cert=c,
                    key=Path(key) if key else c.with_suffix(".key"))


class AdminClient:
    """A connection to the coordinator's Admin service (operator certificate required)."""

    def __init__(self, address: str, *, cert: str | os.PathLike | None = None, key: str | os.PathLike | None = None,
                 ca: str | os.PathLike | None = None, tls: TlsFiles | None = None, insecure: bool = False,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, timeout: float = 30.0,
                 keepalive_seconds: float = KEEPALIVE_SECONDS) -> None:
        opts = channel_options(max_message_bytes, keepalive_seconds)
        if insecure:
            warn_insecure()
            self._channel = grpc.insecure_channel(address, options=opts)
        else:
            if tls is None:
                if cert is None:
                    raise ValueError("an operator certificate is required (cert=...), or insecure=True")
                tls = tls_files(cert, key, ca)
            self._channel = grpc.secure_channel(address, channel_credentials(tls), options=opts)
        self._stub = pbg.AdminStub(self._channel)
        self.timeout = timeout

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ calls
    def status(self) -> dict[str, Any]:
        """``{"parties": [...], "jobs": [...]}``: connection, last seen, budget spent/limit, job states."""
        reply = self._stub.Status(pb.StatusRequest(version=PROTOCOL_VERSION), timeout=self.timeout)
        return json.loads(reply.status_json)

    def submit_job(self, algorithm: str, params: Mapping[str, Any] | None = None, *, epsilon: float | None = None,
                   delta: float | None = None, parties: Sequence[str] = (), schema: Schema | None = None,
                   job_id: str | None = None) -> str:
        """Queue a job; return its id. ``epsilon``/``delta`` override the same keys of ``params``."""
        p = dict(params or {})
        if epsilon is not None:
            p["epsilon"] = float(epsilon)
        if delta is not None:
            p["delta"] = float(delta)
        req = pb.SubmitJobRequest(version=PROTOCOL_VERSION, algorithm=algorithm, params_json=json.dumps(p),
                                  schema_json=schema.to_json() if schema is not None else "",
                                  parties=list(parties), job_id=job_id or "")
        return self._stub.SubmitJob(req, timeout=self.timeout).job_id

    def watch(self, job_id: str, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """The job record on every change, until the job ends."""
        for state in self._stub.WatchJob(pb.JobRequest(version=PROTOCOL_VERSION, job_id=job_id), timeout=timeout):
            yield json.loads(state.job_json)

    def wait(self, job_id: str, *, timeout: float | None = None, progress: Callable[[float], None] | None = None,
             raise_on_failure: bool = True) -> dict[str, Any]:
        """Block until the job ends; return its final record (raise :class:`JobError` unless done)."""
        record: dict[str, Any] = {}
        try:
            for record in self.watch(job_id, timeout=timeout):
                if progress is not None:
                    progress(float(record.get("progress", 0.0)))
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise TimeoutError(f"job {job_id} did not finish within {timeout} s") from None
            raise
        if raise_on_failure and record.get("state") != "done":
            raise JobError(record)
        return record

    def cancel(self, job_id: str) -> dict[str, Any]:
        return json.loads(self._stub.CancelJob(pb.JobRequest(version=PROTOCOL_VERSION, job_id=job_id),
                                               timeout=self.timeout).job_json)

    def resume(self, job_id: str) -> dict[str, Any]:
        """Queue a failed, cancelled or refused job again (same id and parameters; no new charge at the
        parties); return its record."""
        return json.loads(self._stub.ResumeJob(pb.JobRequest(version=PROTOCOL_VERSION, job_id=job_id),
                                               timeout=self.timeout).job_json)

    def get_model(self, job_id: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The trained model's arrays and the job record."""
        asm, record = ArrayAssembler(), {}
        for part in self._stub.GetModel(pb.JobRequest(version=PROTOCOL_VERSION, job_id=job_id), timeout=None):
            if part.job_json:
                record = json.loads(part.job_json)
            asm.add_all(part.chunks)
        return asm.finish(), record

    def save_model(self, job_id: str, path: str | os.PathLike) -> Path:
        """Fetch the model and write it with ``np.savez`` (arrays only; no pickles)."""
        model, _ = self.get_model(job_id)
        out = Path(path)
        np.savez(out, **model)
        return out if out.suffix == ".npz" else out.with_name(out.name + ".npz")
