"""Load a party's records (CSV or .npz) and check them against its declared schema.

Errors name files, columns and counts, never record values (:class:`DataValidationError`).
CSV: a header row with the schema's feature names (any order) and, for labelled data, the
label column (``schema.label``; without it the records are unlabelled); every cell a number
(categorical features as integer codes).
NPZ: arrays ``X`` and ``y`` (or ``X_train``/``y_train``), optional ``feature_names`` which must
then match the schema's names.
"""
from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

from dpfed.data.schema import DataValidationError, Schema

__all__ = ["load_table", "load_and_validate"]


def _load_csv(path: Path, schema: Schema) -> tuple[np.ndarray, np.ndarray | None]:
    with open(path, newline="") as fh:
        header = next(csv.reader(fh), None)
    if not header:
        raise DataValidationError(f"{path}: empty CSV file (a header row with column names is required)")
    header = [h.strip() for h in header]
    labelled = bool(schema.n_classes) and schema.label in header  # without it: unlabelled records
    want = schema.names + ([schema.label] if labelled else [])
    dup = sorted({h for h in header if header.count(h) > 1})
    missing = [c for c in want if c not in header]
    extra = [c for c in header if c not in want]
    if dup or missing or extra:
        parts = []
        if missing:
            parts.append(f"missing column(s): {', '.join(missing)}")
        if extra:
            parts.append(f"unexpected column(s): {', '.join(extra)}")
        if dup:
            parts.append(f"duplicated column(s): {', '.join(dup)}")
        raise DataValidationError(f"{path}: columns do not match the schema: " + "; ".join(parts))
    raw = np.genfromtxt(path, delimiter=",", skip_header=1, dtype=np.float64, invalid_raise=False,
                        usecols=range(len(header)), ndmin=2, loose=True)
    # genfromtxt drops rows with a wrong number of fields (invalid_raise=False) -- count them
    with open(path, newline="") as fh:
        n_rows = sum(1 for row in csv.reader(fh) if row) - 1
    if raw.shape[0] != n_rows:
        raise DataValidationError(f"{path}: {n_rows - raw.shape[0]} row(s) do not have {len(header)} fields")
    cols = {h: j for j, h in enumerate(header)}
    X = raw[:, [cols[c] for c in schema.names]] if raw.size else np.zeros((0, schema.n_features))
    y = None
    if labelled:
        y = raw[:, cols[schema.label]] if raw.size else np.zeros(0)
        bad = ~np.isfinite(y)
        if bad.any():
            raise DataValidationError(f"{path}: label column {schema.label!r}: {int(bad.sum())} empty or "
                                      "non-numeric value(s)")
    return X, y


def _load_npz(path: Path, schema: Schema) -> tuple[np.ndarray, np.ndarray | None]:
    try:
        z = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise DataValidationError(f"{path}: not a readable .npz file ({type(exc).__name__})") from None
    with z:
        xk, yk = ("X", "y") if "X" in z.files else ("X_train", "y_train")
        if xk not in z.files:
            raise DataValidationError(f"{path}: expected an array 'X' (or 'X_train'); found {', '.join(z.files)}")
        if "feature_names" in z.files:
            names = [str(s) for s in z["feature_names"]]
            if names != schema.names:
                missing = [c for c in schema.names if c not in names]
                extra = [c for c in names if c not in schema.names]
                raise DataValidationError(
                    f"{path}: feature_names do not match the schema (missing: {', '.join(missing) or 'none'}; "
                    f"unexpected: {', '.join(extra) or 'none'}; the order must be the schema's)")
        X = z[xk]
        y = z[yk] if yk in z.files else None
    return X, y  # no labels: the party refuses jobs that need them


def load_table(path: str | os.PathLike, schema: Schema) -> tuple[np.ndarray, np.ndarray | None]:
    """Read records and labels (labels only when ``schema.n_classes`` > 0); not yet validated."""
    p = Path(path)
    if not p.exists():
        raise DataValidationError(f"data file not found: {p}")
    if p.suffix.lower() == ".csv":
        X, y = _load_csv(p, schema)
    elif p.suffix.lower() == ".npz":
        X, y = _load_npz(p, schema)
    else:
        raise DataValidationError(f"{p}: unsupported data file type (use .csv or .npz)")
    return X, (y if schema.n_classes else None)


def load_and_validate(path: str | os.PathLike, schema: Schema) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`load_table` then :meth:`Schema.validate`: float64 records and int64 labels."""
    X, y = load_table(path, schema)
    try:
        Xv = schema.validate(X, y)
    except DataValidationError as exc:
        raise DataValidationError(f"{path}: {exc}") from None
    return Xv, (None if y is None else np.asarray(y).astype(np.int64))
