"""Linear-regression model maths: the coordinator's post-processing of the noisy statistics into
coefficients (AdaSSP's ridge, or the functional mechanism's trimmed quadratic), prediction, evaluation.

AdaSSP (Wang, AISTATS 2018, Alg. 2, with ||x|| <= 1 and |y| <= 1 after the encoding of :mod:`.plan`): with
sigma_l and sigma_xx the noise standard deviations of the summed lambda_min and X^T X entries,
lambda~_min = max(lambda_min + noise - sqrt(log(6 / delta)) sigma_l, 0) (a lower bound with high probability),
lambda = max(0, sqrt(D log(2 D^2 / rho)) sigma_xx - lambda~_min) with rho = 0.05, and
theta = (X^T X~ + lambda I)^-1 X^T y~, X^T X~ the symmetric noisy matrix. The functional mechanism (Zhang et
al., VLDB 2012, Sec. 5): the noisy quadratic's negative and zero eigen-directions are trimmed and the rest is
minimised exactly. All of it is post-processing (no privacy cost).
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from dpfed.algorithms.linear_regression.plan import Layout, LRPlan
from dpfed.algorithms.linear_regression.statistics import encode, triangle_matrix
from dpfed.data.schema import Schema

__all__ = ["RHO", "postprocess", "adassp_solve", "functional_solve", "predict", "evaluate", "regression_metrics"]

#: AdaSSP's failure probability of the noise bound that sets lambda (Wang 2018's default).
RHO = 0.05


def adassp_solve(A: np.ndarray, b: np.ndarray, lmin: float, sigma_xx: float, sigma_l: float,
                 delta: float) -> tuple[np.ndarray, float]:
    """AdaSSP's ridge solution from noisy statistics (module docstring): (theta, lambda)."""
    d = len(b)
    lam_low = max(lmin - math.sqrt(math.log(6.0 / delta)) * sigma_l, 0.0)
    lam = max(0.0, math.sqrt(d * math.log(2.0 * d * d / RHO)) * sigma_xx - lam_low)
    try:
        theta = np.linalg.solve(A + lam * np.eye(d), b)
    except np.linalg.LinAlgError:
        theta = np.linalg.lstsq(A + lam * np.eye(d), b, rcond=None)[0]
    return theta, lam


def functional_solve(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Minimise theta^T A theta - 2 b^T theta over the positive eigen-directions of the noisy A (spectral
    trimming, Zhang et al. 2012 Sec. 5)."""
    vals, vecs = np.linalg.eigh(A)
    keep = vals > 1e-9 * max(float(np.abs(vals).max()), 1.0)
    V = vecs[:, keep]
    return V @ ((V.T @ b) / vals[keep])


def postprocess(total: np.ndarray, layout: Layout, plan: LRPlan, shares: int, delta: float) -> dict[str, np.ndarray]:
    """Summed noisy integer vector -> model arrays (post-processing only). ``shares``: noise releases in the sum
    (one per party with local noise, one share per survivor under secure aggregation)."""
    w, off, d = plan.weights, layout.offsets, layout.dimension
    x = total.astype(np.float64)
    A = triangle_matrix(x[:layout.n_tri], d) / w["xx"]
    b = x[off["xy"]:off["yy"]] / w["xy"]
    std = math.sqrt(shares * plan.noise_var)  # noise std of every entry of the sum, grid units
    model: dict[str, np.ndarray] = {"algorithm": np.array("linear-regression"), "method": np.array(plan.method)}
    if layout.lmin:
        theta, lam = adassp_solve(A, b, x[off["lmin"]] / w["lmin"], std / w["xx"], std / w["lmin"], delta)
        model["ridge_lambda"] = np.array(lam)
    else:
        theta = functional_solve(A, b)
    model.update({
        "coef": theta, "num_columns": layout.num_cols.astype(np.int64), "lower": layout.lower,
        "upper": layout.upper, "cat_columns": layout.cat_cols.astype(np.int64), "cat_sizes": layout.sizes.astype(np.int64),
        "target_bounds": np.array([layout.y_lower, layout.y_upper]), "scale": np.array(layout.scale),
        "noisy_count": np.array(x[off["n"]] / w["n"]), "noisy_yty": np.array(x[off["yy"]] / w["yy"]),
    })
    return model


def _layout(model: Mapping[str, np.ndarray]) -> Layout:
    sizes = np.asarray(model["cat_sizes"], dtype=np.int64)
    lo, hi = (float(v) for v in np.asarray(model["target_bounds"]))
    return Layout(np.asarray(model["num_columns"]), np.asarray(model["lower"]), np.asarray(model["upper"]),
                  np.asarray(model["cat_columns"]), sizes, lo, hi, len(np.asarray(model["coef"])),
                  float(model["scale"]), "ridge_lambda" in model)


def predict(model: Mapping[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """Predicted target values, within the target's public bounds."""
    layout = _layout(model)
    yt = encode(X, layout) @ np.asarray(model["coef"], dtype=np.float64)
    y = layout.y_lower + (np.clip(yt, -1.0, 1.0) + 1.0) * (layout.y_upper - layout.y_lower) / 2.0
    return y


def regression_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """RMSE and R^2 (1 - residual / total sum of squares about the mean of ``y_true``)."""
    y_true, y_pred = np.asarray(y_true, dtype=np.float64), np.asarray(y_pred, dtype=np.float64)
    res = float(np.sum((y_true - y_pred) ** 2))
    tot = float(np.sum((y_true - y_true.mean()) ** 2))
    return {"rmse": math.sqrt(res / max(len(y_true), 1)), "r2": 1.0 - res / tot if tot > 0 else float("nan")}


def evaluate(model: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray | None, schema: Schema) -> dict[str, float]:
    """RMSE and R^2 on held-out records (in the target's units); raw records get the schema's public rules
    (imputation, clamping) first."""
    if y is None or len(X) == 0:
        return {}
    return regression_metrics(np.asarray(y, dtype=np.float64), predict(model, schema.validate(X, clip_numeric=True)))
