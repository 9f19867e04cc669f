"""Scikit-learn-style GLVQ / GMLVQ estimators (``DPGLVQ``, ``DPGMLVQ``) and the one-party local driver.

``fit`` runs the same two halves as a federated job, with one party and no ledger
(:func:`dpfed.algorithms.driver.run_local`); ``private=False`` replaces the party's answer by the
non-private baseline (:func:`nonprivate_answer`: no clipping, no noise).
"""
from __future__ import annotations

import math
import uuid
from typing import Any, Callable, Sequence

import numpy as np

from dpfed.algorithms.contract import Answer, JobSpec, Task
from dpfed.algorithms.driver import run_local as drive_local
from dpfed.algorithms.estimator import ClassifierScore, EstimatorParams, class_indices
from dpfed.algorithms.lvq.algorithm import ALGORITHMS
from dpfed.algorithms.lvq.coordinator import LVQCoordinator
from dpfed.algorithms.lvq.defaults import DEFAULTS
from dpfed.algorithms.lvq.gradient import clipped_gradient_sum
from dpfed.algorithms.lvq.layout import layout, prototype_labels
from dpfed.algorithms.lvq.model import init_center, predict, rescale
from dpfed.algorithms.lvq.plan import prepare_params
from dpfed.core import accounting
from dpfed.core.clipping import clamp
from dpfed.core.rng import SecureRNG
from dpfed.data.schema import Schema

__all__ = ["DPGLVQ", "DPGMLVQ", "run_local", "baseline_answerer", "nonprivate_answer"]


class _DPLVQBase(EstimatorParams, ClassifierScore):
    """Scikit-learn estimator around the federated halves (one party, same code path)."""

    _algorithm = "glvq"

    def __init__(self, *, epsilon: float | None = 1.0, delta: float = 1e-5, bounds: tuple[Any, Any] | None = None,
                 classes: Sequence[Any] | None = None, epochs: float = 50, sampling_rate: float = 0.01,
                 clip: float = 0.5, init: str = "gaussian", init_fraction: float = 0.2, count_fraction: float = 0.05,
                 init_center: str = "mid", init_clip: float = 0.0,
                 optimizer: str = "sgd", lr: float = 0.05, lr_decay: float = 9.0, prototypes_per_class: int = 1,
                 omega_rank: int = 0, omega_scale: float = 1.0, phi: str = "identity", beta: float = 1.0,
                 private: bool = True, exact_noise: bool = False, random_state: int | None = None) -> None:
        self.epsilon, self.delta, self.bounds, self.classes = epsilon, delta, bounds, classes
        self.epochs, self.sampling_rate, self.clip, self.init = epochs, sampling_rate, clip, init
        self.init_fraction, self.count_fraction, self.optimizer, self.lr = init_fraction, count_fraction, optimizer, lr
        self.init_center, self.init_clip = init_center, init_clip
        self.lr_decay, self.prototypes_per_class, self.omega_rank = lr_decay, prototypes_per_class, omega_rank
        self.omega_scale, self.phi, self.beta, self.private = omega_scale, phi, beta, private
        self.exact_noise, self.random_state = exact_noise, random_state

    def fit(self, X: Any, y: Any) -> "_DPLVQBase":
        """Train on (X, y). Private training needs public ``bounds`` and, ideally, public ``classes``."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-d, got {X.ndim} dimension(s)")
        if len(y) != len(X):
            raise ValueError(f"X has {len(X)} rows but y has {len(y)} labels")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains NaN or infinite values")
        private = bool(self.private) and self.epsilon is not None
        classes, idx = class_indices(y, self.classes)
        if self.bounds is None:
            if private:
                raise ValueError("private training needs public `bounds=(lower, upper)`; bounds from the data "
                                 "would leak it")
            lo, hi = X.min(0), X.max(0)
            hi = np.where(hi > lo, hi, lo + 1.0)
        else:
            lo = np.broadcast_to(np.asarray(self.bounds[0], dtype=float), (X.shape[1],))
            hi = np.broadcast_to(np.asarray(self.bounds[1], dtype=float), (X.shape[1],))
        schema = Schema.numeric_box(X.shape[1], lo, hi, n_classes=len(classes))
        X = clamp(X, lo, hi)
        params = {k: v for k, v in self.get_params().items()
                  if k not in ("bounds", "classes", "random_state", "epsilon", "delta")}
        params.update(epsilon=float(self.epsilon) if private else 1.0, delta=float(self.delta), private=private,
                      parties=1, noise="local", allow_missing_classes=not private or self.classes is None)
        if private:
            params = prepare_params(params)
        spec = JobSpec(f"estimator-{uuid.uuid4().hex[:12]}", self._algorithm, params, schema)
        rng = SecureRNG() if self.random_state is None else SecureRNG.from_seed(int(self.random_state))
        answer = None if private else baseline_answerer(spec, rescale(X, lo, hi), idx, rng)
        run = drive_local(ALGORITHMS[self._algorithm], spec, X, idx, rng, private=private, answer=answer)
        model, self.summary_ = run.coordinator.model(), run.coordinator.summary()
        grid = accounting.pld_grid(float(self.epsilon))
        self.epsilon_spent_ = accounting.epsilon(run.event, float(self.delta), pld_discretization=grid) \
            if private else math.inf
        self._adopt(model, lo, hi, classes)
        return self

    def _adopt(self, model: Any, lo: np.ndarray, hi: np.ndarray, classes: np.ndarray) -> None:
        """Set the fitted attributes from a released model whose prototypes live in the box [lo, hi]."""
        self.classes_ = classes
        self.model_ = model
        scale = 2.0 / (hi - lo)  # z = scale * (x - lo) - 1
        self.prototypes_ = lo + (np.asarray(model["prototypes"]) + 1.0) / scale
        self.prototype_labels_ = classes[np.asarray(model["prototype_labels"])]
        om = np.asarray(model["omega"]) if "omega" in model else None
        self.omega_ = None if om is None else om * scale[None, :]  # acts on original units
        self.n_features_in_ = len(lo)

    @classmethod
    def from_model(cls, model: Any, schema: Schema, params: Any) -> "_DPLVQBase":
        """The fitted estimator of a released model (a model file, :mod:`dpfed.algorithms.model_file`): it predicts
        as the job's evaluation does, on raw features (clamped to the schema's box, rescaled to [-1, 1]^d)."""
        est = cls(epsilon=params.get("epsilon", 1.0), delta=float(params.get("delta", 1e-5)))
        model = {k: np.asarray(v) for k, v in model.items()}
        lo, hi = np.asarray(model["lower"], dtype=np.float64), np.asarray(model["upper"], dtype=np.float64)
        est.bounds, est.classes = (lo, hi), list(range(schema.n_classes))
        est._adopt(model, lo, hi, np.arange(schema.n_classes))
        est.model_schema_ = schema
        return est

    def _check_fitted(self, X: Any) -> np.ndarray:
        if not hasattr(self, "model_"):
            raise ValueError(f"this {type(self).__name__} is not fitted yet; call fit first")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(f"X must have {self.n_features_in_} columns")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains NaN or infinite values")
        return X

    def predict(self, X: Any) -> np.ndarray:
        X = self._check_fitted(X)
        schema = getattr(self, "model_schema_", None)
        if schema is not None:  # loaded from a model file: exactly the job's own evaluation
            m = self.model_
            Z = rescale(schema.validate(X, clip_numeric=True), np.asarray(m["lower"]), np.asarray(m["upper"]))
            return self.classes_[predict(Z, np.asarray(m["prototypes"]), np.asarray(m["prototype_labels"]),
                                         np.asarray(m["omega"]) if "omega" in m else None)]
        return self.prototype_labels_[np.searchsorted(self.classes_, self.prototype_labels_)][
            predict(X, self.prototypes_, np.arange(len(self.prototypes_)), self.omega_)]


class DPGLVQ(_DPLVQBase):
    """Differentially private GLVQ (Euclidean distance), trained by DP-SGD."""

    _algorithm = "glvq"


class DPGMLVQ(_DPLVQBase):
    """Differentially private GMLVQ: learns Omega with relevance matrix Lambda = Omega^T Omega."""

    _algorithm = "gmlvq"

    @property
    def relevance_matrix_(self) -> np.ndarray:
        if getattr(self, "omega_", None) is None:
            raise AttributeError("not fitted")
        return self.omega_.T @ self.omega_


def run_local(spec: JobSpec, X: np.ndarray, y: np.ndarray, rng: SecureRNG) -> LVQCoordinator:
    """Drive the same two halves with one party and no ledger (private, or the non-private baseline)."""
    X = spec.schema.validate(X, y)
    private = bool({**DEFAULTS, **spec.params}["private"])
    answer = None if private else baseline_answerer(spec, rescale(X, spec.schema.lower, spec.schema.upper), y, rng)
    coord = drive_local(ALGORITHMS[spec.algorithm], spec, X, y, rng, answer=answer, private=private).coordinator
    assert isinstance(coord, LVQCoordinator)
    return coord


def baseline_answerer(spec: JobSpec, Z: np.ndarray, y: np.ndarray, rng: SecureRNG) -> Callable[[Task], Answer]:
    """The non-private baseline's answers on rescaled records ``Z`` (sampling from a generator keyed by ``rng``)."""
    gen = rng.numpy()
    return lambda task: nonprivate_answer(spec, task, Z, y, gen)


def nonprivate_answer(spec: JobSpec, task: Task, Z: np.ndarray, y: np.ndarray, gen: np.random.Generator) -> Answer:
    """The party's computation on rescaled records ``Z`` without clipping or noise (baselines only)."""
    p = {**DEFAULTS, **spec.params}
    c, d, ppc, rank, learn_omega = layout(spec)
    if task.kind == "init":
        sums = np.zeros((c, d))
        np.add.at(sums, y, Z - init_center(p, d))
        ans: Answer = {"counts": np.bincount(y, minlength=c).astype(np.int64)}
        if p["init"] != "zero":
            ans["sums"] = sums
        return ans
    mask = gen.random(len(Z)) < float(p["sampling_rate"])
    g = clipped_gradient_sum(Z[mask], y[mask], np.asarray(task.arrays["prototypes"]), prototype_labels(c, ppc),
                             np.asarray(task.arrays["omega"]) if rank else None, None, phi=str(p["phi"]),
                             beta=float(p["beta"]), learn_omega=learn_omega)
    out = {"grad_prototypes": g.prototypes}
    if rank:
        out["grad_omega"] = g.omega
    return out
