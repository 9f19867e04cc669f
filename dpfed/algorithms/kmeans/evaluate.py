"""How good released k-means centers are: inertia on the records, beside a non-private reference."""
from __future__ import annotations

import hashlib
from typing import Any, Mapping

import numpy as np

from dpfed.algorithms.kmeans.model import inertia, kmeans, numeric_part
from dpfed.data.schema import Schema

__all__ = ["nonprivate_inertia", "evaluate"]

_NONPRIVATE_CACHE: dict[tuple[str, int], float] = {}


def nonprivate_inertia(X: np.ndarray, k: int, seed: int = 0) -> tuple[float, str]:
    """Inertia of scikit-learn KMeans(n_init=10) if importable, else our k-means++ (n_init=10)."""
    key = (hashlib.blake2b(np.ascontiguousarray(X).view(np.uint8), digest_size=16).hexdigest(), k)
    try:
        from sklearn.cluster import KMeans  # test/bench extra, not a runtime dependency
        impl = "sklearn"
    except ImportError:  # pragma: no cover - depends on the environment
        impl = "numpy"
    if key not in _NONPRIVATE_CACHE:
        if impl == "sklearn":
            _NONPRIVATE_CACHE[key] = float(KMeans(n_clusters=k, n_init=10, random_state=seed).fit(X).inertia_)
        else:
            _NONPRIVATE_CACHE[key] = kmeans(X, k, np.random.default_rng(seed), n_init=10, iters=300)[1]
    return _NONPRIVATE_CACHE[key], impl


def evaluate(model: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray | None, schema: Schema
             ) -> dict[str, Any]:
    """``inertia`` of the released centers on X's numeric columns, ``inertia_nonprivate``
    (k-means with 10 starts on the same data; ``nonprivate_impl`` says whose) and their ratio."""
    Xn, _, _ = numeric_part(X, schema)
    C = np.asarray(model["cluster_centers"], dtype=np.float64)
    inert = inertia(Xn, C)
    ref, impl = nonprivate_inertia(Xn, len(C))
    return {"inertia": inert, "inertia_nonprivate": ref, "inertia_ratio": inert / ref if ref > 0 else float("inf"),
            "nonprivate_impl": impl}
