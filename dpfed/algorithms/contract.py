"""The contract between an algorithm and the federation layer (no networking here).

A job runs as a sequence of tasks. The coordinator half (:class:`CoordinatorAlgorithm`) decides each
task (public parameters plus public broadcast arrays, e.g. the current model), every party half
(:class:`PartyAlgorithm`) answers it from its own records, and the coordinator absorbs the answers
(sums them, steps the model). This is TF Privacy's DPQuery split (preprocess, accumulate, merge,
noise) made the unit of distribution, so both halves read side by side in one module.

Privacy is decided by the party: before it answers anything for a job it computes the job's whole
spend from the job's public parameters (:meth:`PartyAlgorithm.job_event`), charges it durably to its
own ledger, and refuses the job if that would exceed its limit. Afterwards it answers only tasks that
lie within the plan it charged (:meth:`PartyAlgorithm.check_task`). The same halves run in-process
(:mod:`dpfed.simulation`) and over gRPC (``party``/``coordinator``), so what is tested here is what
runs in deployment.
"""
from __future__ import annotations

import argparse
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Sequence

import numpy as np
from dp_accounting import DpEvent

from dpfed.algorithms.secure_noise import is_secure
from dpfed.core.errors import TaskRejected
from dpfed.core.names import check_job_id
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Schema

if TYPE_CHECKING:
    from dpfed.algorithms.params import ParamTable

__all__ = ["JobSpec", "Task", "Answer", "Aggregate", "Released", "TaskRejected", "PartyAlgorithm",
           "CoordinatorAlgorithm", "Algorithm", "sum_combine", "stack_combine", "is_builtin", "released_arrays",
           "jsonable"]

Answer = dict[str, np.ndarray]


@dataclass(frozen=True)
class JobSpec:
    """What a job is, all public: id, algorithm name, parameters (JSON values) and data schema.

    ``params`` always holds ``epsilon`` and ``delta`` (the per-party target of the whole job) and the
    algorithm's options; it is what a party reads to compute its spend.
    """

    job_id: str
    algorithm: str
    params: Mapping[str, Any]
    schema: Schema

    def __post_init__(self) -> None:
        check_job_id(self.job_id)  # one rule for names (dpfed.core.names): no NUL, newline, ...
        eps = self.params.get("epsilon")
        if not isinstance(eps, (int, float)) or not eps > 0 or eps != eps or eps == float("inf"):
            raise ValueError("job params need a finite epsilon > 0")
        d = self.params.get("delta", 0.0)
        if not isinstance(d, (int, float)) or not 0.0 <= d < 1.0:
            raise ValueError("job params need 0 <= delta < 1")

    @property
    def epsilon(self) -> float:
        return float(self.params["epsilon"])

    @property
    def delta(self) -> float:
        return float(self.params.get("delta", 0.0))

    def to_json(self) -> str:
        return json.dumps({"job_id": self.job_id, "algorithm": self.algorithm, "params": dict(self.params),
                           "schema": self.schema.to_dict()}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "JobSpec":
        d = json.loads(text)
        return cls(str(d["job_id"]), str(d["algorithm"]), dict(d["params"]), Schema.from_dict(d["schema"]))


@dataclass(frozen=True)
class Task:
    """One request to every party: ``round`` counts from 0 and increases by one per task."""

    job_id: str
    round: int
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Released:
    """A party's answer together with the privacy events of the releases it holds.

    ``PartyAlgorithm.answer`` may return one instead of a bare :data:`Answer`; the party session
    then checks, generically, that ``events`` lie within the plan it charged for the task
    (:meth:`PartyAlgorithm.task_event`) before the bytes leave.
    """

    arrays: Answer
    events: tuple[DpEvent, ...] = ()


@dataclass(frozen=True)
class Aggregate:
    """Answers merged by an algorithm's ``combine``: the arrays and the parties they came from.

    A single party's answer is ``Aggregate(answer, (name,))``. ``parties`` lists the contributors
    in the order of any per-party rows the arrays hold (see :func:`stack_combine`).
    """

    arrays: Answer
    parties: tuple[str, ...]


def _checked_arrays(parts: Sequence[Aggregate]) -> list[str]:
    if not parts:
        raise ValueError("nothing to combine")
    keys = sorted(parts[0].arrays)
    seen: set[str] = set()
    for part in parts:
        if sorted(part.arrays) != keys:
            raise ValueError(f"answers disagree on their arrays: {sorted(part.arrays)} vs {keys}")
        overlap = seen.intersection(part.parties)
        if overlap:
            raise ValueError(f"party {sorted(overlap)[0]!r} would be counted twice")
        seen.update(part.parties)
        for k in keys:
            a = np.asarray(part.arrays[k])
            if a.dtype.kind not in "biuf":
                raise ValueError(f"array {k!r} has dtype {a.dtype}; answers are real or integer arrays")
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                raise ValueError(f"array {k!r} holds non-finite values")
    return keys


def sum_combine(task: "Task", parts: Sequence[Aggregate]) -> Aggregate:
    """The default ``combine``: the element-wise sum of every array (associative and commutative, so
    it may run in a tree of workers or under secure aggregation). Integer arrays stay int64."""
    keys = _checked_arrays(parts)
    out: Answer = {}
    for k in keys:
        arrs = [np.asarray(p.arrays[k]) for p in parts]
        shape = arrs[0].shape
        if any(a.shape != shape for a in arrs):
            raise ValueError(f"array {k!r} has different shapes across answers")
        dtype = np.int64 if all(a.dtype.kind in "biu" for a in arrs) else np.float64
        total = np.zeros(shape, dtype)
        for a in arrs:
            total += a.astype(dtype, copy=False)
        out[k] = total
    return Aggregate(out, tuple(sorted(n for p in parts for n in p.parties)))


def stack_combine(task: "Task", parts: Sequence[Aggregate]) -> Aggregate:
    """``combine`` for answers kept per party (e.g. k-means' released centers): every party's arrays
    carry a leading axis of length 1, and parts are concatenated along it, rows in the order of
    ``Aggregate.parties`` (associative, so it may run in a tree)."""
    keys = _checked_arrays(parts)
    out: Answer = {}
    for k in keys:
        arrs = [np.asarray(p.arrays[k]) for p in parts]
        if any(a.ndim == 0 or a.shape[0] != len(p.parties) or a.shape[1:] != arrs[0].shape[1:]
               for a, p in zip(arrs, parts)):
            raise ValueError(f"array {k!r} needs one row per party and equal row shapes")
        out[k] = np.concatenate(arrs)
    return Aggregate(out, tuple(n for p in parts for n in p.parties))


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy arrays and scalars turned into JSON values (task parameters, summaries)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


class PartyAlgorithm(ABC):
    """The party half: spend from public parameters, then clipped and noised answers (the plain contract; a
    release under distributed noise is :class:`dpfed.algorithms.secure_release.SecureRelease`)."""

    #: True only on dpfed's own party halves (:func:`is_builtin`: strict release checking). Not inherited: a
    #: subclass is builtin only when its own class body says so, so a plugin deriving from one is not.
    builtin: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "builtin" not in cls.__dict__:
            cls.builtin = False

    @abstractmethod
    def job_event(self, spec: JobSpec) -> DpEvent:
        """The whole job's privacy cost at this party, computed from ``spec`` alone (never from data)."""

    @abstractmethod
    def check_task(self, spec: JobSpec, task: Task) -> None:
        """Raise :class:`TaskRejected` unless ``task`` lies within the plan that ``job_event`` charged."""

    @abstractmethod
    def answer(self, spec: JobSpec, task: Task, X: np.ndarray, y: np.ndarray | None,
               rng: SecureRNG) -> Answer | Released:
        """Compute the task's release from local records (already validated against ``spec.schema``)."""

    def task_event(self, spec: JobSpec, task: Task) -> DpEvent | None:
        """The part of the charged plan that answering ``task`` may spend (None: not declared).

        When declared, the events an answer reports (:class:`Released`) must not exceed it, and the
        composition of every round's ``task_event`` is the job's ``job_event``.
        """
        return None


def is_builtin(half: object) -> bool:
    """True for dpfed's own algorithms (``builtin = True`` in their class), which must report their releases
    (strict checking); a third-party plugin is not builtin."""
    return bool(getattr(type(half), "builtin", False))


def released_arrays(half: PartyAlgorithm, task: Task, out: Answer | Released, planned: DpEvent | None) -> Answer:
    """The arrays of ``out`` once its releases are checked against the round's planned event.

    Every event a :class:`Released` reports must be covered by its own part of ``planned``
    (:func:`dpfed.core.accounting.within`); dpfed's built-in algorithms must return
    :class:`Released` and declare ``task_event`` (a bare answer from them is a bug). Raises
    :class:`TaskRejected` with a public reason; nothing of ``out`` may leave then.
    """
    from dpfed.core import accounting

    if is_builtin(half) and (not isinstance(out, Released) or planned is None):
        raise TaskRejected(f"internal error: {type(half).__name__} answered round {task.round} without "
                           "reporting its releases against a planned event; nothing was sent")
    if not isinstance(out, Released):
        return out
    if planned is not None:
        extra = accounting.within(out.events, planned)
        if extra:
            raise TaskRejected(f"internal error: the answer to round {task.round} would spend outside the "
                               f"charged plan ({len(extra)} unplanned release(s)); nothing was sent")
    return out.arrays


class CoordinatorAlgorithm(ABC):
    """The coordinator half: issues tasks, aggregates answers (post-processing only), builds the model."""

    @abstractmethod
    def next_task(self) -> Task | None:
        """The next task, or None when the job is finished."""

    @abstractmethod
    def absorb(self, task: Task, combined: Aggregate) -> None:
        """Take the parties' answers to ``task``, merged by the algorithm's ``combine``."""

    @property
    @abstractmethod
    def progress(self) -> float:
        """Fraction of the job done, in [0, 1]."""

    @abstractmethod
    def model(self) -> dict[str, np.ndarray]:
        """The trained model as named arrays (saved with ``np.savez``; includes ``algorithm``)."""

    def summary(self) -> dict[str, Any]:
        """Extra JSON-able facts for reports (e.g. ``noise_multiplier``)."""
        return {}


@dataclass(frozen=True)
class Algorithm:
    """A registry entry: the two halves, evaluation, and the algorithm's command-line options."""

    name: str
    party: Callable[[], PartyAlgorithm]
    coordinator: Callable[[JobSpec, Sequence[str]], CoordinatorAlgorithm]
    evaluate: Callable[[Mapping[str, np.ndarray], np.ndarray, np.ndarray | None, Schema], dict[str, float]]
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    params_from_args: Callable[[argparse.Namespace], dict[str, Any]] | None = None
    default_delta: float = 1e-6
    needs_labels: bool = True
    #: What the labels are (when ``needs_labels``): "classes" (a classifier), "numeric" (a regression target
    #: with public bounds in the schema) or "any"; a schema of the other kind is refused in one line.
    label_kind: str = "classes"
    #: How answers merge before ``absorb`` (associative: it may run in a tree or under secure aggregation).
    combine: Callable[[Task, Sequence[Aggregate]], Aggregate] = sum_combine
    #: The job parameters' table (:func:`dpfed.algorithms.params.table_for`); None: the ``PARAMS`` of the
    #: party half's module (or a package above it), else the common epsilon/delta table.
    params: "ParamTable | None" = None
    #: The party half under distributed noise with secure aggregation: a :class:`PartyAlgorithm` that also
    #: implements :class:`dpfed.algorithms.secure_release.SecureRelease`; None: no secure release.
    secure: Callable[[], PartyAlgorithm] | None = None
    #: The scikit-learn-style estimator a model file loads into, as "module:Class"; the class has a
    #: ``from_model(model, schema, params)`` classmethod (:mod:`dpfed.algorithms.model_file`). None: no loader.
    estimator: str | None = None

    def party_for(self, params: Mapping[str, Any]) -> PartyAlgorithm:
        """The party half of a job with ``params``, chosen once: the secure half for distributed noise under
        secure aggregation, else the plain one (which may still split its noise for a simulation)."""
        if self.secure is not None and is_secure(params):
            return self.secure()
        return self.party()

    def needs_secure_aggregation(self, params: Mapping[str, Any]) -> bool:
        """True when a job's answers are private against the coordinator only under secure aggregation
        (distributed noise: each answer carries one share). Such a job runs under SecAgg when its params say
        ``secure_aggregation``; otherwise a party accepts it only in a simulation."""
        return self.secure is not None and params.get("noise", "local") == "distributed"
