"""Load a party's records (CSV or .npz) and check them against its declared schema.

Errors name files, arrays, columns and counts, never record values (:class:`DataValidationError`):
a value read from the file is never formatted into a message, so it cannot reach a log or a
traceback either.
CSV: a header row with the schema's feature names (any order) and, for labelled data, the
label column (``schema.label``; without it the records are unlabelled); every cell a number
(categorical features as integer codes, an empty cell is missing); every row exactly as many
fields as the header; at least one record.
NPZ: arrays ``X`` and ``y`` (or ``X_train``/``y_train``), optional ``feature_names`` which must
then match the schema's names; real (bool, integer or float) dtypes only, integer labels.
Caps: the file's size and, for ``.npz``, the decompressed size of its arrays (checked from the
zip directory before anything is decompressed) at most ``max_bytes``; at most ``max_rows`` records.
"""
from __future__ import annotations

import csv
import io
import os
import zipfile
from pathlib import Path

import numpy as np

from dpfed.data.schema import DataValidationError, Schema

__all__ = ["load_table", "load_and_validate", "read_npz", "check_real", "read_csv_rows", "DEFAULT_MAX_BYTES",
           "DEFAULT_MAX_ROWS"]

#: Default caps: a data file (or an .npz's decompressed arrays) of at most 512 MiB, 10^8 records.
DEFAULT_MAX_BYTES = 1 << 29
DEFAULT_MAX_ROWS = 100_000_000


def _kind_name(dtype: np.dtype) -> str:
    return {"c": "complex", "O": "object", "U": "string", "S": "bytes", "V": "structured", "M": "datetime",
            "m": "timedelta"}.get(dtype.kind, str(dtype))


def check_real(path: str | os.PathLike, what: str, a: np.ndarray, *, integer: bool = False) -> None:
    """Refuse arrays that are not real numbers (complex, object, strings, ...) or, for labels, not
    integer codes, by dtype alone (no value is looked at)."""
    ok = "biu" if integer else "biuf"
    if a.dtype.kind not in ok:
        want = "integer class codes 0..k-1 (map class names to codes)" if integer else "real numbers"
        raise DataValidationError(f"{path}: {what} holds {_kind_name(a.dtype)} values ({a.dtype.kind!r} dtype); "
                                  f"expected {want}")


def read_npz(path: str | os.PathLike, *, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file, read without pickles, after checking the zip directory: the
    decompressed total at most ``max_bytes``. Any unreadable file is one :class:`DataValidationError`
    naming the file and the reason (never numpy's advice to load pickles)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size == 0:
            raise DataValidationError(f"{p}: empty file (0 bytes), not an .npz archive")
        with zipfile.ZipFile(p) as zf:
            infos = [i for i in zf.infolist() if not i.is_dir()]
            total = sum(i.file_size for i in infos)
            if total > max_bytes:
                raise DataValidationError(f"{p}: its {len(infos)} array(s) decompress to {total} bytes, more than "
                                          f"the cap of {max_bytes} bytes (max_bytes)")
            out: dict[str, np.ndarray] = {}
            for info in infos:
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                try:
                    with zf.open(info) as fh:
                        data = fh.read(info.file_size + 1)
                    if len(data) > info.file_size:
                        raise DataValidationError(f"{p}: array {name!r} is larger than its zip entry declares")
                    out[name] = np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
                except DataValidationError:
                    raise
                except ValueError as exc:
                    if "pickle" in str(exc).lower() or "object" in str(exc).lower():
                        raise DataValidationError(f"{p}: array {name!r} holds Python objects (e.g. strings); "
                                                  "store numbers only") from None
                    raise DataValidationError(f"{p}: array {name!r} is not a valid .npy array "
                                              f"({type(exc).__name__})") from None
                except (zipfile.BadZipFile, EOFError, OSError, RuntimeError, NotImplementedError,
                        UnicodeDecodeError) as exc:
                    raise DataValidationError(f"{p}: array {name!r} cannot be decompressed "
                                              f"({type(exc).__name__}: the file is truncated or corrupt)") from None
            return out
    except DataValidationError:
        raise
    except FileNotFoundError:
        raise DataValidationError(f"data file not found: {p}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as exc:
        raise DataValidationError(f"{p}: not a readable .npz archive ({type(exc).__name__}: the file is "
                                  "truncated, corrupt or not a zip file)") from None


def read_csv_rows(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> list[list[str]]:
    """The non-empty rows of a UTF-8 CSV file of at most ``max_bytes`` (header included)."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise DataValidationError(f"{path}: {size} bytes, more than the cap of {max_bytes} bytes (max_bytes)")
        with open(path, newline="", encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise DataValidationError(f"{path}: not a UTF-8 text CSV file (undecodable byte at offset "
                                  f"{exc.start})") from None
    if "\x00" in text:
        raise DataValidationError(f"{path}: not a text CSV file (it holds NUL bytes)")
    try:
        return [row for row in csv.reader(io.StringIO(text)) if row]
    except csv.Error as exc:
        raise DataValidationError(f"{path}: malformed CSV ({type(exc).__name__} at line "
                                  f"{getattr(exc, 'line_num', '?')})") from None


def _load_csv(path: Path, schema: Schema, max_bytes: int, max_rows: int
              ) -> tuple[np.ndarray, np.ndarray | None]:
    rows = read_csv_rows(path, max_bytes)
    if not rows:
        raise DataValidationError(f"{path}: empty CSV file (a header row with column names is required)")
    header = [h.strip() for h in rows[0]]
    labelled = schema.labelled and schema.label in header  # without it: unlabelled records
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
    body = rows[1:]
    if not body:
        raise DataValidationError(f"{path}: no records (only a header row)")
    if len(body) > max_rows:
        raise DataValidationError(f"{path}: {len(body)} records, more than the cap of {max_rows} records (max_rows)")
    width = len(header)
    lengths = np.fromiter((len(r) for r in body), dtype=np.int64, count=len(body))
    more, fewer = int((lengths > width).sum()), int((lengths < width).sum())
    if more or fewer:
        raise DataValidationError(f"{path}: {more + fewer} of {len(body)} record(s) do not have {width} fields "
                                  f"({more} with more, {fewer} with fewer)")
    cells = np.char.strip(np.array(body, dtype=str))
    cells[cells == ""] = "nan"  # a missing value: the schema check counts it per column
    raw = np.empty(cells.shape, dtype=np.float64)
    bad: list[str] = []
    for j, name in enumerate(header):
        try:
            raw[:, j] = cells[:, j].astype(np.float64)
        except ValueError:
            n_bad = sum(1 for c in cells[:, j] if not _is_float(c))
            bad.append(f"{name!r}: {n_bad}")
    if bad:
        raise DataValidationError(f"{path}: non-numeric cells (categorical values must be integer codes) in "
                                  f"column(s) {', '.join(bad)}")
    cols = {h: j for j, h in enumerate(header)}
    X = raw[:, [cols[c] for c in schema.names]]
    y = None
    if labelled:
        y = raw[:, cols[schema.label]]
        nonfinite = ~np.isfinite(y)
        if nonfinite.any():
            raise DataValidationError(f"{path}: label column {schema.label!r}: {int(nonfinite.sum())} empty or "
                                      "non-numeric value(s)")
    return X, y


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _load_npz(path: Path, schema: Schema, max_bytes: int, max_rows: int) -> tuple[np.ndarray, np.ndarray | None]:
    z = read_npz(path, max_bytes=max_bytes)
    xk, yk = ("X", "y") if "X" in z else ("X_train", "y_train")
    if xk not in z:
        raise DataValidationError(f"{path}: expected an array 'X' (or 'X_train'); found {', '.join(sorted(z))}")
    if "feature_names" in z:
        if z["feature_names"].dtype.kind not in "US":
            raise DataValidationError(f"{path}: feature_names must be an array of strings")
        names = [str(s) for s in z["feature_names"]]
        if names != schema.names:
            missing = [c for c in schema.names if c not in names]
            extra = [c for c in names if c not in schema.names]
            raise DataValidationError(
                f"{path}: feature_names do not match the schema (missing: {', '.join(missing) or 'none'}; "
                f"unexpected: {', '.join(extra) or 'none'}; the order must be the schema's)")
    X = z[xk]
    check_real(path, f"array {xk!r}", X)
    if X.ndim != 2:
        raise DataValidationError(f"{path}: array {xk!r} must be 2-d (records x features), got {X.ndim}-d")
    if X.shape[0] == 0:
        raise DataValidationError(f"{path}: array {xk!r} holds no records")
    if X.shape[0] > max_rows:
        raise DataValidationError(f"{path}: {X.shape[0]} records, more than the cap of {max_rows} records (max_rows)")
    y = z.get(yk)
    if y is not None:
        check_real(path, f"label array {yk!r}", y, integer=y.dtype.kind != "f")
    return X, y  # no labels: the party refuses jobs that need them


def load_table(path: str | os.PathLike, schema: Schema, *, max_bytes: int = DEFAULT_MAX_BYTES,
               max_rows: int = DEFAULT_MAX_ROWS) -> tuple[np.ndarray, np.ndarray | None]:
    """Read records and labels (labels only when the schema has classes or a regression target); not yet
    validated."""
    p = Path(path)
    if not p.is_file():
        raise DataValidationError(f"data file not found: {p}")
    if p.suffix.lower() == ".csv":
        X, y = _load_csv(p, schema, max_bytes, max_rows)
    elif p.suffix.lower() == ".npz":
        X, y = _load_npz(p, schema, max_bytes, max_rows)
    else:
        raise DataValidationError(f"{p}: unsupported data file type (use .csv or .npz)")
    return X, (y if schema.labelled else None)


def load_and_validate(path: str | os.PathLike, schema: Schema, *, max_bytes: int = DEFAULT_MAX_BYTES,
                      max_rows: int = DEFAULT_MAX_ROWS) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`load_table` then :meth:`Schema.validate`: float64 records and int64 class labels (float64
    regression targets, :meth:`Schema.labels`)."""
    X, y = load_table(path, schema, max_bytes=max_bytes, max_rows=max_rows)
    try:
        Xv = schema.validate(X, y)
    except DataValidationError as exc:
        raise DataValidationError(f"{path}: {exc}") from None
    return Xv, (None if y is None else schema.labels(y))
