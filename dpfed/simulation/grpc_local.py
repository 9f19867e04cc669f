"""The local multi-party simulation over real sockets: what ``dpfed simulate`` runs.

:func:`run_grpc_simulation` creates a temporary CA and certificates, starts a coordinator on a
free loopback port (in this process), writes each party's records to an ``.npz`` file and starts
one party daemon PROCESS per party (``python -m party.daemon``), submits the job through the
operator API with mutual TLS, waits for it, fetches the model and reads every party's spend.
:func:`run_grpc_simulations` runs several jobs one after the other over one such federation.
Everything is shut down on return, on error and on KeyboardInterrupt (parties get SIGTERM, then
SIGKILL; they also exit on their own if this process dies).
"""
from __future__ import annotations

from dpfed.core.errors import DpfedError

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from dpfed.federation import certs
from coordinator.client import AdminClient, JobError
from coordinator.config import CoordinatorConfig
from coordinator.server import serve
from dpfed.algorithms.contract import JobSpec
from dpfed.algorithms.secure_noise import is_secure
from dpfed.simulation.inprocess import PURE_DP_DELTA
from dpfed.simulation.steps import PartyData, SimulationResult, report, start_job
from party.config import write_config
from dpfed.federation.tls import TlsFiles

__all__ = ["run_grpc_simulation", "run_grpc_simulations", "SimulationError"]


class SimulationError(DpfedError, RuntimeError):
    """A party process could not start, or the job did not finish."""


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def remove_folder(root: Path) -> None:
    """Delete a simulation folder: its private keys first (CA and every endpoint), then the rest."""
    for key in root.rglob("*.key"):
        try:
            key.unlink()
        except OSError:
            pass
    shutil.rmtree(root, ignore_errors=True)


def _keep_logs(root: Path) -> Path:
    """Copy the logs (never keys or data) of a failed simulation to a folder of their own; return it."""
    keep = Path(tempfile.mkdtemp(prefix="dpfed-sim-logs-"))
    for log_file in root.rglob("*.log"):
        dest = keep / log_file.relative_to(root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log_file, dest)
    return keep


def _party_errors(root: Path, names: Sequence[str]) -> str:
    """The last error line each party logged (parties never log record values), as '; NAME: LINE'."""
    out = []
    for n in names:
        try:
            lines = (root / n / "party.log").read_text(errors="replace").splitlines()
        except OSError:
            continue
        errs = [ln for ln in lines if " ERROR " in ln or " WARNING " in ln and "refused" in ln]
        if errs:
            out.append(f"; party {n}: {' '.join(errs[-1].split())[:300]}")
    return "".join(out)


def _stop_processes(procs: Sequence[subprocess.Popen], grace: float = 5.0) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _tls(root: Path, insecure: bool, name: str) -> TlsFiles | None:
    """The certificate files of ``name`` (coordinator, operator or a party) under ``root``; None if insecure."""
    d = root / "certs"
    return None if insecure else TlsFiles(d / "ca.crt", d / f"{name}.crt", d / f"{name}.key")


def _start_coordinator(root: Path, names: Sequence[str], insecure: bool, plugins: Sequence[str],
                       coordinator: Mapping[str, Any] | None) -> Any:
    """start: a temporary CA with every certificate (unless insecure), and the coordinator on a free port."""
    if not insecure:
        certs.init_ca(root / "ca", overwrite=True)
        for n in ["coordinator", "operator", *names]:
            certs.issue(n, root / "ca", root / "certs")
    cfg = CoordinatorConfig(listen="127.0.0.1:0", state_dir=root / "coordinator", tls=_tls(root, insecure, "coordinator"),
                            insecure=insecure, plugins=tuple(plugins), **dict(coordinator or {}))
    return serve(cfg)


def _party_values(spec: JobSpec, name: str, root: Path, address: str, *, seed: int | None, insecure: bool,
                  plugins: Sequence[str], dropout: float, epsilon_limit: float | None,
                  delta_limit: float | None) -> dict[str, Any]:
    """start: one party's configuration; its ledger limit defaults to the job's own (epsilon, delta)."""
    pdir = root / name
    eps_limit = spec.epsilon * (1 + 1e-9) if epsilon_limit is None else epsilon_limit
    # PLD epsilons of pure-DP events are infinite at deltas far below 1e-12 (tail truncation)
    dl = (spec.delta if spec.delta > 0 else PURE_DP_DELTA) if delta_limit is None else delta_limit
    values: dict[str, Any] = {
        "name": name, "coordinator": address, "data": str(pdir / "data.npz"),
        "ledger": str(pdir / "ledger.sqlite"), "epsilon_limit": eps_limit, "delta_limit": dl,
        "insecure": insecure, "reconnect_seconds": 0.5, "plugins": list(plugins),
        "schema_file": str(root / "schema.json"), "exit_with_parent": True,
        "simulation": True, "dropout": float(dropout),
        "accountant": "rdp" if is_secure(spec.params) and spec.delta > 0 else "pld"}  # delta 0: pure DP, PLD
    if seed is not None:
        values["seed"] = int(seed)
    f = _tls(root, insecure, name)
    if f is not None:
        values["tls"] = {"ca": str(f.ca), "cert": str(f.cert), "key": str(f.key)}
    return values


def _start_parties(procs: list[subprocess.Popen], spec: JobSpec, party_data: PartyData, names: Sequence[str],
                   root: Path, address: str, **config: Any) -> None:
    """start: each party's records and configuration in its folder, and one party daemon process per party
    (appended to ``procs`` as started, so that every started one is stopped whatever happens next)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    env.setdefault("PYTHONWARNINGS", "ignore::UserWarning")  # the seeded-RNG warning, once per party
    (root / "schema.json").write_text(spec.schema.to_json())
    for name, (X, y) in zip(names, party_data, strict=True):
        pdir = root / name
        pdir.mkdir(exist_ok=True)
        arrays = {"X": np.asarray(X)} if y is None else {"X": np.asarray(X), "y": np.asarray(y)}
        np.savez(pdir / "data.npz", **arrays)
        write_config(pdir / "party.toml", _party_values(spec, name, root, address, **config))
        log = open(pdir / "party.log", "wb")
        try:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "party.daemon", "--config", str(pdir / "party.toml"),
                 "--log-level", "WARNING"], stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True))
        finally:
            log.close()


def _wait_for_parties(server: Any, names: Sequence[str], procs: Sequence[subprocess.Popen], root: Path,
                      start_timeout: float) -> None:
    """start: every party connected, or :class:`SimulationError` naming the one that exited (its last log line)."""
    deadline = time.monotonic() + start_timeout
    while not server.coordinator.wait_for_parties(names, timeout=0.2):
        for name, p in zip(names, procs, strict=True):
            if p.poll() is not None:
                last = [ln for ln in _tail(root / name / "party.log").splitlines() if ln.strip()]
                raise SimulationError(f"party {name} exited with code {p.returncode}: "
                                      f"{last[-1].strip() if last else 'no log output'}")
        if time.monotonic() > deadline:
            raise SimulationError(f"parties did not connect within {start_timeout:g} s")


def _offer_and_drive(admin: AdminClient, spec: JobSpec, names: Sequence[str], timeout: float,
                     progress: Callable[[float], None] | None) -> tuple[str, dict[str, Any]]:
    """offer: submit the job through the operator API; drive: wait for the coordinator to finish it (a job
    that does not finish in ``timeout`` seconds is cancelled). Returns the job id and its record."""
    job_id = admin.submit_job(spec.algorithm, dict(spec.params), parties=list(names), schema=spec.schema,
                              job_id=spec.job_id)
    try:
        return job_id, admin.wait(job_id, timeout=timeout, progress=progress, raise_on_failure=False)
    except TimeoutError:
        admin.cancel(job_id)
        raise


def run_grpc_simulation(spec: JobSpec, party_data: Sequence[tuple[np.ndarray, np.ndarray | None]], *,
                        seed: int | None, insecure: bool = False, progress: Callable[[float], None] | None = None,
                        workdir: str | os.PathLike | None = None, timeout: float = 3600,
                        party_names: Sequence[str] | None = None, plugins: Sequence[str] = (),
                        epsilon_limit: float | None = None, delta_limit: float | None = None,
                        start_timeout: float = 120.0, dropout: float = 0.0,
                        coordinator: Mapping[str, Any] | None = None) -> SimulationResult:
    """Run ``spec`` over party processes holding ``party_data``; return model, spends and timing.

    ``seed`` makes each party's noise reproducible (``SecureRNG.from_seed(f"{seed}:{job}:{party}")``,
    simulation only); None uses fresh OS entropy. Each party's ledger limit defaults to the job's own
    (epsilon, delta), as in :func:`dpfed.simulation.run_inprocess`. ``workdir`` keeps the certificates,
    configs, ledgers and logs (a temporary directory, removed afterwards, by default). A secure-
    aggregation job runs with each party's certificate signing its SecAgg keys; ``dropout`` is each
    party's probability of missing a secure round (set in its config, simulated by its session).
    ``coordinator``: further :class:`CoordinatorConfig` settings, e.g. ``{"ray_address": "auto",
    "shards": 2}`` to run the coordinator's data path through ingress shards on a Ray cluster.
    """
    return run_grpc_simulations([spec], party_data, seed=seed, insecure=insecure, progress=progress, workdir=workdir,
                                timeout=timeout, party_names=party_names, plugins=plugins, epsilon_limit=epsilon_limit,
                                delta_limit=delta_limit, start_timeout=start_timeout, dropout=dropout,
                                coordinator=coordinator)[0]


def run_grpc_simulations(specs: Sequence[JobSpec], party_data: Sequence[tuple[np.ndarray, np.ndarray | None]], *,
                         seed: int | None, insecure: bool = False, progress: Callable[[float], None] | None = None,
                         workdir: str | os.PathLike | None = None, timeout: float = 3600,
                         party_names: Sequence[str] | None = None, plugins: Sequence[str] = (),
                         epsilon_limit: float | None = None, delta_limit: float | None = None,
                         start_timeout: float = 120.0, dropout: float = 0.0,
                         coordinator: Mapping[str, Any] | None = None) -> list[SimulationResult]:
    """:func:`run_grpc_simulation` of several jobs, one after the other, over ONE coordinator and one set of party
    processes (started once): each job's result is the one a federation of its own would give (a party's noise
    stream is seeded per job). The jobs must all run under secure aggregation or none (one ledger accountant per
    party). Each party's ledger limit defaults to the sum of the jobs' epsilons at the largest of their deltas
    (a ledger reads every spend at its delta limit: jobs of one delta report the spends of single-job runs; a
    PLD ledger's grid widens with its limit from epsilon 10 on, :func:`dpfed.core.accounting.pld_grid`)."""
    t0 = time.perf_counter()
    started = [start_job(spec, party_data, party_names) for spec in specs]
    if not started:
        raise ValueError("no job to run")
    names, jobs = started[0][0], [spec for _, spec in started]
    if len({is_secure(spec.params) for spec in jobs}) > 1:
        raise ValueError("jobs under secure aggregation and others need party ledgers of different accountants")
    if is_secure(jobs[0].params) and insecure:
        raise ValueError("secure aggregation needs certificates: drop --insecure")
    if len(jobs) > 1 and epsilon_limit is None:
        epsilon_limit = sum(spec.epsilon for spec in jobs) * (1 + 1e-9)
    if len(jobs) > 1 and delta_limit is None:
        delta_limit = max(spec.delta if spec.delta > 0 else PURE_DP_DELTA for spec in jobs)
    own_dir = workdir is None
    root = Path(tempfile.mkdtemp(prefix="dpfed-sim-")) if own_dir else Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    failed = False  # a failed simulation keeps its logs (only: no keys, no data) in a folder of their own
    server = None
    admin = None
    try:
        server = _start_coordinator(root, names, insecure, plugins, coordinator)
        address = f"127.0.0.1:{server.port}"
        _start_parties(procs, jobs[0], party_data, names, root, address, seed=seed, insecure=insecure,
                       plugins=plugins, dropout=dropout, epsilon_limit=epsilon_limit, delta_limit=delta_limit)
        _wait_for_parties(server, names, procs, root, start_timeout)
        admin = AdminClient(address, tls=_tls(root, insecure, "operator"), insecure=insecure)
        results = []
        for spec in jobs:
            job_id, record = _offer_and_drive(admin, spec, names, timeout, progress)
            if record.get("state") != "done":
                failed = True
                where = _keep_logs(root) if own_dir else root
                raise SimulationError(f"{JobError(record)}{_party_errors(root, names)}; party logs kept in {where}")
            model, record = admin.get_model(job_id)  # collect
            results.append(report(model, record.get("summary", {}), record["party_epsilon"], names,
                                  int(record.get("rounds", 0)), t0))
            t0 = time.perf_counter()
        return results
    except SimulationError as exc:
        if failed or not own_dir:
            raise
        failed = True
        raise SimulationError(f"{' '.join(str(exc).split())}; party logs kept in {_keep_logs(root)}") from None
    finally:
        if admin is not None:
            admin.close()
        _stop_processes(procs)
        if server is not None:
            server.stop(grace=1.0)
        if own_dir:  # on every exit path: keys first, then the parties' data copies and everything else
            remove_folder(root)
