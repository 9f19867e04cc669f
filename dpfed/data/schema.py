"""The public schema of a data set: feature types, categorical domains, public bounds, the label.

A schema is declared by the data owner (party config) or by the dataset's publisher, never derived
from the private data: a domain or a bound computed from the records would itself leak them.
:func:`Schema.validate` checks data against it and reports counts and column names, never values.

The label is either ``n_classes`` class codes (classification) or a numeric regression ``target``
with public bounds (``"target": {"name": ..., "lower": ..., "upper": ...}``; :attr:`Schema.task`).
Two public per-column rules (per-record transformations, so they cost no privacy): ``"impute": C``
replaces a missing value (NaN) by the constant C; ``"clip": true`` clamps a numeric value outside
``[lower, upper]`` to the bounds instead of refusing the records. A missing value in a column without
an imputation rule is refused (one line naming the column and the count).
"""
from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dpfed.core.errors import DpfedError

__all__ = ["Feature", "Schema", "DataValidationError", "DataDerivedBoundsWarning", "TASKS"]

Kind = Literal["categorical", "numeric"]
#: What a schema's label is (:attr:`Schema.task`): class codes, a numeric target with public bounds, or none.
TASKS = ("classification", "regression", "unsupervised")


class DataDerivedBoundsWarning(UserWarning):
    """A schema declares bounds marked as computed from the records (not public)."""


class DataValidationError(DpfedError, ValueError):
    """Data does not match its schema. The message names columns and counts, never values."""


@dataclass(frozen=True)
class Feature:
    """One column. Categorical: integer codes ``0..categories-1``. Numeric: public ``[lower, upper]``.

    ``impute``: the public constant that replaces a missing value (NaN) of this column (None: missing
    values are refused). ``clip`` (numeric): values outside the bounds are clamped to them instead of
    refused. Both are public rules applied to each record alone."""

    name: str
    kind: Kind
    categories: int = 0
    lower: float = -math.inf
    upper: float = math.inf
    impute: float | None = None
    clip: bool = False

    def __post_init__(self) -> None:
        if self.kind == "categorical":
            if self.categories < 1:
                raise ValueError(f"categorical feature {self.name!r} needs a domain size >= 1")
            if self.clip:
                raise ValueError(f"categorical feature {self.name!r}: 'clip' applies to numeric columns only")
            ok = self.impute is None or (float(self.impute) == int(self.impute) and 0 <= self.impute < self.categories)
        elif self.kind == "numeric":
            if not (math.isfinite(self.lower) and math.isfinite(self.upper) and self.lower < self.upper):
                raise ValueError(f"numeric feature {self.name!r} needs finite public bounds lower < upper")
            ok = self.impute is None or self.lower <= self.impute <= self.upper
        else:
            raise ValueError(f"feature {self.name!r}: kind must be 'categorical' or 'numeric'")
        if not ok:
            raise ValueError(f"feature {self.name!r}: 'impute' must be a value of the column's public domain "
                             "(a code 0..categories-1, or a number within [lower, upper])")

    def to_dict(self) -> dict[str, Any]:
        """The feature's schema-file entry (``impute`` and ``clip`` only when set)."""
        d: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.kind == "categorical":
            d["categories"] = self.categories
        else:
            d["lower"], d["upper"] = self.lower, self.upper
        if self.impute is not None:
            d["impute"] = self.impute
        if self.clip:
            d["clip"] = True
        return d


def _feature_fields(f: dict[str, Any], where: str) -> dict[str, Any]:
    """The :class:`Feature` fields of a schema-file entry (everything but the name)."""
    clip = f.get("clip", False)
    if not isinstance(clip, bool):
        raise ValueError(f"malformed schema: {where}.clip must be true or false")
    try:
        imp = f.get("impute")
        if isinstance(imp, bool) or (imp is not None and not isinstance(imp, (int, float))):
            raise ValueError("impute")
        return dict(kind=f["kind"], categories=int(f.get("categories", 0)), lower=float(f.get("lower", -math.inf)),
                    upper=float(f.get("upper", math.inf)), impute=None if imp is None else float(imp), clip=clip)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed schema: {where}: missing or wrong field {exc}") from None


@dataclass(frozen=True)
class Schema:
    """Features, number of classes (0 for unlabelled data, e.g. clustering) and class names, or a numeric
    regression ``target`` (a numeric :class:`Feature` with public bounds; then ``n_classes`` is 0 and the
    label column is named after it)."""

    features: tuple[Feature, ...]
    n_classes: int = 0
    class_names: tuple[str, ...] = field(default=())
    label: str = "label"
    target: Feature | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", tuple(self.features))
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise ValueError("feature names must be unique")
        if self.class_names and len(self.class_names) != self.n_classes:
            raise ValueError("class_names must have n_classes entries")
        if self.target is not None:
            if self.target.kind != "numeric":
                raise ValueError("the regression target must be numeric with public bounds lower < upper")
            if self.n_classes:
                raise ValueError("a schema has either label classes (n_classes) or a regression target, not both")
            if self.target.name in names:
                raise ValueError(f"the target {self.target.name!r} is also a feature name")
            object.__setattr__(self, "label", self.target.name)

    @property
    def task(self) -> str:
        """``classification`` (n_classes >= 1), ``regression`` (a numeric target) or ``unsupervised``."""
        return "regression" if self.target is not None else "classification" if self.n_classes else "unsupervised"

    @property
    def labelled(self) -> bool:
        """True when records come with a label: a class code or a regression target value."""
        return self.task != "unsupervised"

    # -- views -------------------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return len(self.features)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.features]

    @property
    def categorical(self) -> np.ndarray:
        """Boolean mask of categorical columns."""
        return np.array([f.kind == "categorical" for f in self.features], dtype=bool)

    @property
    def numeric(self) -> np.ndarray:
        return ~self.categorical

    @property
    def domain_sizes(self) -> np.ndarray:
        """Domain size of each categorical column (in column order of the categorical columns)."""
        return np.array([f.categories for f in self.features if f.kind == "categorical"], dtype=np.int64)

    @property
    def lower(self) -> np.ndarray:
        """Public lower bounds of the numeric columns."""
        return np.array([f.lower for f in self.features if f.kind == "numeric"], dtype=np.float64)

    @property
    def upper(self) -> np.ndarray:
        return np.array([f.upper for f in self.features if f.kind == "numeric"], dtype=np.float64)

    @classmethod
    def numeric_box(cls, d: int, lower: float | Sequence[float], upper: float | Sequence[float],
                    n_classes: int = 0, prefix: str = "x") -> Schema:
        """All-numeric schema with public bounds (scalars or one per column)."""
        lo = np.broadcast_to(np.asarray(lower, dtype=float), (d,))
        hi = np.broadcast_to(np.asarray(upper, dtype=float), (d,))
        feats = tuple(Feature(f"{prefix}{j}", "numeric", lower=float(lo[j]), upper=float(hi[j])) for j in range(d))
        return cls(feats, n_classes=n_classes)

    # -- (de)serialisation: the schema travels in configs and job specs --------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"features": [f.to_dict() for f in self.features], "n_classes": self.n_classes,
                               "class_names": list(self.class_names), "label": self.label}
        if self.target is not None:  # only when set: the dict of every other schema is unchanged
            t = self.target.to_dict()
            del t["kind"]
            out["target"] = t
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Schema:
        """The schema file format (README "Bring your own data"): ``features`` is a list of
        ``{"name", "kind": "numeric", "lower", "upper"}`` or ``{"name", "kind": "categorical",
        "categories"}``; ``name`` is optional (default ``x<column>``), and ``"count": N`` repeats an
        entry for N columns (named ``<name><j>``, default ``x<column>``). ``n_classes`` (0 for
        unlabelled data; default ``len(class_names)``), ``class_names`` and ``label`` (the CSV label
        column, default ``label``) are optional. A bound left as ``null`` is a placeholder to fill in.
        A regression schema has ``"target": {"name", "lower", "upper"}`` (the label column and its public
        bounds; optionally ``"clip": true``) instead of classes. A feature may add ``"impute": CONSTANT``
        (the public value of a missing entry) and, if numeric, ``"clip": true`` (clamp out-of-bound values)."""
        if not isinstance(d, dict) or not isinstance(d.get("features"), list):
            raise ValueError("malformed schema: expected an object with a 'features' list")
        unknown = sorted(set(d) - {"features", "n_classes", "class_names", "label", "target", "comment", "warning"})
        if unknown:
            raise ValueError(f"malformed schema: unknown key {unknown[0]!r} (features, n_classes, class_names, label, "
                             "target)")
        feats: list[Feature] = []
        for i, f in enumerate(d["features"]):
            if not isinstance(f, dict):
                raise ValueError(f"malformed schema: features[{i}] must be an object")
            extra = sorted(set(f) - {"name", "kind", "categories", "lower", "upper", "count", "comment", "impute",
                                     "clip"})
            if extra:
                raise ValueError(f"malformed schema: features[{i}] has unknown key {extra[0]!r} "
                                 "(name, kind, categories, lower, upper, count, impute, clip)")
            count = f.get("count", None)
            if count is not None and not (isinstance(count, int) and not isinstance(count, bool) and count >= 1):
                raise ValueError(f"malformed schema: features[{i}].count must be an integer >= 1")
            for b in ("lower", "upper"):
                if f.get("kind") == "numeric" and f.get(b, 0) is None:
                    raise ValueError(f"schema: features[{i}] ({f.get('name', 'unnamed')}) has a placeholder "
                                     f"{b} bound: fill in its public bound (never one computed from the records)")
            base = _feature_fields(f, f"features[{i}]")
            if count is None:
                feats.append(Feature(name=str(f.get("name", f"x{len(feats)}")), **base))
            else:
                prefix = str(f.get("name", "x"))
                start = 0 if "name" in f else len(feats)
                feats.extend(Feature(name=f"{prefix}{start + j}", **base) for j in range(count))
        names = d.get("class_names", ())
        if not isinstance(names, (list, tuple)):
            raise ValueError("malformed schema: class_names must be a list")
        if "n_classes" in d and d["n_classes"] is None:
            raise ValueError("schema: n_classes is a placeholder (null): declare the number of label classes "
                             "(0 for unlabelled data)")
        if any(isinstance(f, dict) and f.get("comment") == "data-derived" for f in d["features"]):
            warnings.warn("the schema has bounds marked data-derived: a schema is public, and bounds computed "
                          "from the records reveal the extreme records", DataDerivedBoundsWarning, stacklevel=2)
        try:
            n_classes = int(d.get("n_classes", len(names)))
        except (TypeError, ValueError):
            raise ValueError("malformed schema: n_classes must be an integer >= 0") from None
        if n_classes < 0:
            raise ValueError("malformed schema: n_classes must be an integer >= 0")
        target = None
        if d.get("target") is not None:
            t = d["target"]
            if not isinstance(t, dict) or sorted(set(t) - {"name", "kind", "lower", "upper", "clip", "comment"}):
                raise ValueError("malformed schema: target must be an object {\"name\", \"lower\", \"upper\"} "
                                 "(optionally \"clip\": true)")
            if t.get("lower", 0) is None or t.get("upper", 0) is None:
                raise ValueError("schema: the target has a placeholder bound: fill in its public bounds")
            if "lower" not in t or "upper" not in t or t.get("kind", "numeric") != "numeric":
                raise ValueError("schema: the regression target needs public bounds 'lower' and 'upper'")
            target = Feature(name=str(t.get("name", "target")), **_feature_fields({**t, "kind": "numeric"}, "target"))
            if n_classes or names:
                raise ValueError("schema: give either label classes (n_classes, class_names) or a regression target")
        label = target.name if target is not None else str(d.get("label", "label"))
        return cls(tuple(feats), n_classes=n_classes, class_names=tuple(str(c) for c in names), label=label,
                   target=target)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Schema:
        """A schema JSON file; any problem is one :class:`DataValidationError` naming the file."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise DataValidationError(f"schema file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise DataValidationError(f"{path}: cannot read the schema file ({type(exc).__name__})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataValidationError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column "
                                      f"{exc.colno})") from None
        try:
            return cls.from_dict(data)
        except ValueError as exc:
            raise DataValidationError(f"{path}: {exc}") from None

    def to_file_text(self) -> str:
        """The schema as a readable JSON file: one feature per line."""
        d = self.to_dict()
        feats = ",\n".join("    " + json.dumps(f) for f in d["features"])
        keys = ("n_classes", "class_names", "label") + (("target",) if "target" in d else ())
        rest = ",\n".join(f"  {json.dumps(k)}: {json.dumps(d[k])}" for k in keys)
        return "{\n  \"features\": [\n" + feats + "\n  ],\n" + rest + "\n}\n"

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Schema:
        return cls.from_dict(json.loads(text))

    # -- validation ------------------------------------------------------------------------------
    def validate(self, X: np.ndarray, y: np.ndarray | None = None, *, clip_numeric: bool = False) -> np.ndarray:
        """Check ``X`` (and labels ``y``) against the schema; return X as float64.

        Raises :class:`DataValidationError` naming the offending columns with counts of bad rows
        (never the values). With ``clip_numeric`` out-of-bound numeric values are clamped to the
        public bounds instead of rejected (clamping is part of the mechanism, so it is private).
        A column's public rules apply first: ``impute`` fills its missing values (NaN), ``clip`` clamps it.
        """
        X = np.asarray(X)
        if X.ndim != 2:
            raise DataValidationError(f"expected a 2-d array of records, got {X.ndim} dimension(s)")
        if X.shape[1] != self.n_features:
            raise DataValidationError(
                f"expected {self.n_features} columns ({', '.join(self.names)}), got {X.shape[1]}")
        try:
            Xf = X.astype(np.float64)
        except (TypeError, ValueError):
            raise DataValidationError("records are not numeric (categorical values must be integer codes)") from None
        self._apply_rules(Xf)
        problems: list[str] = []
        bad = ~np.isfinite(Xf)
        for j in np.flatnonzero(bad.any(axis=0)):
            n_nan = int(np.isnan(Xf[:, j]).sum())
            why = (f" ({n_nan} missing: the schema gives no imputation rule for this column, \"impute\": CONSTANT)"
                   if n_nan else "")
            problems.append(f"column {self.features[j].name!r}: {int(bad[:, j].sum())} NaN/Inf value(s){why}")
        outside = np.zeros(X.shape[1], dtype=np.int64)  # per column: values outside domain or bounds
        num = self.numeric
        if num.any() and not clip_numeric:  # vectorised over all numeric columns (MNIST: 784 of them)
            cols = Xf[:, num] if not num.all() else Xf
            outside[num] = np.count_nonzero((cols < self.lower) | (cols > self.upper), axis=0)
        for j in np.flatnonzero(~num):
            col = Xf[:, j]
            f = self.features[j]
            outside[j] = np.count_nonzero(np.isfinite(col) & ((col != np.round(col)) | (col < 0)
                                                               | (col >= f.categories)))
        for j in np.flatnonzero(outside):
            f = self.features[j]
            if f.kind == "categorical":
                problems.append(f"column {f.name!r}: {int(outside[j])} value(s) outside the categorical "
                                f"domain of {f.categories} codes")
            else:
                problems.append(f"column {f.name!r}: {int(outside[j])} value(s) outside the public bounds "
                                f"[{f.lower:g}, {f.upper:g}]")
        if y is not None:
            problems += self._label_problems(np.asarray(y), X.shape[0])
        if problems:
            raise DataValidationError(f"data does not match the schema ({X.shape[0]} rows): " + "; ".join(problems))
        if clip_numeric and self.numeric.any():
            num = self.numeric
            Xf[:, num] = np.clip(Xf[:, num], self.lower, self.upper)
        return Xf

    def _apply_rules(self, Xf: np.ndarray) -> None:
        """The columns' public rules, in place: ``impute`` replaces NaN, ``clip`` clamps to the bounds."""
        for j, f in enumerate(self.features):
            if f.impute is not None:
                col = Xf[:, j]
                col[np.isnan(col)] = f.impute
            if f.clip:
                np.clip(Xf[:, j], f.lower, f.upper, out=Xf[:, j])

    def _label_problems(self, y: np.ndarray, n: int) -> list[str]:
        """What is wrong with labels ``y`` (counts, never values): class codes, or target values in bounds."""
        if y.shape != (n,):
            return [f"labels: expected {n} labels, got shape {tuple(y.shape)}"]
        if self.labelled and y.dtype.kind not in "biuf":  # never convert (or echo) e.g. string labels
            what = (f"integer codes 0..{self.n_classes - 1}" if self.n_classes
                    else f"numbers within [{self.target.lower:g}, {self.target.upper:g}]" if self.target else "")
            return [f"labels: {n} value(s) of non-numeric dtype kind {y.dtype.kind!r} (labels are {what})"]
        yf = y.astype(np.float64)
        if self.target is not None:
            t = self.target
            out: list[str] = []
            if np.isnan(yf).any():
                out.append(f"target {t.name!r}: {int(np.isnan(yf).sum())} missing (NaN) value(s)")
            if not t.clip:
                far = np.isfinite(yf) & ((yf < t.lower) | (yf > t.upper)) | np.isinf(yf)
                if far.any():
                    out.append(f"target {t.name!r}: {int(far.sum())} value(s) outside the public bounds "
                               f"[{t.lower:g}, {t.upper:g}]")
            return out
        if self.n_classes:
            wrong = ~np.isfinite(yf) | (yf != np.round(yf)) | (yf < 0) | (yf >= self.n_classes)
            if wrong.any():
                return [f"labels: {int(wrong.sum())} value(s) outside 0..{self.n_classes - 1}"]
        return []

    def labels(self, y: np.ndarray) -> np.ndarray:
        """Labels in the dtype the learners use: int64 class codes, or float64 regression target values
        (clamped to the target's bounds when it declares ``clip``). Validate first (:meth:`validate`)."""
        y = np.asarray(y)
        if self.target is None:
            return y.astype(np.int64)
        yf = y.astype(np.float64)
        return np.clip(yf, self.target.lower, self.target.upper) if self.target.clip else yf
