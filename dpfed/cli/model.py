"""``dpfed model predict|evaluate``: use a model file from ``dpfed model get`` on new data, no coordinator needed.

``predict DATA --model FILE [-o OUT.csv]`` writes one prediction per record (a class name when the schema names
classes, else its code; a cluster index for k-means; the projections pc0,pc1,... for PCA); ``evaluate DATA --model FILE`` prints the job's own
evaluation (accuracy, or inertia for k-means) on labelled data as JSON. ``DATA`` is a ``.csv`` or ``.npz`` read
against the model's public schema (:mod:`dpfed.algorithms.model_file`); ``dpfed.algorithms.load_model(FILE)`` gives the same
model as a scikit-learn-style estimator in Python.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import numpy as np

__all__ = ["add_model_actions"]


def add_model_actions(msub: argparse._SubParsersAction) -> None:
    """Add ``predict`` and ``evaluate`` under ``dpfed model``."""
    pr = msub.add_parser("predict", help="predict every record of DATA with a model file")
    pr.add_argument("data", metavar="DATA", help=".csv or .npz records (the columns of the model's schema)")
    pr.add_argument("--model", required=True, help="model file from 'dpfed model get'")
    pr.add_argument("-o", "--output", default=None, help="write the predictions here (CSV), else to stdout")
    pr.set_defaults(func=_cmd_predict)
    ev = msub.add_parser("evaluate", help="the job's own evaluation of a model file on labelled DATA (JSON)")
    ev.add_argument("data", metavar="DATA", help=".csv or .npz records with labels")
    ev.add_argument("--model", required=True, help="model file from 'dpfed model get'")
    ev.set_defaults(func=_cmd_evaluate)


def _records(path: str, schema: object, labelled: bool) -> tuple[np.ndarray, np.ndarray | None]:
    from dpfed.data.files import load_table
    from dpfed.data.schema import DataValidationError, Schema

    assert isinstance(schema, Schema)
    if labelled or not schema.n_classes:
        return load_table(path, schema)
    try:
        return load_table(path, schema)
    except DataValidationError:  # records without their label column: predict needs none
        return load_table(path, dataclasses.replace(schema, n_classes=0, class_names=()))[0], None


def _cmd_predict(args: argparse.Namespace) -> int:
    from dpfed.algorithms.model_file import load_model, read_model_file
    from dpfed.data.schema import Schema

    _, meta = read_model_file(args.model)
    schema = Schema.from_dict(meta["schema"])
    X, _ = _records(args.data, schema, labelled=False)
    est = load_model(args.model)
    if not hasattr(est, "predict"):  # PCA: the projections, one column per component
        Z = np.asarray(est.transform(X))
        lines = [",".join(f"pc{j}" for j in range(Z.shape[1]))] + [",".join(repr(v) for v in r) for r in Z.tolist()]
    else:
        pred = np.asarray(est.predict(X))
        names = schema.class_names if meta.get("algorithm") not in ("kmeans", "pca+kmeans") else ()
        lines = ["prediction"] + [names[int(p)] if names else str(p) for p in pred.tolist()]
    text = "\n".join(lines) + "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"{len(lines) - 1} predictions written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from dpfed.algorithms.model_file import read_model_file
    from dpfed.algorithms.registry import get_algorithm
    from dpfed.data.schema import Schema

    model, meta = read_model_file(args.model)
    schema = Schema.from_dict(meta["schema"])
    algo = get_algorithm(str(meta["algorithm"]))
    X, y = _records(args.data, schema, labelled=algo.needs_labels)
    out = algo.evaluate(model, X, y, schema)
    print(json.dumps({"algorithm": meta["algorithm"], "job_id": meta.get("job_id", ""), "records": int(len(X)),
                      **{k: (v if isinstance(v, str) else float(v)) for k, v in out.items()}}, indent=1))
    return 0
