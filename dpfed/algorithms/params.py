"""Every algorithm's job parameters declared in one place, and the one validation of them.

Each algorithm module declares ``PARAMS`` (a :class:`ParamTable`, or a dict of them by algorithm
name): every parameter's type, default, allowed range or choices, and a resource cap where the
range alone would allow a plan that is expensive to compute (steps, iterations, prototypes), plus an
optional cross-check over the whole set (e.g. DP-SGD steps = epochs / sampling rate, a memory
estimate from the schema). :func:`validate` is what the CLI (``dpfed simulate``, ``dpfed job
submit``), the coordinator's ``SubmitJob`` and the party use, so an accepted parameter set always
gives a plan that is cheap to compute; anything else is refused with :class:`TaskRejected` carrying
ONE line that names the parameter and the allowed range.

Parameters are public (they describe the job, never the records), so echoing them is fine.
"""
from __future__ import annotations

import argparse
import importlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from dpfed.core.errors import TaskRejected

__all__ = ["Param", "ParamTable", "validate", "check_label_kind", "table_for", "arg_type", "EPSILON", "delta_param", "noise_param",
           "EPSILON_MIN", "EPSILON_MAX", "DELTA_MAX", "MEMORY_CAP_BYTES", "AlgorithmEntry"]

#: Smallest and largest accepted job epsilon: below 1e-3 nothing useful is learnt and the accountants'
#: grids dominate the spend; above 100 calibration leaves the range where PLD is cheap and exact.
EPSILON_MIN = 1e-3
EPSILON_MAX = 100.0
#: Largest accepted job delta, and why (in every refusal): delta is the probability that the guarantee fails
#: outright, so it must lie far below 1/n (Dwork & Roth 2014, Sec. 2.3); above it a party's decision would also
#: build PLDs of millions of points (issue 24 item 5: seconds per offer, 20 s near delta = 1).
DELTA_MAX = 1e-3
DELTA_REASON = ("delta is the chance the guarantee fails outright: publishing the whole data set with probability "
                "delta is (0, delta)-DP, so delta must lie far below 1 / records (Dwork & Roth 2014, Sec. 2.3)")
#: Upper bound on the estimated working memory of one party's answer (bytes).
MEMORY_CAP_BYTES = 2 << 30


@dataclass(frozen=True)
class Param:
    """One job parameter: ``type`` is int, float, str, bool or list; ``lo``/``hi`` bound numbers
    (``lo_open``/``hi_open`` exclude the end); ``choices`` lists the allowed values; ``cap`` is a
    resource cap (an upper bound set by cost, not meaning); ``optional``: None is allowed."""

    name: str
    type: type
    default: Any
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple[Any, ...] | None = None
    cap: float | None = None
    help: str = ""
    optional: bool = False
    reason: str = ""  # why the range is what it is, said in every refusal

    def range_text(self) -> str:
        """The allowed values in one phrase, e.g. ``(0, 1]`` or ``one of sgd, adam``."""
        if self.choices is not None:
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.type is bool:
            return "true or false"
        if self.type is str:
            return "a string"
        if self.type is list:
            return "a list"
        kind = "an integer" if self.type is int else "a finite number"
        hi = self.upper
        if self.lo is None and hi is None:
            return kind
        lo_s = "-inf" if self.lo is None else _num(self.lo)
        hi_s = "inf" if hi is None else _num(hi)
        left = "(" if self.lo_open or self.lo is None else "["
        right = ")" if (self.hi_open and (self.cap is None or (self.hi is not None and self.hi <= self.cap))) \
            or hi is None else "]"
        text = f"{kind} in {left}{lo_s}, {hi_s}{right}"
        if self.cap is not None and (self.hi is None or self.cap < self.hi):
            text += " (a resource cap)"
        return text

    @property
    def upper(self) -> float | None:
        if self.cap is None:
            return self.hi
        return self.cap if self.hi is None else min(self.hi, self.cap)

    def check(self, value: Any, algorithm: str = "") -> Any:
        """The value normalised to ``type``, or :class:`TaskRejected` naming the parameter and range."""
        where = f"{algorithm} parameter {self.name!r}" if algorithm else f"parameter {self.name!r}"
        why = f" ({self.reason})" if self.reason else ""
        bad = TaskRejected(f"{where} must be {self.range_text()}, got {_show(value)}{why}")
        if value is None:
            if self.optional:
                return None
            raise bad
        if self.choices is not None:
            if value not in self.choices or isinstance(value, bool) != isinstance(self.choices[0], bool):
                raise bad
            return value
        if self.type is bool:
            if not isinstance(value, bool):
                raise bad
            return value
        if self.type is str:
            if not isinstance(value, str):
                raise bad
            return value
        if self.type is list:
            if not isinstance(value, (list, tuple)):
                raise bad
            return list(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        if self.type is int:
            if isinstance(value, float):
                if not (math.isfinite(value) and value == int(value)):
                    raise bad
                value = int(value)
        else:
            value = float(value)
            if not math.isfinite(value):
                raise bad
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            raise bad
        hi = self.upper
        if hi is not None and (value > hi or (self.hi_open and hi == self.hi and value == hi)):
            raise bad
        return value


@dataclass(frozen=True)
class ParamTable:
    """An algorithm's parameters and an optional check of the whole set (``check(params, schema)``
    raises :class:`TaskRejected`; ``schema`` may be None when the caller has none yet)."""

    params: tuple[Param, ...]
    check: Callable[[dict[str, Any], Any], None] | None = None
    #: keys accepted without a declaration (filled in by the system, e.g. a calibrated value)
    extra: tuple[str, ...] = field(default=())
    #: accept undeclared keys as they are (the table of a plugin that declares nothing)
    open: bool = False

    def validate(self, params: Mapping[str, Any], schema: Any = None, name: str = "job") -> dict[str, Any]:
        """``params`` normalised (an integral float for an int parameter becomes an int), defaults filled
        in (None defaults left out), unknown keys refused; with ``schema`` (a
        :class:`dpfed.data.schema.Schema`) also the schema-dependent caps (dimension, memory)."""
        if not isinstance(params, Mapping):
            raise TaskRejected(f"{name} parameters must be a JSON object")
        known = {p.name for p in self.params}
        unknown = [] if self.open else sorted(str(k) for k in params if k not in known and k not in self.extra)
        if unknown:
            raise TaskRejected(f"{name} has no parameter {_show(unknown[0])}; known: {', '.join(sorted(known))}")
        out: dict[str, Any] = {}
        for p in self.params:
            if p.name in params:
                out[p.name] = p.check(params[p.name], name)
            elif p.default is None and not p.optional:
                raise TaskRejected(f"{name} parameter {p.name!r} is required: {p.range_text()}")
            elif p.default is not None:
                out[p.name] = p.default
        for k in params:
            if k not in known:
                out[k] = params[k]
        if self.check is not None:
            self.check(out, schema)
        return out

    def get(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _show(value: Any) -> str:
    """A parameter value for an error message, one line and short."""
    text = repr(value)
    return text if len(text) <= 40 and "\n" not in text else text[:37].replace("\n", " ") + "..."


#: The job's per-party epsilon; every algorithm's table starts with it.
EPSILON = Param("epsilon", float, None, lo=EPSILON_MIN, hi=EPSILON_MAX,
                help="per-party privacy budget of the whole job")


def delta_param(default: float, positive: bool = False) -> Param:
    """The job's delta: [0, DELTA_MAX], or (0, DELTA_MAX] where the algorithm needs delta > 0."""
    return Param("delta", float, default, lo=0.0, lo_open=positive, hi=DELTA_MAX,
                 help="per-party delta of the whole job", reason=DELTA_REASON)


def noise_param(help: str = "local: every party adds the full noise (private against the coordinator on its "
                "own); distributed: each party adds a discrete share, only the secure-aggregation sum carries "
                "the central noise") -> Param:
    """Noise placement, ``--noise local|distributed`` (distributed runs under secure aggregation)."""
    return Param("noise", str, "local", choices=("local", "distributed"), help=help)


_COMMON = ParamTable((EPSILON, delta_param(0.0)), open=True)


class AlgorithmEntry(Protocol):
    """What :func:`table_for` reads of a :class:`dpfed.algorithms.contract.Algorithm` (named structurally so
    that this module, below the contract, imports nothing of it)."""

    @property
    def name(self) -> str: ...

    @property
    def party(self) -> Callable[[], Any]: ...

    @property
    def params(self) -> "ParamTable | None": ...


def table_for(algorithm: AlgorithmEntry) -> ParamTable:
    """The parameter table of ``algorithm`` (an :class:`~dpfed.algorithms.contract.Algorithm` entry, e.g.
    from :func:`dpfed.algorithms.registry.get_algorithm`): its ``params``, else the ``PARAMS`` of the module
    defining its party half or of its package (a plugin's), else the common epsilon/delta table."""
    if algorithm.params is not None:
        return algorithm.params
    module = algorithm.party.__module__
    for name in (module, module.rpartition(".")[0]):
        table = getattr(importlib.import_module(name), "PARAMS", None) if name else None
        if isinstance(table, Mapping):
            table = table.get(algorithm.name)
        if isinstance(table, ParamTable):
            return table
    return _COMMON


def validate(algorithm: AlgorithmEntry, params: Mapping[str, Any], schema: Any = None) -> dict[str, Any]:
    """``params`` checked against ``algorithm``'s table (an ``Algorithm`` entry): see
    :meth:`ParamTable.validate`. Raises :class:`TaskRejected` with one line naming the parameter and
    its range. With ``schema``, also the label kind: a classifier refuses a regression target and a regression
    learner a schema without one (:func:`check_label_kind`)."""
    if schema is not None:
        check_label_kind(algorithm, schema)
    return table_for(algorithm).validate(params, schema, algorithm.name)


def check_label_kind(algorithm: AlgorithmEntry, schema: Any) -> None:
    """One line when the schema's label (``schema.task``) is not what the learner fits: a classifier
    (``label_kind`` "classes") on a numeric regression target, or a regressor ("numeric") on class labels."""
    kind, task = getattr(algorithm, "label_kind", "classes"), getattr(schema, "task", "classification")
    if not getattr(algorithm, "needs_labels", True) or kind == "any":
        return
    if kind == "classes" and task == "regression":
        raise TaskRejected(f"{algorithm.name} is a classifier, but the schema's label {schema.label!r} is a numeric "
                           "regression target; give a schema with label classes (n_classes) or use linear-regression")
    if kind == "numeric" and task != "regression":
        raise TaskRejected(f"{algorithm.name} fits a numeric target, but the schema has {schema.n_classes} label "
                           "classes and no regression target; declare \"target\": {\"name\", \"lower\", \"upper\"}")


def arg_type(table: ParamTable, name: str) -> Callable[[str], Any]:
    """An argparse ``type=`` function parsing a command-line value of parameter ``name`` and checking
    it against the table (argparse then prints one line naming the option and the range)."""
    param = table.get(name)

    def parse(text: str) -> Any:
        try:
            value: Any = int(text) if param.type is int else float(text)
        except ValueError:
            try:
                value = float(text) if param.type is int else None
            except ValueError:
                value = None
            if value is None:
                raise argparse.ArgumentTypeError(f"must be {param.range_text()}, got {text!r}") from None
        try:
            return param.check(value)
        except TaskRejected:
            raise argparse.ArgumentTypeError(f"must be {param.range_text()}, got {text!r}") from None

    parse.__name__ = param.name  # argparse names the type in "invalid NAME value"
    return parse


def check_product(name: str, value: float, cap: float, what: str, parts: Sequence[str]) -> None:
    """Refuse when a derived quantity exceeds its cap, naming the parameters it comes from."""
    if not value <= cap:
        raise TaskRejected(f"{what} = {_num(float(value))} exceeds the cap {_num(float(cap))}; "
                           f"lower {' or '.join(parts)}" + (f" ({name})" if name else ""))
