"""Self-contained model files: what ``dpfed model get`` writes and ``dpfed.algorithms.load_model`` reads back.

A model file is an ``.npz`` (arrays only, read with ``allow_pickle=False``) holding the trained model's arrays
as the coordinator released them plus one JSON text, ``dpfed_model_json``: the format version, the algorithm,
the job's public parameters and its **public schema** (feature kinds, bounds, categories, classes). The schema
is what a prediction needs beyond the arrays (GMLVQ's prototypes live in the rescaled box [-1, 1]^d of the
schema's bounds; naive Bayes clamps numeric values to them): before, ``dpfed model get`` gave bare arrays that
scored 8.5 % on raw features, 54.4 % after a rescale found in the code (issue 29).

:func:`load_model` returns a fitted scikit-learn-style estimator: the algorithm's registry entry names its
estimator class (``Algorithm.estimator = "module:Class"``), whose ``from_model(model, schema, params)``
classmethod builds it from the released arrays, predicting exactly as the job's own evaluation does. A new
learner plugs in by giving its estimator that classmethod and its registry entry the ``estimator`` string
(/work/notes/model-file-for-learners.md).
"""
from __future__ import annotations

import importlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dpfed.core.errors import DpfedError
from dpfed.data.schema import Schema

__all__ = ["FORMAT", "META_KEY", "ModelFileError", "write_model_file", "read_model_file", "load_model"]

FORMAT = "dpfed-model/1"
META_KEY = "dpfed_model_json"


class ModelFileError(DpfedError, ValueError):
    """A model file that cannot be read or used (the message names the file and the reason)."""


def write_model_file(path: str | os.PathLike[str], model: Mapping[str, np.ndarray], *, algorithm: str,
                     params: Mapping[str, Any], schema: Mapping[str, Any], job_id: str = "",
                     extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``model`` with its algorithm, public parameters and public schema; return the file's path."""
    if META_KEY in model:
        raise ModelFileError(f"a model array may not be called {META_KEY!r}")
    meta = {"format": FORMAT, "algorithm": algorithm, "job_id": job_id, "params": dict(params),
            "schema": dict(schema), **dict(extra or {})}
    out = Path(path)
    if out.suffix != ".npz":
        out = out.with_name(out.name + ".npz")
    np.savez(out, **{k: np.asarray(v) for k, v in model.items()}, **{META_KEY: np.asarray(json.dumps(meta))})
    return out


def read_model_file(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(model arrays, metadata) of a model file; :class:`ModelFileError` for anything else."""
    p = Path(path)
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise ModelFileError(f"model file not found: {p}") from None
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"{p} is not a model file (.npz without pickles): {exc}") from None
    raw = arrays.pop(META_KEY, None)
    if raw is None:
        raise ModelFileError(f"{p} holds bare arrays, not a dpfed model file (fetch it again with 'dpfed model get')")
    try:
        meta = json.loads(str(raw))
    except ValueError:
        raise ModelFileError(f"{p}: its {META_KEY} is not JSON") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ModelFileError(f"{p}: unknown model file format {meta.get('format') if isinstance(meta, dict) else meta!r}")
    return arrays, meta


def load_model(path: str | os.PathLike[str]) -> Any:
    """The fitted scikit-learn-style estimator of a model file (module docstring)."""
    from dpfed.algorithms.registry import get_algorithm

    model, meta = read_model_file(path)
    name = str(meta.get("algorithm", ""))
    try:
        algo = get_algorithm(name)
    except (ValueError, KeyError, ModuleNotFoundError):
        raise ModelFileError(f"{path}: algorithm {name!r} is not known here (a plugin?)") from None
    if not algo.estimator:
        raise ModelFileError(f"{path}: algorithm {name!r} has no estimator to load its model into")
    module, _, cls_name = algo.estimator.partition(":")
    cls = getattr(importlib.import_module(module), cls_name)
    schema = Schema.from_dict(meta["schema"])
    est = cls.from_model(model, schema, dict(meta.get("params", {})))
    est.model_file_ = {k: v for k, v in meta.items() if k not in ("schema",)}
    return est
