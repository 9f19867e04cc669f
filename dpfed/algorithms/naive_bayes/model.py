"""Naive Bayes model maths: the coordinator's post-processing of the noisy sum into model arrays, and
prediction from them.

Post-processing at the coordinator (no privacy cost; consistency as in Hay et al. 2010): the class
totals are the inverse-variance weighted mean of the direct counts and of every histogram's row sums;
each histogram row is projected (Euclidean) onto {h >= 0, sum_v h_v = n_c} (Duchi et al. 2008, Fig. 1);
Laplace smoothing alpha; Gaussian means clamped to the public range; variances clamped to
[max(var_floor, KAPPA * noise std of Q/n_c), 1] in rescaled units: a variance is not trusted below its
own noise level (a 2.5-point gain at eps 0.1 on adult). ``var_floor`` (default 2e-3, a std of 4.5 % of
the half range) also regularises heavy-tailed features such as adult's capital-loss (non-private
accuracy 0.839 with it, 0.831 without).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from dpfed.algorithms.naive_bayes.plan import Layout, NBPlan
from dpfed.data.schema import Schema

__all__ = ["KAPPA", "simplex_rows", "postprocess", "joint_log_likelihood", "predict", "evaluate"]

#: A variance is never trusted below KAPPA noise standard deviations of its own estimate.
KAPPA = 1.0


def simplex_rows(V: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Euclidean projection of each row of ``V`` onto {h >= 0, sum h = total} (Duchi et al. 2008, Fig. 1)."""
    m = V.shape[1]
    U = -np.sort(-V, axis=1)
    css = np.cumsum(U, axis=1) - totals[:, None]
    ks = np.arange(1, m + 1)
    rho = np.sum(U - css / ks > 0, axis=1)  # >= 1 whenever total >= 0
    rho = np.maximum(rho, 1)
    theta = css[np.arange(len(V)), rho - 1] / rho
    return np.maximum(V - theta[:, None], 0.0)


def postprocess(total: np.ndarray, layout: Layout, plan: NBPlan, n_parties: int, alpha: float,
                var_floor: float) -> dict[str, np.ndarray]:
    """Summed noisy integer vector -> model arrays (post-processing only; see module docstring)."""
    k, c, p = layout.k, len(layout.cat_cols), len(layout.num_cols)
    groups = layout.group_of_entries()
    W = plan.weights.astype(np.float64)
    x = total.astype(np.float64) / W[groups]
    var = n_parties * plan.noise_var / W ** 2          # noise variance of each group's entries
    counts = x[:k]
    hists = [x[o:o + k * int(m)].reshape(k, int(m)) for o, m in zip(layout.hist_off, layout.sizes)]
    # consistent class totals: inverse-variance weighted mean of every estimate of n_c
    est = [counts] + [h.sum(axis=1) for h in hists]
    ivar = [1.0 / var[0]] + [1.0 / (int(m) * var[1 + j]) for j, m in enumerate(layout.sizes)]
    n_c = sum(e * iv for e, iv in zip(est, ivar)) / sum(ivar)
    n_c = np.maximum(n_c, 1.0)
    model: dict[str, np.ndarray] = {
        "algorithm": np.array("naive-bayes"),
        "mechanism": np.array(plan.mechanism),
        "class_count": n_c,
        "class_log_prior": np.log(n_c / n_c.sum()),
        "cat_columns": layout.cat_cols.astype(np.int64),
        "num_columns": layout.num_cols.astype(np.int64),
    }
    m_max = int(layout.sizes.max()) if c else 0
    table = np.full((c, k, m_max), -np.inf)
    for j, h in enumerate(hists):
        m = h.shape[1]
        h = simplex_rows(h, n_c) + alpha
        table[j, :, :m] = np.log(h / h.sum(axis=1, keepdims=True))
    model["cat_log_prob"] = table
    if p:
        S = x[layout.s_off:layout.q_off].reshape(k, p)
        Q = x[layout.q_off:].reshape(k, p)
        mu = np.clip(S / n_c[:, None], -1.0, 1.0)
        v_raw = Q / n_c[:, None] - mu ** 2
        sd_q = np.sqrt(var[1 + c + p:])[None, :] / n_c[:, None]     # noise std of Q / n_c
        v = np.clip(np.maximum(v_raw, KAPPA * sd_q), var_floor, 1.0)
        half = (layout.upper - layout.lower) / 2.0
        model["num_mean"] = layout.lower + (mu + 1.0) * half
        model["num_var"] = v * half ** 2
        model["num_lower"], model["num_upper"] = layout.lower.copy(), layout.upper.copy()
    else:
        model["num_mean"] = model["num_var"] = np.zeros((k, 0))
        model["num_lower"] = model["num_upper"] = np.zeros(0)
    return model


def joint_log_likelihood(model: Mapping[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """log P(c) + sum_j log P(x_j | c) for every row of validated ``X``: shape (n, k)."""
    X = np.asarray(X, dtype=np.float64)
    jll = np.broadcast_to(np.asarray(model["class_log_prior"], dtype=np.float64), (len(X), len(model["class_log_prior"]))).copy()
    table = np.asarray(model["cat_log_prob"])
    for j, col in enumerate(np.asarray(model["cat_columns"], dtype=np.int64)):
        jll += table[j][:, X[:, col].astype(np.int64)].T
    num = np.asarray(model["num_columns"], dtype=np.int64)
    if len(num):
        Z = np.clip(X[:, num], model["num_lower"], model["num_upper"])
        mu, v = np.asarray(model["num_mean"]), np.asarray(model["num_var"])
        jll += -0.5 * np.sum(np.log(2 * np.pi * v), axis=1)[None, :]
        jll -= 0.5 * np.einsum("nkp->nk", (Z[:, None, :] - mu[None]) ** 2 / v[None])
    return jll


def predict(model: Mapping[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    return np.argmax(joint_log_likelihood(model, X), axis=1)


def evaluate(model: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray | None, schema: Schema) -> dict[str, float]:
    """Test accuracy of ``model`` on ``(X, y)`` (validated against ``schema``; numerics clamped)."""
    if y is None:
        raise ValueError("naive Bayes evaluation needs labels")
    Xv = schema.validate(X, y, clip_numeric=True)
    return {"test_accuracy": float(np.mean(predict(model, Xv) == np.asarray(y)))}
