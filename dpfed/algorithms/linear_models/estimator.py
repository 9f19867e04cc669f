"""Scikit-learn-style estimators ``DPLogisticRegression`` and ``DPLinearSVM``.

``method="dpsgd"`` (default): ``fit`` runs the same two halves as a federated job with one party and no
ledger (:func:`dpfed.algorithms.driver.run_local`): the noisy count, then DP-SGD (``sampling_rate = 1``:
noisy full-batch gradient descent). ``method="objective"``: objective perturbation
(:mod:`dpfed.algorithms.linear_models.objective`: Chaudhuri, Monteleoni & Sarwate 2011 Alg. 2 for
``delta = 0``, Kifer, Smith & Thakurta 2012 with Gaussian noise for ``delta > 0``; two classes only; needs
``l2 > 0``; conditions in that module). ``private=False``: the party's answers without clipping or noise.

Features: ``schema`` (a :class:`dpfed.data.schema.Schema` with categorical domains and numeric bounds) or
``bounds=(lower, upper)`` for all-numeric data; records are encoded by :mod:`dpfed.data.encoding`
(one-hot, numeric rescaled into [0, 1] and clamped).
"""
from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import Any, Callable, Sequence

import numpy as np

from dpfed.algorithms.contract import Answer, JobSpec, Task
from dpfed.algorithms.driver import run_local
from dpfed.algorithms.estimator import ClassifierScore, EstimatorParams, class_indices
from dpfed.algorithms.linear_models.algorithm import ALGORITHMS
from dpfed.algorithms.linear_models.defaults import DEFAULTS, LOSSES
from dpfed.algorithms.linear_models.gradient import LinearGradient
from dpfed.algorithms.linear_models.model import augment, predict, predict_proba
from dpfed.algorithms.linear_models.objective import fit_objective
from dpfed.algorithms.linear_models.plan import prepare_params
from dpfed.core.rng import SecureRNG
from dpfed.data.encoding import encode
from dpfed.data.schema import Schema

__all__ = ["DPLogisticRegression", "DPLinearSVM", "nonprivate_answerer"]

_JOB_KEYS = ("epochs", "sampling_rate", "clip", "lr", "lr_decay", "optimizer", "l2", "huber", "count_fraction",
             "exact_noise")


class _DPLinearBase(EstimatorParams, ClassifierScore):
    """Scikit-learn estimator around the federated halves (one party, same code path)."""

    _algorithm = "logistic-regression"

    def __init__(self, *, epsilon: float | None = 1.0, delta: float = 1e-5, bounds: tuple[Any, Any] | None = None,
                 schema: Schema | None = None, classes: Sequence[Any] | None = None, method: str = "dpsgd",
                 epochs: float = DEFAULTS["epochs"], sampling_rate: float = DEFAULTS["sampling_rate"],
                 clip: float = DEFAULTS["clip"], lr: float = DEFAULTS["lr"], lr_decay: float = DEFAULTS["lr_decay"],
                 optimizer: str = DEFAULTS["optimizer"], l2: float = DEFAULTS["l2"], huber: float = DEFAULTS["huber"],
                 count_fraction: float = DEFAULTS["count_fraction"], private: bool = True, exact_noise: bool = False,
                 random_state: int | None = None) -> None:
        self.epsilon, self.delta, self.bounds, self.schema, self.classes = epsilon, delta, bounds, schema, classes
        self.method, self.epochs, self.sampling_rate, self.clip = method, epochs, sampling_rate, clip
        self.lr, self.lr_decay, self.optimizer, self.l2, self.huber = lr, lr_decay, optimizer, l2, huber
        self.count_fraction, self.private, self.exact_noise = count_fraction, private, exact_noise
        self.random_state = random_state

    @classmethod
    def from_model(cls, model: Mapping[str, np.ndarray], schema: Schema, params: Mapping[str, Any]) -> "_DPLinearBase":
        """The fitted estimator of a released model (a model file, :mod:`dpfed.algorithms.model_file`): the
        weights over the schema's encoding, predicting exactly as :func:`~.model.evaluate` does."""
        kw = {k: params[k] for k in _JOB_KEYS if k in params}
        est = cls(epsilon=float(params.get("epsilon", 1.0)), delta=float(params.get("delta", 1e-5)), schema=schema,
                  **kw)
        est.coef_ = np.asarray(model["weights"], dtype=np.float64)
        est.schema_, est.classes_ = schema, np.arange(schema.n_classes)
        est.n_features_in_ = schema.n_features
        return est

    def _schema(self, X: np.ndarray, n_classes: int, private: bool) -> Schema:
        if self.schema is not None:
            return Schema(self.schema.features, n_classes=n_classes)
        if self.bounds is None:
            if private:
                raise ValueError("private training needs public `bounds=(lower, upper)` or a `schema`; bounds from "
                                 "the data would leak it")
            lo, hi = X.min(0), X.max(0)
            return Schema.numeric_box(X.shape[1], lo, np.where(hi > lo, hi, lo + 1.0), n_classes=n_classes)
        return Schema.numeric_box(X.shape[1], self.bounds[0], self.bounds[1], n_classes=n_classes)

    def fit(self, X: Any, y: Any) -> "_DPLinearBase":
        """Train on (X, y). Private training needs a public ``schema`` or ``bounds`` and, ideally, ``classes``."""
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
        if X.ndim != 2 or len(y) != len(X):
            raise ValueError(f"X must be 2-d with one label per row, got X {X.shape} and y {y.shape}")
        private = bool(self.private) and self.epsilon is not None
        classes, idx = class_indices(y, self.classes)
        schema = self._schema(X, len(classes), private)
        X = schema.validate(X, clip_numeric=True)
        rng = SecureRNG.from_seed(self.random_state) if self.random_state is not None else SecureRNG()
        self.classes_, self.schema_ = classes, schema
        if self.method == "objective":
            self.coef_ = self._fit_objective(X, idx, schema, private, rng)
            return self
        if self.method != "dpsgd":
            raise ValueError(f"method must be 'dpsgd' or 'objective', got {self.method!r}")
        params = {k: getattr(self, k) for k in _JOB_KEYS}
        params.update(epsilon=float(self.epsilon) if private else 1.0, delta=float(self.delta), private=private,
                      parties=1, noise="local")
        if private:
            params = prepare_params(params)
        spec = JobSpec(f"estimator-{uuid.uuid4().hex[:12]}", self._algorithm, params, schema)
        answer = None if private else nonprivate_answerer(spec, encode(schema, X), idx, rng)
        run = run_local(ALGORITHMS[self._algorithm], spec, X, idx, rng, answer=answer, private=private)
        self.coef_ = np.asarray(run.coordinator.model()["weights"])
        self.privacy_event_ = run.event
        return self

    def _fit_objective(self, X: np.ndarray, idx: np.ndarray, schema: Schema, private: bool,
                       rng: SecureRNG) -> np.ndarray:
        if len(self.classes_) != 2:
            raise ValueError("method='objective' covers two classes (use method='dpsgd' for more)")
        if not (private and self.epsilon is not None):
            raise ValueError("method='objective' is a private method (give an epsilon)")
        scale = math.sqrt(schema.n_features + 1.0)  # |[x, 1]| <= sqrt(n_features + 1): records of norm <= 1
        f, self.objective_noise_ = fit_objective(augment(encode(schema, X)) / scale, idx, LOSSES[self._algorithm],
                                                 epsilon=float(self.epsilon), delta=float(self.delta),
                                                 l2=float(self.l2), huber=float(self.huber), rng=rng)
        return (f / scale)[None, :]

    def _encoded(self, X: Any) -> np.ndarray:
        if getattr(self, "coef_", None) is None:
            raise AttributeError("not fitted")
        return encode(self.schema_, self.schema_.validate(np.asarray(X, dtype=np.float64), clip_numeric=True))

    def decision_function(self, X: Any) -> np.ndarray:
        """The scores ``[encode(x), 1] W^T`` (one column for two classes)."""
        Z = self._encoded(X)
        S = Z @ self.coef_[:, :-1].T + self.coef_[:, -1]
        return S[:, 0] if S.shape[1] == 1 else S

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[predict(self.coef_, self._encoded(X))]


class DPLogisticRegression(_DPLinearBase):
    """Differentially private logistic regression (binary, or multinomial / softmax for more classes)."""

    _algorithm = "logistic-regression"

    def predict_proba(self, X: Any) -> np.ndarray:
        """(n, classes) probabilities (sigmoid or softmax of the scores)."""
        return predict_proba(self.coef_, self._encoded(X))


class DPLinearSVM(_DPLinearBase):
    """Differentially private linear SVM with the Huber-smoothed hinge (smoothing ``huber``); one-vs-rest for
    more than two classes."""

    _algorithm = "linear-svm"


def nonprivate_answerer(spec: JobSpec, Z: np.ndarray, y: np.ndarray, rng: SecureRNG) -> Callable[[Task], Answer]:
    """The party's answers on encoded records ``Z`` without clipping or noise (baselines only)."""
    p = {**DEFAULTS, **spec.params}
    gen = rng.numpy()

    def answer(task: Task) -> Answer:
        if task.kind == "count":
            return {"count": np.array([len(Z)], dtype=np.int64)}
        mask = gen.random(len(Z)) < float(p["sampling_rate"])
        grad = LinearGradient(np.asarray(task.arrays["weights"]), LOSSES[spec.algorithm], float(p["huber"]))
        return {"grad": grad.full_sum(Z[mask], y[mask])}

    return answer
