"""The linear models' maths: scores, the losses' derivatives, predictions, evaluation (pure NumPy).

A model is ``W`` (K, D + 1) on the encoded record with a trailing 1 (bias), ``x~ = [encode(x), 1]``
(:mod:`dpfed.data.encoding`: one-hot categorical columns, numeric ones rescaled into [0, 1] by the public
bounds). K = 1 output for two classes, K = n_classes otherwise. Losses of the scores ``s = W x~``:

* ``logistic``: two classes, ``log(1 + e^s) - y s`` (y in {0, 1}); more, the multinomial (softmax) loss
  ``logsumexp(s) - s_y``. ``dl/ds`` is ``sigmoid(s) - y`` or ``softmax(s) - e_y`` (norm <= 1, <= sqrt 2).
* ``huber``: the Huber-smoothed hinge of Chaudhuri, Monteleoni & Sarwate (JMLR 2011, Sec. 3.4.2) of the
  margin z = t s (t = +-1): 0 for z > 1 + h, ``(1 + h - z)^2 / (4 h)`` for |1 - z| <= h, ``1 - z`` for
  z < 1 - h; ``|l'| <= 1``, ``|l''| <= 1 / (2 h)``. More than two classes: one-vs-rest (one such binary
  loss per class, t_k = +1 for the record's class, -1 otherwise, summed; predicted class: the largest score).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
from scipy.special import expit, log_expit, logsumexp, softmax

from dpfed.data.encoding import encode
from dpfed.data.schema import Schema

__all__ = ["outputs", "augment", "loss_terms", "huber_hinge", "scores", "predict", "predict_proba", "evaluate",
           "smoothness"]


def outputs(n_classes: int) -> int:
    """K: one score for two classes, one per class otherwise."""
    return 1 if n_classes <= 2 else int(n_classes)


def augment(Z: np.ndarray) -> np.ndarray:
    """``[Z, 1]``: the encoded records with the bias column."""
    return np.hstack([Z, np.ones((len(Z), 1))])


def huber_hinge(z: np.ndarray, h: float) -> tuple[np.ndarray, np.ndarray]:
    """(l(z), l'(z)) of the Huber hinge with smoothing h (module notes), element-wise."""
    quad = (1.0 + h - z) ** 2 / (4.0 * h)
    loss = np.where(z > 1.0 + h, 0.0, np.where(z < 1.0 - h, 1.0 - z, quad))
    dz = np.where(z > 1.0 + h, 0.0, np.where(z < 1.0 - h, -1.0, -(1.0 + h - z) / (2.0 * h)))
    return loss, dz


def smoothness(loss: str, huber: float) -> float:
    """c >= |l''| of the loss (Chaudhuri et al. 2011, Sec. 3.4): 1/4 logistic, 1 / (2 h) Huber hinge."""
    return 0.25 if loss == "logistic" else 1.0 / (2.0 * float(huber))


def loss_terms(loss: str, S: np.ndarray, y: np.ndarray, huber: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """(per-record loss (B,), A = dl/ds (B, K)) for scores ``S`` (B, K) and labels ``y`` (B,) in 0..C-1."""
    y = np.asarray(y, dtype=np.int64)
    K = S.shape[1]
    if loss == "logistic":
        if K == 1:
            s = S[:, 0]
            return -(y * log_expit(s) + (1 - y) * log_expit(-s)), (expit(s) - y)[:, None]
        P = softmax(S, axis=1)
        P[np.arange(len(y)), y] -= 1.0
        return logsumexp(S, axis=1) - S[np.arange(len(y)), y], P
    if loss == "huber":
        T = (2.0 * y - 1.0)[:, None] if K == 1 else np.where(np.arange(K)[None, :] == y[:, None], 1.0, -1.0)
        val, dz = huber_hinge(T * S, float(huber))
        return val.sum(axis=1), T * dz
    raise ValueError(f"loss must be 'logistic' or 'huber', got {loss!r}")


def scores(W: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """(n, K) ``[Z, 1] W^T``."""
    return Z @ W[:, :-1].T + W[:, -1]


def predict(W: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """Class indices: ``s > 0`` for one score, the largest score otherwise."""
    S = scores(W, Z)
    return (S[:, 0] > 0).astype(np.int64) if S.shape[1] == 1 else np.argmax(S, axis=1)


def predict_proba(W: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """(n, C) class probabilities of the logistic model (sigmoid or softmax)."""
    S = scores(W, Z)
    if S.shape[1] == 1:
        p = expit(S[:, 0])
        return np.column_stack([1.0 - p, p])
    return softmax(S, axis=1)


def evaluate(model: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray | None, schema: Schema) -> dict[str, float]:
    """Test error and accuracy of a trained linear model on labelled records (encoded by the public schema)."""
    if y is None:
        raise ValueError("linear-model evaluation needs labels")
    Z = encode(schema, schema.validate(X, clip_numeric=True))
    acc = float(np.mean(predict(np.asarray(model["weights"], dtype=np.float64), Z) == np.asarray(y)))
    return {"test_error": 1.0 - acc, "test_accuracy": acc}
