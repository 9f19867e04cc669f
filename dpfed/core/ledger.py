"""A durable, concurrency-safe privacy budget ledger for one data owner.

Every release is charged here *before* it leaves the owner. A charge, inside one exclusive
SQLite transaction (``BEGIN IMMEDIATE``): reads everything already spent (all jobs), composes
it sequentially with the new event through dp-accounting (PLD by default), checks the owner's
(epsilon, delta) limit and inserts the charge; the commit is durable (WAL journal with
``synchronous=FULL``: the WAL is fsync'd before ``COMMIT`` returns). Only then does
:meth:`BudgetLedger.charge` return, so a caller told "charged" can never be forgotten, even
after ``kill -9``; and because the check and the insert share one write lock, concurrent
threads or processes cannot overspend.

Identical events are grouped into ``SelfComposedDpEvent`` counts (see
:func:`dpfed.core.accounting.compose`), so composing thousands of charges stays one PLD
``self_compose`` per distinct mechanism.

The same database records what left the owner, with the same durability and locking as a
charge: a job's parameters digest (``jobs``: a job id means one set of parameters forever, stored
in the transaction of the job's first charge) and every answered round (``answers``: job, round,
digest of the task, digest of the answer), with the bytes of each job's latest answer
(``latest_answers``) so a repeat of that round gets the identical bytes, never a new draw
(:meth:`BudgetLedger.record_answer`). Who asked is recorded beside the job (``job_origin``: the algorithm and
the coordinator's identity, in the job's first charge; a ledger written before that table shows them unknown);
:meth:`BudgetLedger.history` reads it all back for the data owner's view (``dpfed party ledger``).
"""
from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
import uuid
from collections import Counter
from typing import Any, NamedTuple, cast

from dp_accounting.dp_event import DpEvent

from dpfed.core import accounting
from dpfed.core.errors import DpfedError

__all__ = ["BudgetLedger", "BudgetExceededError", "LedgerError", "JobConflictError", "AnswerConflictError",
           "StoredAnswer"]

_SCHEMA_VERSION = "1"


class LedgerError(DpfedError, RuntimeError):
    """The ledger file is unusable or inconsistent with the requested configuration."""


def _unusable(path: str, exc: sqlite3.DatabaseError) -> str:
    """The one-line refusal of a ledger path that SQLite cannot use; nothing was written to it."""
    what = "is a folder, not a ledger file" if os.path.isdir(path) else f"is not a usable dpfed ledger ({exc})"
    return (f"the ledger {path} {what}; it was left as it is (point `ledger` at the party's ledger file or restore "
            "it from a backup: a new, empty ledger would forget what was spent)")


class JobConflictError(DpfedError, ValueError):
    """A job id already recorded with other parameters (a job is its id *and* its parameters)."""


class AnswerConflictError(DpfedError, ValueError):
    """An answer the ledger refuses to record: an older round, or an answered round for another task."""


class StoredAnswer(NamedTuple):
    """A job's latest recorded answer: its round, the digests of task and answer, and the answer's bytes."""

    round: int
    task_digest: str
    answer_digest: str
    data: bytes


class BudgetExceededError(DpfedError):
    """A charge would take the owner's total spend over its (epsilon, delta) limit.

    Attributes: ``limit`` = (epsilon, delta), ``spent`` = epsilon spent before the charge,
    ``requested`` = total epsilon the charge would have led to (at the limit's delta).
    """

    def __init__(self, limit: tuple[float, float], spent: float, requested: float,
                 job: str | None = None, *, at_least: bool = False, stated: bool = False) -> None:
        self.limit = (float(limit[0]), float(limit[1]))
        self.spent = float(spent)
        self.requested = float(requested)
        self.job = job
        who = f" for job {job!r}" if job is not None else ""
        what = (f"the job states epsilon {self.requested:.6g}, more than the whole limit" if stated else
                f"requested charge would bring the total to epsilon{'>=' if at_least else '='}{self.requested:.6g}")
        super().__init__(
            f"privacy budget exceeded{who}: limit (epsilon={self.limit[0]:.6g}, "
            f"delta={self.limit[1]:.3g}), spent epsilon={self.spent:.6g}, {what}; nothing was charged")


class BudgetLedger:
    """Durable (epsilon, delta) budget of one data owner, shared by all its jobs.

    ``path`` is an SQLite file (created if missing) or ``":memory:"`` for tests and in-process
    simulations (not durable). The accountant, neighbouring relation and PLD grid are fixed when
    the file is created; reopening with different ones raises :class:`LedgerError`. The grid, unless
    given, is the file's own or, for a new file, ``accounting.pld_grid(epsilon_limit)``: the grid
    :func:`dpfed.core.accounting.calibrate` uses for a plan whose target is that limit, so such a
    plan is charged exactly the epsilon it was calibrated to. The limit is the owner's current
    policy and is enforced by this handle on every charge.
    """

    def __init__(self, path: str | os.PathLike[str], *, epsilon_limit: float, delta_limit: float,
                 accountant: str = "pld", neighbouring: str = "add_remove",
                 pld_discretization: float | None = None,
                 busy_timeout: float = 120.0) -> None:
        if not (epsilon_limit >= 0 and math.isfinite(epsilon_limit)):
            raise ValueError(f"epsilon_limit must be finite and >= 0, got {epsilon_limit!r}")
        if not 0 < delta_limit < 1:
            raise ValueError(f"delta_limit must be in (0, 1), got {delta_limit!r}")
        self.path = os.fspath(path)
        self._grid_given = pld_discretization is not None
        if pld_discretization is None:  # the file's own, when it has one (read in _setup)
            pld_discretization = accounting.pld_grid(float(epsilon_limit))
        accounting.make_accountant(accountant, neighbouring, pld_discretization=pld_discretization)
        self.epsilon_limit = float(epsilon_limit)
        self.delta_limit = float(delta_limit)
        self.accountant = accountant
        self.neighbouring = neighbouring
        self.pld_discretization = float(pld_discretization)
        self._lock = threading.RLock()
        if self.path != ":memory:" and not os.path.isdir(os.path.dirname(os.path.abspath(self.path))):
            raise LedgerError(f"the ledger's folder {os.path.dirname(os.path.abspath(self.path))} does not exist "
                              "(create it, or fix the ledger path)")
        try:
            self._conn: sqlite3.Connection | None = sqlite3.connect(
                self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            raise LedgerError(_unusable(self.path, exc)) from None
        # Cache of the flattened multiset of everything committed, up to row ``_seen_seq``.
        self._counts: Counter[Any] = Counter()
        self._job_counts: dict[str, Counter[Any]] = {}
        self._job_charges: Counter[Any] = Counter()
        self._seen_seq = 0
        self.spend_floor = 0.0
        try:
            self._setup()
        except sqlite3.DatabaseError as exc:  # not a ledger (another file, a damaged one, a folder): said in one line
            self.close()
            raise LedgerError(_unusable(self.path, exc)) from None
        except Exception:
            self.close()
            raise

    # ------------------------------------------------------------------ set-up
    def _setup(self) -> None:
        c = self._db()
        if self.path != ":memory:":
            mode = c.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise LedgerError(f"could not put the ledger in WAL mode (got {mode!r})")
        c.execute("PRAGMA synchronous=FULL")
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            c.execute(
                "CREATE TABLE IF NOT EXISTS charges ("
                " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                " charge_id TEXT NOT NULL UNIQUE,"
                " job TEXT NOT NULL,"
                " event TEXT NOT NULL,"
                " epsilon_after REAL NOT NULL,"
                " epsilon_limit REAL NOT NULL,"
                " delta_limit REAL NOT NULL,"
                " created_at REAL NOT NULL)")
            c.execute("CREATE TABLE IF NOT EXISTS jobs (job TEXT PRIMARY KEY, params_digest TEXT NOT NULL,"
                      " created_at REAL NOT NULL)")
            c.execute("CREATE TABLE IF NOT EXISTS answers (job TEXT NOT NULL, round INTEGER NOT NULL,"
                      " task_digest TEXT NOT NULL, answer_digest TEXT NOT NULL, created_at REAL NOT NULL,"
                      " PRIMARY KEY (job, round))")
            c.execute("CREATE TABLE IF NOT EXISTS job_origin (job TEXT PRIMARY KEY, algorithm TEXT NOT NULL,"
                      " coordinator TEXT NOT NULL, created_at REAL NOT NULL)")  # added later: may be empty
            c.execute("CREATE TABLE IF NOT EXISTS latest_answers (job TEXT PRIMARY KEY, round INTEGER NOT NULL,"
                      " task_digest TEXT NOT NULL, answer_digest TEXT NOT NULL, data BLOB NOT NULL)")
            want = {"schema_version": _SCHEMA_VERSION, "accountant": self.accountant,
                    "neighbouring": self.neighbouring,
                    "pld_discretization": repr(self.pld_discretization)}
            have = dict(c.execute("SELECT key, value FROM meta").fetchall())
            if not self._grid_given and "pld_discretization" in have:
                try:
                    self.pld_discretization = float(have["pld_discretization"])
                except ValueError:
                    raise LedgerError(f"ledger {self.path!r} records an unreadable PLD grid") from None
                want["pld_discretization"] = repr(self.pld_discretization)
            try:  # set by a migration to another accountant (dpfed.core.ledger_migration); absent otherwise
                self.spend_floor = float(have.get("spend_floor", "0.0"))
            except ValueError:
                raise LedgerError(f"ledger {self.path!r} records an unreadable spend floor") from None
            for key, value in want.items():
                if key not in have:
                    c.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))
                elif have[key] != value:
                    raise LedgerError(
                        f"ledger {self.path!r} was created with {key}={have[key]!r}, "
                        f"not {value!r}; open it with the same setting")
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise LedgerError("the ledger is closed")
        return self._conn

    # ------------------------------------------------------------------ state
    def _refresh(self, c: sqlite3.Connection) -> None:
        """Fold rows committed since the last look (by any process) into the cache."""
        rows = c.execute("SELECT seq, job, event FROM charges WHERE seq > ? ORDER BY seq",
                         (self._seen_seq,)).fetchall()
        for seq, job, event_json in rows:
            flat = _flatten_json(event_json)
            self._counts.update(flat)
            self._job_counts.setdefault(job, Counter()).update(flat)
            self._job_charges[job] += 1
            self._seen_seq = seq

    def _refuse_early(self, counts: Counter[Any], job: str | None) -> None:
        """Raise :class:`BudgetExceededError` when the exact PLD of the total would be large (its grid widened by
        :func:`dpfed.core.accountants.guarded_grid`) and a cheap proven lower bound already exceeds the limit
        (:func:`dpfed.core.offer_cost.exceeds`): the exact answer is "exceeds" too, and would take minutes."""
        if self.accountant != "pld" or not counts:
            return
        total = accounting.from_counts(counts)
        grid = self.pld_discretization
        if accounting.guarded_grid(total, self.delta_limit, self.neighbouring, grid) == grid:
            return  # the exact PLD is small: it decides, and the refusal names the exact total
        low = accounting.exceeds(total, self.delta_limit, self.epsilon_limit, neighbouring=self.neighbouring)
        if low is not None:
            raise BudgetExceededError((self.epsilon_limit, self.delta_limit), self._total(self._counts), low, job,
                                      at_least=True)

    def _total(self, counts: Counter[Any]) -> float:
        """The owner's total: the accountant's epsilon of ``counts``, never below the spend recorded when the
        ledger moved to this accountant (``spend_floor``, :mod:`dpfed.core.ledger_migration`)."""
        return max(self._epsilon(counts), self.spend_floor)

    def _epsilon(self, counts: Counter[Any]) -> float:
        if not counts:
            return 0.0
        return accounting.epsilon(
            accounting.from_counts(counts), self.delta_limit, accountant=self.accountant,
            neighbouring=self.neighbouring, pld_discretization=self.pld_discretization)

    # ------------------------------------------------------------------ API
    def charge(self, job: str, event: DpEvent, *, charge_id: str | None = None,
               params_digest: str | None = None, origin: tuple[str, str] | None = None) -> float:
        """Charge ``event`` to ``job``; return the owner's new total epsilon (at delta_limit).

        Atomic and durable: returns only after the charge is committed to disk. Idempotent on
        ``charge_id`` (a repeat returns the current total and charges nothing). Raises
        :class:`BudgetExceededError` (recording nothing) when the limit would be exceeded.
        ``params_digest`` binds the job id to its parameters in the same transaction: a job
        recorded with another digest, or charged before without one, raises
        :class:`JobConflictError` and charges nothing. ``origin`` = (algorithm, coordinator identity)
        is recorded for the data owner's view in the same transaction, the first time the job is seen.
        """
        if not isinstance(job, str) or not job:
            raise ValueError("job must be a non-empty string")
        if charge_id is not None and (not isinstance(charge_id, str) or not charge_id):
            raise ValueError("charge_id must be a non-empty string or None")
        event_json = accounting.event_to_json(event)  # validates the event before any I/O
        new = _flatten_json(event_json)
        cid = charge_id if charge_id is not None else uuid.uuid4().hex
        with self._lock:
            c = self._db()
            c.execute("BEGIN IMMEDIATE")
            try:
                if params_digest is not None:
                    self._bind_job(c, job, params_digest)
                if origin is not None:
                    c.execute("INSERT OR IGNORE INTO job_origin (job, algorithm, coordinator, created_at)"
                              " VALUES (?, ?, ?, ?)", (job, str(origin[0]), str(origin[1]), time.time()))
                if charge_id is not None:
                    row = c.execute("SELECT job, event FROM charges WHERE charge_id = ?",
                                    (cid,)).fetchone()
                    if row is not None:
                        if row[0] != job or _flatten_json(str(row[1])) != new:  # same releases, any spelling
                            raise ValueError(
                                f"charge_id {cid!r} was already used for a different job or event")
                        self._refresh(c)
                        c.execute("COMMIT")
                        return self._total(self._counts)
                self._refresh(c)
                self._refuse_early(self._counts + new, job)
                after = self._total(self._counts + new)
                if not after <= self.epsilon_limit:
                    raise BudgetExceededError((self.epsilon_limit, self.delta_limit),
                                              self._total(self._counts), after, job)
                cur = c.execute(
                    "INSERT INTO charges (charge_id, job, event, epsilon_after, epsilon_limit,"
                    " delta_limit, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (cid, job, event_json, after, self.epsilon_limit, self.delta_limit, time.time()))
                seq = cast(int, cur.lastrowid)  # the row just inserted
                c.execute("COMMIT")
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise
            # Committed: fold it into the cache (rows before it were already folded in).
            self._counts.update(new)
            self._job_counts.setdefault(job, Counter()).update(new)
            self._job_charges[job] += 1
            self._seen_seq = seq
            return after

    @staticmethod
    def _bind_job(c: sqlite3.Connection, job: str, digest: str) -> None:
        """Inside a write transaction: record ``job`` -> ``digest``, or check the recorded one."""
        row = c.execute("SELECT params_digest FROM jobs WHERE job = ?", (job,)).fetchone()
        if row is not None:
            if row[0] != digest:
                raise JobConflictError(f"job id {job!r} was already used with other parameters at this party")
            return
        if c.execute("SELECT 1 FROM charges WHERE job = ? LIMIT 1", (job,)).fetchone() is not None:
            raise JobConflictError(f"job id {job!r} was already charged without a recorded parameters digest")
        c.execute("INSERT INTO jobs (job, params_digest, created_at) VALUES (?, ?, ?)", (job, digest, time.time()))

    def params_digest(self, job: str) -> str | None:
        """The parameters digest recorded for ``job`` (None: the job id is new)."""
        with self._lock:
            row = self._db().execute("SELECT params_digest FROM jobs WHERE job = ?", (job,)).fetchone()
            return None if row is None else str(row[0])

    # ------------------------------------------------------------------ answers
    def record_answer(self, job: str, round: int, task_digest: str, answer_digest: str,
                      data: bytes) -> StoredAnswer:
        """Durably record that ``job`` answered ``round`` (before the answer leaves); return what is stored.

        One exclusive, durable transaction, like a charge. The job must have been charged. Rounds
        only move forward: an older round, or the latest round with another task digest, raises
        :class:`AnswerConflictError`; the latest round with the same task returns the answer
        already stored (the caller sends those bytes, never a new draw). Only the latest round's
        bytes are kept per job; every round's digests are kept.
        """
        if not isinstance(round, int) or isinstance(round, bool) or round < 0:
            raise ValueError("round must be an integer >= 0")
        with self._lock:
            c = self._db()
            c.execute("BEGIN IMMEDIATE")
            try:
                # charges are append-only: a job this handle has seen charged stays charged (no query)
                if not self._job_charges.get(job) and \
                        c.execute("SELECT 1 FROM charges WHERE job = ? LIMIT 1", (job,)).fetchone() is None:
                    raise AnswerConflictError(f"job {job!r} has no charge at this party: nothing may be answered")
                row = c.execute("SELECT round, task_digest FROM latest_answers WHERE job = ?", (job,)).fetchone()
                if row is not None:
                    last_round = int(row[0])
                    if round < last_round:
                        raise AnswerConflictError(f"round {round} is older than the last answered round {last_round}")
                    if round == last_round:
                        if task_digest != str(row[1]):
                            raise AnswerConflictError(f"round {round} was already answered for a different task")
                        row = c.execute("SELECT round, task_digest, answer_digest, data FROM latest_answers"
                                        " WHERE job = ?", (job,)).fetchone()  # the repeat: its stored bytes
                        c.execute("COMMIT")
                        return StoredAnswer(int(row[0]), str(row[1]), str(row[2]), bytes(row[3]))
                c.execute("INSERT INTO answers (job, round, task_digest, answer_digest, created_at)"
                          " VALUES (?, ?, ?, ?, ?)", (job, round, task_digest, answer_digest, time.time()))
                c.execute("INSERT OR REPLACE INTO latest_answers (job, round, task_digest, answer_digest, data)"
                          " VALUES (?, ?, ?, ?, ?)", (job, round, task_digest, answer_digest, sqlite3.Binary(data)))
                c.execute("COMMIT")
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise
            return StoredAnswer(round, task_digest, answer_digest, bytes(data))

    def last_answer(self, job: str, *, with_data: bool = True) -> StoredAnswer | None:
        """The latest answer recorded for ``job`` (``data`` is ``b""`` unless ``with_data``), or None."""
        cols = "round, task_digest, answer_digest" + (", data" if with_data else "")
        with self._lock:
            row = self._db().execute(f"SELECT {cols} FROM latest_answers WHERE job = ?", (job,)).fetchone()
        if row is None:
            return None
        return StoredAnswer(int(row[0]), str(row[1]), str(row[2]), bytes(row[3]) if with_data else b"")

    def answered_rounds(self, job: str) -> list[tuple[int, str, str]]:
        """(round, task digest, answer digest) of every round ``job`` answered, in round order."""
        with self._lock:
            rows = self._db().execute("SELECT round, task_digest, answer_digest FROM answers WHERE job = ?"
                                      " ORDER BY round", (job,)).fetchall()
        return [(int(r), str(t), str(a)) for r, t, a in rows]

    def pragmas(self) -> dict[str, str]:
        """The connection's durability settings (journal mode, synchronous level), for checks."""
        with self._lock:
            c = self._db()
            return {"journal_mode": str(c.execute("PRAGMA journal_mode").fetchone()[0]).lower(),
                    "synchronous": {0: "off", 1: "normal", 2: "full", 3: "extra"}.get(
                        int(c.execute("PRAGMA synchronous").fetchone()[0]), "?")}

    def would_exceed(self, event: DpEvent) -> bool:
        """Dry run: would charging ``event`` now exceed the limit? Changes nothing."""
        new = _flatten_json(accounting.event_to_json(event))
        with self._lock:
            self._refresh(self._db())
            try:
                self._refuse_early(self._counts + new, None)
            except BudgetExceededError:
                return True
            return not self._total(self._counts + new) <= self.epsilon_limit

    def spent(self, job: str | None = None) -> float:
        """Epsilon spent (at ``delta_limit``) by ``job``, or by all jobs together."""
        with self._lock:
            self._refresh(self._db())
            if job is None:
                return self._total(self._counts)
            return self._epsilon(self._job_counts.get(job, Counter()))

    def remaining(self) -> float:
        """Epsilon limit minus the total spent (never negative)."""
        return max(self.epsilon_limit - self.spent(), 0.0)

    def report(self) -> dict[str, Any]:
        """Limit, total and per-job spend (epsilons at ``delta_limit``) as a plain dict."""
        with self._lock:
            self._refresh(self._db())
            jobs = {job: {"epsilon": self._epsilon(self._job_counts[job]),
                          "charges": int(self._job_charges[job])}
                    for job in sorted(self._job_counts)}
            return {
                "limit": {"epsilon": self.epsilon_limit, "delta": self.delta_limit},
                "total": {"epsilon": self._total(self._counts), "delta": self.delta_limit,
                          "charges": int(sum(self._job_charges.values()))},
                "jobs": jobs,
                "accountant": self.accountant,
                "neighbouring": self.neighbouring,
            }

    def history(self) -> dict[str, list[dict[str, Any]]]:
        """Every charge (commit order; with its job's parameters digest and origin when recorded) and every
        answered round's digests (``answers``), as plain rows for the data owner's view. Reads only."""
        with self._lock:
            c = self._db()
            charges = c.execute(
                "SELECT c.seq, c.charge_id, c.job, c.event, c.epsilon_after, c.epsilon_limit, c.delta_limit,"
                " c.created_at, j.params_digest, o.algorithm, o.coordinator FROM charges c"
                " LEFT JOIN jobs j ON j.job = c.job LEFT JOIN job_origin o ON o.job = c.job ORDER BY c.seq").fetchall()
            answers = c.execute("SELECT job, round, task_digest, answer_digest, created_at FROM answers"
                                " ORDER BY created_at, job, round").fetchall()
        keys = ("seq", "charge_id", "job", "event", "epsilon_after", "epsilon_limit", "delta_limit", "created_at",
                "params_digest", "algorithm", "coordinator")
        return {"charges": [dict(zip(keys, row, strict=True)) for row in charges],
                "answers": [dict(zip(("job", "round", "task_digest", "answer_digest", "created_at"), row, strict=True))
                            for row in answers]}

    def releases(self) -> tuple[Counter[Any], int]:
        """(every committed release as a multiset of event JSON -> count, the last charge's sequence number)."""
        with self._lock:
            self._refresh(self._db())
            return Counter(self._counts), self._seen_seq

    def charge_ids(self, job: str | None = None) -> list[str]:
        """Charge ids recorded (in commit order), for one job or all."""
        with self._lock:
            c = self._db()
            if job is None:
                rows = c.execute("SELECT charge_id FROM charges ORDER BY seq").fetchall()
            else:
                rows = c.execute("SELECT charge_id FROM charges WHERE job = ? ORDER BY seq",
                                 (job,)).fetchall()
            return [r[0] for r in rows]

    def close(self) -> None:
        """Close the database handle (idempotent)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "BudgetLedger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"BudgetLedger({self.path!r}, epsilon_limit={self.epsilon_limit}, "
                f"delta_limit={self.delta_limit}, accountant={self.accountant!r})")


_FLAT_CACHE: dict[str, Counter[Any]] = {}


def _flatten_json(event_json: str) -> Counter[Any]:
    """Cached :func:`accounting.flatten` of one stored event."""
    flat = _FLAT_CACHE.get(event_json)
    if flat is None:
        flat = accounting.flatten([accounting.event_from_json(event_json)])
        if len(_FLAT_CACHE) < 4096:
            _FLAT_CACHE[event_json] = flat
    return Counter(flat)
