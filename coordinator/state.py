"""The coordinator's durable state: job records, trained models and the global budget.

Layout of ``state_dir``::

    parties.json          known parties: declared limits, schema, last seen (public facts)
    jobs/JOB.json         one record per job (state, progress, reason, per-party spends, summary)
    models/JOB.npz        the trained model of each finished job
    checkpoints/JOB.pkl   the coordinator's half of an unfinished job, rewritten before every round
    budget/PARTY.sqlite   the global budget: a BudgetLedger per party mirroring what it released

The global budget composes, per party, every plan that party accepted (sequential composition
within a party; parties hold disjoint records, so across parties composition is parallel and the
job's spend is the largest party spend). Each accepted plan is recorded once, under the same
charge id the party used (``JOB:plan``), so a repeated acceptance never counts twice. Files are
replaced atomically (write to a temporary file, fsync, rename, fsync the directory).

Checkpoints are pickles of the algorithm's coordinator half (public, post-processed state only:
the spec, the model so far, counters) together with the task about to be broadcast. Pickle, not a
per-algorithm ``state()/restore()``: every coordinator half, plugins included, is checkpointed
without writing code for it (a test pickles each registered algorithm mid-job and checks that the
continued run equals the uninterrupted one), and the file lives in the coordinator's own state
directory, which is as trusted as its code (it also holds the models and the global budget). A
checkpoint that cannot be read (e.g. written by another dpfed version) fails its job's resume with
that reason; it never takes the coordinator down.
"""
from __future__ import annotations

import json
import os
import pickle
import tempfile
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, cast

import numpy as np

from dpfed.core.accounting import event_from_json
from dpfed.core.errors import DpfedError
from dpfed.core import accounting
from dpfed.core.ledger import BudgetLedger

__all__ = ["CheckpointError", "JobRecord", "StateError", "StateStore", "TERMINAL_STATES", "RESUMABLE_STATES"]

TERMINAL_STATES = frozenset({"done", "failed", "refused", "cancelled"})
RESUMABLE_STATES = frozenset({"failed", "refused", "cancelled"})
_MIRROR_EPSILON_LIMIT = 1e9  # the mirror records; the party's own ledger enforces its limit


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class CheckpointError(DpfedError, RuntimeError):
    """A job's checkpoint exists but cannot be read."""


class StateError(DpfedError, RuntimeError):
    """A file of the state directory cannot be read: the coordinator does not start, and changes nothing."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise StateError(_unreadable(path, exc)) from None


def _unreadable(path: Path, exc: Exception) -> str:
    return (f"the state file {path} cannot be read ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
            "nothing was changed: restore it from a backup, or move it out of the state folder")


_FIXED = frozenset({"job_id", "algorithm", "params", "schema", "parties", "created"})


@dataclass
class JobRecord:
    """Everything public about one job (persisted as JSON)."""

    job_id: str
    algorithm: str
    params: dict[str, Any]
    schema: dict[str, Any] | None
    parties: list[str]
    state: str = "queued"            # queued, offering, running, done, failed, refused, cancelled
    progress: float = 0.0
    rounds: int = 0
    reason: str = ""
    refusals: dict[str, str] = field(default_factory=dict)
    party_epsilon: dict[str, float] = field(default_factory=dict)   # each party's ledger spend for the job
    summary: dict[str, Any] = field(default_factory=dict)
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    resumes: int = 0                 # times the job was resumed (after a restart or 'dpfed job resume')
    resumed_at: list[int] = field(default_factory=list)   # the round each resume continued from
    resumable: bool = False          # failed, cancelled or refused: 'dpfed job resume JOB' continues it

    def to_dict(self) -> dict[str, Any]:
        """A deep copy as JSON would read it back (a JSON round trip: C speed, where ``asdict`` walks the
        schema's every feature in Python, a cost paid on every watch message)."""
        return cast(dict[str, Any], json.loads(self.to_json()))

    def to_json(self) -> str:
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)}, allow_nan=True)

    def progress_key(self) -> str:
        """The fields a job's progress changes (everything but the fixed job, parameters and schema): a watch
        sends the record again only when this changes (or on its heartbeat)."""
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self) if f.name not in _FIXED},
                          allow_nan=True)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class StateStore:
    """Reads and writes the state directory (thread-safe)."""

    def __init__(self, state_dir: str | os.PathLike) -> None:
        self.root = Path(state_dir)
        for sub in ("jobs", "models", "budget", "checkpoints"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._ledgers: dict[str, BudgetLedger] = {}
        self.parties: dict[str, dict[str, Any]] = {}
        pf = self.root / "parties.json"
        if pf.exists():
            self.parties = _read_json(pf)
            if not isinstance(self.parties, dict):
                raise StateError(_unreadable(pf, TypeError("not a JSON object")))

    # -- jobs ------------------------------------------------------------------------------
    def load_jobs(self) -> dict[str, JobRecord]:
        """All job records. A job that was offering or running when the coordinator stopped is queued
        again to resume (its parties treat the same id and parameters as a resume: no new charge)."""
        records = []
        for f in sorted((self.root / "jobs").glob("*.json")):  # every record read before any is changed
            data = _read_json(f)
            try:
                records.append(JobRecord(**data))
            except TypeError as exc:  # not a mapping, or not a job record's fields
                raise StateError(_unreadable(f, exc)) from None
        jobs = {}
        for rec in records:
            if rec.state in ("offering", "running"):
                rec.reason = f"resuming after a coordinator restart (it was {rec.state}, {rec.rounds} round(s) done)"
                rec.state, rec.resumes = "queued", rec.resumes + 1
                self.save_job(rec)
            jobs[rec.job_id] = rec
        return jobs

    # -- checkpoints -----------------------------------------------------------------------
    def _checkpoint_path(self, job_id: str) -> Path:
        return self.root / "checkpoints" / f"{job_id}.pkl"

    def save_checkpoint(self, job_id: str, state: Mapping[str, Any]) -> None:
        """Durably replace the job's checkpoint with ``state`` (pickled)."""
        _atomic_write(self._checkpoint_path(job_id), pickle.dumps(dict(state), protocol=pickle.HIGHEST_PROTOCOL))

    def load_checkpoint(self, job_id: str) -> dict[str, Any] | None:
        """The job's last checkpoint, None if it has none; :class:`CheckpointError` if unreadable."""
        path = self._checkpoint_path(job_id)
        if not path.exists():
            return None
        try:
            state = pickle.loads(path.read_bytes())  # noqa: S301 - our own state directory
        except Exception as exc:  # noqa: BLE001 - any unpickling failure
            raise CheckpointError(f"checkpoint {path.name} cannot be read ({type(exc).__name__}: {exc})") from None
        if not isinstance(state, dict):
            raise CheckpointError(f"checkpoint {path.name} is not a checkpoint")
        return state

    def drop_checkpoint(self, job_id: str) -> None:
        self._checkpoint_path(job_id).unlink(missing_ok=True)

    def save_job(self, rec: JobRecord) -> None:
        with self._lock:
            _atomic_write(self.root / "jobs" / f"{rec.job_id}.json",
                          json.dumps(rec.to_dict(), sort_keys=True, allow_nan=True).encode())

    def save_model(self, job_id: str, model: Mapping[str, np.ndarray]) -> Path:
        path = self.root / "models" / f"{job_id}.npz"
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{job_id}.", suffix=".npz")
        os.close(fd)
        try:
            np.savez(tmp, **{k: np.asarray(v) for k, v in model.items()})
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    def load_model(self, job_id: str) -> dict[str, np.ndarray] | None:
        path = self.root / "models" / f"{job_id}.npz"
        if not path.exists():
            return None
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    # -- parties and the global budget -----------------------------------------------------
    def note_party(self, name: str, **facts: Any) -> None:
        with self._lock:
            self.parties.setdefault(name, {}).update(facts)
            _atomic_write(self.root / "parties.json", json.dumps(self.parties, sort_keys=True).encode())

    def _ledger(self, party: str, accountant: str = "pld") -> BudgetLedger:
        """The party's mirror ledger; events with an RDP bound only (distributed discrete Gaussian
        under secure aggregation) go to a separate RDP mirror, and the two spends are added."""
        key = party if accountant == "pld" else f"{party}\0{accountant}"
        led = self._ledgers.get(key)
        if led is None:
            delta = float(self.parties.get(party, {}).get("delta_limit", 1e-6))
            folder = self.root / ("budget" if accountant == "pld" else f"budget-{accountant}")
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{party}.sqlite"
            # the party's own ledger's grid (from its limit), not the mirror's huge limit's: the same
            # events must give the same spend at both ends; an existing file keeps its own grid
            grid = None if path.exists() else accounting.pld_grid(
                float(self.parties.get(party, {}).get("epsilon_limit", 1.0)))
            led = BudgetLedger(path, epsilon_limit=_MIRROR_EPSILON_LIMIT, delta_limit=delta,
                               accountant=accountant, pld_discretization=grid)
            self._ledgers[key] = led
        return led

    def record_release(self, party: str, job_id: str, event_json: str) -> float:
        """Record that ``party`` accepted (and charged) ``job_id``'s plan; return its composed spend."""
        event = event_from_json(event_json)
        with self._lock:  # the PLD mirror takes every event (earlier mirrors put distributed noise in budget-rdp)
            self._ledger(party, "pld").charge(job_id, event, charge_id=f"{job_id}:plan")
            return self.spent(party)

    def spent(self, party: str) -> float:
        with self._lock:
            total = 0.0
            for acc, folder in (("pld", "budget"), ("rdp", "budget-rdp")):
                key = party if acc == "pld" else f"{party}\0{acc}"
                if key in self._ledgers or (self.root / folder / f"{party}.sqlite").exists():
                    total += self._ledger(party, acc).spent()
            return total

    def budget(self) -> dict[str, dict[str, float]]:
        """Per party: composed epsilon spent (coordinator's record) and the party's declared limits."""
        with self._lock:
            names = set(self.parties) | {p.stem for p in (self.root / "budget").glob("*.sqlite")}
            out = {}
            for name in sorted(names):
                facts = self.parties.get(name, {})
                spent, limit = self.spent(name), float(facts.get("epsilon_limit", float("nan")))
                reported = float(facts.get("epsilon_spent", float("nan")))
                out[name] = {"epsilon_spent": spent, "epsilon_limit": limit,
                             "delta_limit": float(facts.get("delta_limit", float("nan"))),
                             "party_reported_spent": reported,
                             "over_limit": bool(spent > limit or reported > limit)}
            return out

    def budget_history(self) -> dict[str, list[tuple[float, float]]]:
        """Per party: (time, epsilon spent after it) at every plan the party accepted, from the mirror ledgers
        (a plan the RDP mirror holds adds to the PLD mirror's total, as in :meth:`spent`)."""
        with self._lock:
            steps: dict[str, list[tuple[float, int, float]]] = {}
            for k, (acc, folder) in enumerate((("pld", "budget"), ("rdp", "budget-rdp"))):
                for path in sorted((self.root / folder).glob("*.sqlite")):
                    rows = self._ledger(path.stem, acc).history()["charges"]
                    steps.setdefault(path.stem, []).extend(
                        (float(r["created_at"]), k, float(r["epsilon_after"])) for r in rows)
        out: dict[str, list[tuple[float, float]]] = {}
        for name, events in steps.items():
            latest, points = [0.0, 0.0], []
            for t, k, eps in sorted(events):
                latest[k] = eps
                points.append((t, latest[0] + latest[1]))
            out[name] = points
        return out

    def close(self) -> None:
        with self._lock:
            for led in self._ledgers.values():
                led.close()
            self._ledgers.clear()
