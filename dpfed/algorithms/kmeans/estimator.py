"""The scikit-learn-style private k-means estimator (``DPKMeans``): one data owner's fit under local noise."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dpfed.algorithms.estimator import EstimatorParams
from dpfed.algorithms.kmeans.fit import fit_private
from dpfed.algorithms.kmeans.model import inertia, numeric_part, sqdist
from dpfed.algorithms.kmeans.plan import KMeansPlan, make_plan, plan_event
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Schema

__all__ = ["DPKMeans"]


class DPKMeans(EstimatorParams):
    """scikit-learn-style private k-means.

    ``DPKMeans(n_clusters=5, epsilon=1.0, delta=1e-6, bounds=(lower, upper), method="sample-aggregate")``;
    ``fit(X)`` spends (epsilon, delta) on X (bounds are public, never taken from X) and sets
    ``cluster_centers_``, ``cluster_sizes_`` (noisy), ``inertia_`` (of the private centers on X,
    a non-private diagnostic), ``privacy_event_``. ``random_state`` seeds the noise (tests only).
    """

    def __init__(self, n_clusters: int = 5, *, epsilon: float = 1.0, delta: float = 1e-6,
                 bounds: tuple[Any, Any] | None = None, method: str = "sample-aggregate",
                 aggregator: str = "mean", refine_steps: int = 2, lloyd_iters: int = 5, per_cluster: int = 10,
                 max_blocks: int = 2000, block_size: int = 0, random_state: int | None = None) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.method = method
        self.aggregator = aggregator
        self.refine_steps = refine_steps
        self.lloyd_iters = lloyd_iters
        self.per_cluster = per_cluster
        self.max_blocks = max_blocks
        self.block_size = block_size
        self.random_state = random_state

    def _plan(self) -> KMeansPlan:
        steps = self.lloyd_iters if self.method == "lloyd" else self.refine_steps
        return make_plan(self.method, int(self.n_clusters), self.aggregator, int(steps), float(self.epsilon),
                         float(self.delta))

    def fit(self, X: np.ndarray, y: Any = None) -> "DPKMeans":
        if self.bounds is None:
            raise ValueError("bounds=(lower, upper) are required: public bounds, never computed from the data")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError("X must be a 2-d array")
        lower = np.broadcast_to(np.asarray(self.bounds[0], dtype=np.float64), (X.shape[1],)).copy()
        upper = np.broadcast_to(np.asarray(self.bounds[1], dtype=np.float64), (X.shape[1],)).copy()
        if not np.all(upper > lower):
            raise ValueError("bounds need lower < upper in every column")
        if not np.all(np.isfinite(X)):
            raise ValueError("X holds NaN or infinite values")
        if self.n_clusters < 1 or self.n_clusters > len(X):
            raise ValueError(f"n_clusters={self.n_clusters} must lie in 1..{len(X)} (the number of records)")
        plan = self._plan()
        rng = SecureRNG() if self.random_state is None else SecureRNG.from_seed(self.random_state)
        info: dict[str, Any] = {}
        C, sizes = fit_private(X, lower, upper, plan, rng, per_cluster=self.per_cluster, max_blocks=self.max_blocks,
                               block_size=self.block_size, info=info)
        self.cluster_centers_, self.cluster_sizes_ = C, sizes
        self.privacy_event_ = plan_event(plan)
        self.plan_ = plan
        self.n_blocks_ = info.get("blocks", 0)
        self.inertia_ = inertia(X, C)
        return self

    @classmethod
    def from_model(cls, model: Mapping[str, np.ndarray], schema: Schema, params: Mapping[str, Any]) -> "DPKMeans":
        """The fitted estimator of a released model (a model file, :mod:`dpfed.algorithms.model_file`); it uses the
        schema's numeric columns, as the job's evaluation does."""
        C = np.asarray(model["cluster_centers"], dtype=np.float64)
        est = cls(n_clusters=len(C), epsilon=float(params.get("epsilon", 1.0)), delta=float(params.get("delta", 1e-6)),
                  bounds=(schema.lower, schema.upper), method=str(params.get("method", "sample-aggregate")))
        est.cluster_centers_ = C
        if "cluster_sizes" in model:
            est.cluster_sizes_ = np.asarray(model["cluster_sizes"])
        est.model_schema_ = schema
        return est

    def _numeric(self, X: np.ndarray) -> np.ndarray:
        schema = getattr(self, "model_schema_", None)
        return np.asarray(X, dtype=np.float64) if schema is None else numeric_part(X, schema)[0]

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.argmin(sqdist(self._numeric(X), self.cluster_centers_), axis=1)

    def score(self, X: np.ndarray, y: Any = None) -> float:
        """Negative inertia, as scikit-learn's KMeans.score."""
        return -inertia(self._numeric(X), self.cluster_centers_)
