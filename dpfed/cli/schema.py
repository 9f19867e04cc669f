"""``dpfed schema template DATA``: a starting schema file for the data owner to edit.

A schema is public: its bounds and domains are published with every job. The template therefore
leaves numeric bounds as ``null`` placeholders (loading the schema refuses them until they are filled
in) unless ``--derive-bounds`` is given, which writes the records' own minimum and maximum marked as
data-derived, with a warning: publishing them reveals the extreme records. Categorical domains come
from the file's metadata (``is_categorical``/``n_categories``) when it has them.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["add_commands", "template", "parse_bounds"]

_WARNING = ("bounds marked 'data-derived' were computed from the records: a schema is PUBLIC, and publishing "
            "them reveals the most extreme records; replace them with bounds known without looking at the data "
            "(a codebook, a sensor range, 0..255 for pixels)")


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schema", help="write a starting schema file for your data", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ssub = p.add_subparsers(dest="schema_command", metavar="{template}")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    t = ssub.add_parser("template", help="a schema with placeholders from a .npz or .csv file")
    t.add_argument("data", metavar="DATA", help="a .npz (X or X_train, optional metadata) or .csv (header row) file")
    t.add_argument("--label", default=None, metavar="COLUMN",
                   help="CSV: the label column (default 'label' when present; none: unlabelled)")
    t.add_argument("--target", default=None, metavar="COLUMN",
                   help="the label is a numeric regression target (CSV: this column; .npz: y), its public bounds "
                        "left as placeholders (null) to fill in")
    t.add_argument("--bounds", default=None, metavar="LOW:HIGH", help="public bounds for every numeric column")
    t.add_argument("--derive-bounds", action="store_true",
                   help="fill in each numeric column's min and max from the records, marked data-derived (NOT "
                        "public: read the warning)")
    t.add_argument("--out", default=None, metavar="FILE", help="write here (refuses to overwrite) instead of stdout")
    t.set_defaults(func=_cmd_template)


def template(path: str, *, label: str | None = None, bounds: tuple[float, float] | None = None,
             derive: bool = False, target: str | None = None) -> dict[str, Any]:
    """The template as a dict (see the module docstring); ``target``: the label is a numeric regression target of
    that name (its bounds always placeholders: the schema file's ``"target"``)."""
    if target is not None:
        doc = template(path, label=target if Path(path).suffix.lower() == ".csv" else label, bounds=bounds,
                       derive=derive)
        doc.pop("class_names", None)
        doc.update(n_classes=0, label=target, target={"name": target, "lower": None, "upper": None})
        return doc
    from dpfed.data.datasets import find_data_file
    from dpfed.data.files import check_real, read_npz
    from dpfed.data.schema import DataValidationError

    p = find_data_file(path)
    cat: np.ndarray | None = None
    n_cat: np.ndarray | None = None
    class_names: list[str] = []
    if p.suffix.lower() == ".npz":
        z = read_npz(p)
        xk = "X" if "X" in z else "X_train"
        if xk not in z:
            raise DataValidationError(f"{p}: expected an array 'X' or 'X_train'")
        X = z[xk]
        check_real(p, f"array {xk!r}", X)
        if X.ndim != 2:
            raise DataValidationError(f"{p}: array {xk!r} must be 2-d")
        d = X.shape[1]
        names = [str(s) for s in z["feature_names"]] if "feature_names" in z else [f"x{j}" for j in range(d)]
        if "is_categorical" in z:
            cat = np.asarray(z["is_categorical"], bool)
        if "n_categories" in z:
            n_cat = np.asarray(z["n_categories"])
            cat = np.ones(d, bool) if cat is None else cat
        if "class_names" in z:
            class_names = [str(c) for c in z["class_names"]]
        label_name = "label"
    else:
        from dpfed.data.files import read_csv_rows

        rows = read_csv_rows(p)
        if not rows:
            raise DataValidationError(f"{p}: empty CSV file")
        header = [h.strip() for h in rows[0]]
        label_name = label if label is not None else ("label" if "label" in header else "")
        if label_name and label_name not in header:
            raise DataValidationError(f"{p}: no column {label_name!r} for --label (columns: {len(header)})")
        names = [h for h in header if h != label_name]
        X = None
        if derive:
            from dpfed.data.files import load_table
            from dpfed.data.schema import Feature, Schema

            probe = Schema(tuple(Feature(n, "numeric", lower=0.0, upper=1.0) for n in names),
                           n_classes=0, label=label_name or "label")
            X, _ = load_table(p, probe)
    feats = _feature_entries(names, cat, n_cat, bounds, X if derive else None)
    out: dict[str, Any] = {"features": feats}
    if class_names:
        out["n_classes"], out["class_names"] = len(class_names), class_names
    elif p.suffix.lower() == ".csv" and not label_name:
        out["n_classes"] = 0
    else:
        out["n_classes"] = None  # placeholder: the number of classes is public, declare it
    out["label"] = label_name or "label"
    if derive:
        out["warning"] = _WARNING
    else:
        out["comment"] = ("fill in every null: public numeric bounds (lower < upper) and n_classes; bounds must "
                          "be known without looking at the records")
    return out


def _feature_entries(names: list[str], cat: np.ndarray | None, n_cat: np.ndarray | None,
                     bounds: tuple[float, float] | None, X: np.ndarray | None) -> list[dict[str, Any]]:
    """One template entry per column: categorical from the file, else the given bounds, else the records'
    min and max (``X``: only with --derive-bounds), else placeholders."""
    feats: list[dict[str, Any]] = []
    for j, name in enumerate(names):
        if cat is not None and cat[j] and n_cat is not None:
            feats.append({"name": name, "kind": "categorical", "categories": int(n_cat[j])})
        elif bounds is not None:
            feats.append({"name": name, "kind": "numeric", "lower": bounds[0], "upper": bounds[1]})
        elif X is not None:
            col = np.asarray(X[:, j], dtype=np.float64)
            col = col[np.isfinite(col)]
            lo, hi = (float(col.min()), float(col.max())) if col.size else (None, None)
            if lo is not None and lo == hi:
                hi = lo + 1.0
            feats.append({"name": name, "kind": "numeric", "lower": lo, "upper": hi, "comment": "data-derived"})
        else:
            feats.append({"name": name, "kind": "numeric", "lower": None, "upper": None})
    return feats


def parse_bounds(text: str) -> tuple[float, float]:
    """``LOW:HIGH`` as two finite numbers with LOW < HIGH (``--bounds``; argparse type)."""
    lo, sep, hi = text.partition(":")
    try:
        low, high = float(lo), float(hi)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW:HIGH (two numbers), got {text!r}") from None
    if not sep or not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise argparse.ArgumentTypeError(f"expected LOW:HIGH with finite LOW < HIGH, got {text!r}")
    return low, high


def _cmd_template(args: argparse.Namespace) -> int:
    bounds = None
    if args.bounds is not None:
        try:
            bounds = parse_bounds(args.bounds)
        except argparse.ArgumentTypeError as exc:
            print(f"dpfed schema template: error: --bounds: {exc}", file=sys.stderr)
            return 2
    try:
        doc = template(args.data, label=args.label, bounds=bounds, derive=args.derive_bounds, target=args.target)
    except FileNotFoundError as exc:
        print(f"dpfed schema template: error: {exc}", file=sys.stderr)
        return 2
    feats = ",\n".join("    " + json.dumps(f) for f in doc["features"])
    rest = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items() if k != "features")
    text = "{\n  \"features\": [\n" + feats + "\n  ],\n" + rest + "\n}\n"
    if args.derive_bounds:
        print(f"dpfed schema template: WARNING: {_WARNING}", file=sys.stderr)
    if args.out:
        out = Path(args.out)
        if out.exists():
            print(f"dpfed schema template: error: {out} exists; choose another --out", file=sys.stderr)
            return 2
        out.write_text(text)
        print(f"wrote {out}: edit every placeholder (null) before use", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
