"""Run a federated job in one process: the same party sessions and driver loop, no sockets.

For unit tests and research sweeps. Every party decides and answers through its own
:class:`~dpfed.federation.session.PartySession` (charge the whole plan to its ledger first, answer
only planned tasks, each round once), exactly as the party daemon does; the coordinator half runs
in :func:`~dpfed.algorithms.driver.drive`. The gRPC simulation (``dpfed simulate``) runs the same
sessions in party processes.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
import time
from typing import Callable, Sequence

import numpy as np

from dpfed.algorithms.contract import Aggregate, JobSpec, Task
from dpfed.algorithms.driver import drive
from dpfed.algorithms.secure_release import release_for
from dpfed.core.accounting import pld_grid
from dpfed.core.errors import DpfedError
from dpfed.core.ledger import BudgetLedger
from dpfed.algorithms.secure_noise import is_secure
from dpfed.federation.plugins import load_algorithm
from dpfed.federation.secure_gather import SecureGather
from dpfed.federation.secure_session import SecAggParty
from dpfed.federation.session import PartyContext, PartySession, TaskError, answer_hosted, decide
from dpfed.simulation.steps import SimulationResult, job_summary, on_round, report, secure_spec, start_job

__all__ = ["SimulationResult", "run_inprocess", "PURE_DP_DELTA", "JobRefused", "make_parties", "secure_spec",
           "simulation_credentials", "secure_send"]

#: The delta at which a pure-DP job (delta = 0) is measured: PLD reports an infinite epsilon at 0.
PURE_DP_DELTA = 1e-12


class JobRefused(DpfedError, RuntimeError):
    """A simulated party refused the job (the reason is the party's own)."""


def default_ledger(spec: JobSpec, path: str = ":memory:") -> BudgetLedger:
    """A ledger whose limit is the job's own target (what a simulated party allows), on the PLD grid the
    job's plan was calibrated on (:func:`dpfed.core.accounting.pld_grid` of its epsilon)."""
    return BudgetLedger(path, epsilon_limit=spec.epsilon * (1 + 1e-9),
                        delta_limit=spec.delta if spec.delta > 0 else PURE_DP_DELTA,
                        # a secure job with delta 0 is a pure-DP one (the distributed discrete Laplace): PLD exactly
                        accountant="rdp" if is_secure(spec.params) and spec.delta > 0 else "pld",
                        pld_discretization=pld_grid(spec.epsilon))


def simulation_credentials(names: Sequence[str]) -> tuple[bytes, dict[str, tuple[bytes, bytes]]]:
    """A throw-away CA and one party certificate per name (what signs the SecAgg keys in a simulation)."""
    from dpfed.federation import certs

    with tempfile.TemporaryDirectory(prefix="dpfed-secagg-") as d:
        certs.init_ca(d)
        out = {}
        for n in names:
            crt, key = certs.issue(n, d)
            out[n] = (crt.read_bytes(), key.read_bytes())
        return (Path(d) / "ca.crt").read_bytes(), out


def secure_send(sessions: Sequence[PartySession]):
    """``send`` for :class:`SecureGather` over in-process sessions: a refusal is a missing answer."""
    by_name = {s.party.name: s for s in sessions}

    def send(tasks):
        out = {}
        for name, task in tasks.items():
            try:
                out[name] = by_name[name].answer(task)
            except TaskError:
                pass
        return out
    return send


def make_parties(spec: JobSpec, party_data: Sequence[tuple[np.ndarray, np.ndarray | None]], *,
                 seed: int | None = None, ledgers: Sequence[BudgetLedger] | None = None,
                 party_names: Sequence[str] | None = None, plugins: Sequence[str] = (),
                 dropout: float = 0.0,
                 credentials: tuple[bytes, dict[str, tuple[bytes, bytes]]] | None = None) -> list[PartyContext]:
    """One :class:`PartyContext` per (X, y): records validated against the job's schema."""
    names = list(party_names) if party_names is not None else [f"party-{i}" for i in range(len(party_data))]
    if len(names) != len(party_data):
        raise ValueError("one name per party")
    if ledgers is None:
        ledgers = [default_ledger(spec) for _ in names]
    if len(ledgers) != len(names):
        raise ValueError("one ledger per party")
    if credentials is None:  # a secure job: one CA for all parties (a runner may pass its own)
        credentials = simulation_credentials(names) if is_secure(spec.params) else (b"", {})
    ca, creds = credentials
    out = []
    for name, (X, y), ledger in zip(names, party_data, ledgers, strict=True):
        Xv = spec.schema.validate(X, y)
        secagg = SecAggParty(*creds[name], ca, dropout=dropout) if name in creds else None
        out.append(PartyContext(name, Xv, None if y is None else spec.schema.labels(y), spec.schema, ledger,
                                plugins=tuple(plugins), secure_aggregation=True, seed=seed, secagg=secagg))
    return out


def open_sessions(spec: JobSpec, parties: Sequence[PartyContext]) -> list[PartySession]:
    """Every party decides the offer; raise :class:`JobRefused` (or ``BudgetExceededError``) on a refusal."""
    sessions = []
    for party in parties:
        d = decide(party, spec)
        if not d.accept:
            if d.budget_error is not None:
                raise d.budget_error
            raise JobRefused(f"party {party.name!r} refused job {spec.job_id}: {d.reason}")
        assert d.session is not None
        sessions.append(d.session)
    return sessions


def run_inprocess(spec: JobSpec, party_data: Sequence[tuple[np.ndarray, np.ndarray | None]], *,
                  seed: int | None = None, ledgers: Sequence[BudgetLedger] | None = None,
                  party_names: Sequence[str] | None = None,
                  progress: Callable[[float], None] | None = None,
                  plugins: Sequence[str] = (), dropout: float = 0.0) -> SimulationResult:
    """Run ``spec`` over parties holding ``party_data`` [(X, y), ...]; return the model and spends.

    ``seed`` makes every party's noise reproducible (simulation only; production parties use
    ``SecureRNG()``). ``ledgers`` default to in-memory ledgers whose limit is the job's own target.
    ``plugins`` are modules with extra algorithms (see :mod:`dpfed.federation.plugins`). A
    secure-aggregation job runs through :class:`SecureGather`; ``dropout`` is the probability that a
    party misses each of its rounds (simulated in the party session).
    """
    t0 = time.perf_counter()
    algo = load_algorithm(spec.algorithm, plugins)
    names, spec = start_job(spec, party_data, party_names)
    parties = make_parties(spec, party_data, seed=seed, ledgers=ledgers, party_names=names, plugins=plugins,
                           dropout=dropout)
    sessions = open_sessions(spec, parties)  # offer: every party charges the whole job before any answer
    coord = algo.coordinator(spec, [p.name for p in parties])
    secure = SecureGather(spec, release_for(algo, spec), secure_send(sessions)) if is_secure(spec.params) else None

    def gather(task: Task) -> list[Aggregate]:
        if secure is not None:
            return secure(task)
        return [Aggregate(a, (s.party.name,)) for s, a in zip(sessions, answer_hosted(sessions, task), strict=True)]

    rounds = drive(coord, gather, algo.combine, on_round=on_round(progress))
    spent = {p.name: p.ledger.spent(spec.job_id) for p in parties}
    return report(coord.model(), job_summary(coord, None if secure is None else secure.summary()), spent, names,
                  rounds, t0)
