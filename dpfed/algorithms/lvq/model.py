"""GLVQ / GMLVQ model maths: rescaling, distances, the per-record cost terms, predictions (pure NumPy).

GLVQ (Sato & Yamada 1996): for a record x with label y, d+ is the distance to the closest prototype
of class y, d- to the closest prototype of another class, and the cost is
``sum_i Phi(mu_i)``, ``mu = (d+ - d-) / (d+ + d-)``. GMLVQ (Schneider, Biehl & Hammer 2009) uses
``d(x, w) = (x - w)^T Omega^T Omega (x - w)`` with a learned (r x d) matrix Omega; GLVQ is the
case Omega = I. Records live in the public box rescaled to [-1, 1]^d. The gradients and their clipping
are in :mod:`dpfed.algorithms.lvq.gradient`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from dpfed.core.clipping import clamp, clip_rows_l2, sum_sensitivity
from dpfed.data.schema import Schema

__all__ = ["rescale", "distances", "Terms", "batch_terms", "cost", "predict", "init_center", "init_rows",
           "evaluate"]


def rescale(X: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Map records from the public box [lower, upper] into [-1, 1]^d (values outside are clamped)."""
    Z = (2.0 * (np.asarray(X, dtype=np.float64) - lower) / (upper - lower)) - 1.0
    return clamp(Z, -1.0, 1.0, out=Z, allow_infinite=True)


def _project(X: np.ndarray, omega: np.ndarray | None) -> np.ndarray:
    return X if omega is None else X @ omega.T


def distances(X: np.ndarray, W: np.ndarray, omega: np.ndarray | None) -> np.ndarray:
    """Squared (adaptive) distances, shape (n, K): ``|Omega (x - w)|^2`` (Omega = I when None)."""
    Z, ZW = _project(X, omega), _project(W, omega)
    D = (Z * Z).sum(1)[:, None] - 2.0 * Z @ ZW.T + (ZW * ZW).sum(1)[None, :]
    return np.maximum(D, 0.0)


def _phi_prime(mu: np.ndarray, phi: str, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """(Phi(mu), Phi'(mu)) for Phi = identity or the logistic 1/(1 + exp(-beta mu))."""
    if phi == "identity":
        return mu, np.ones_like(mu)
    if phi == "logistic":
        f = 1.0 / (1.0 + np.exp(-beta * mu))
        return f, beta * f * (1.0 - f)
    raise ValueError(f"phi must be 'identity' or 'logistic', got {phi!r}")


@dataclass
class Terms:
    """The per-record terms of a batch's GLVQ gradients (module docstring of :mod:`.gradient`)."""

    jp: np.ndarray   # (B,) index of the closest correct prototype
    jm: np.ndarray   # (B,) index of the closest wrong prototype
    ap: np.ndarray   # (B,) dPhi/dd+
    am: np.ndarray   # (B,) dPhi/dd-
    Vp: np.ndarray   # (B, d) x - w+
    Vm: np.ndarray   # (B, d) x - w-
    Up: np.ndarray   # (B, r) Omega (x - w+)   (= Vp for GLVQ)
    Um: np.ndarray   # (B, r)
    cost: np.ndarray  # (B,) Phi(mu)
    Z: np.ndarray    # (B, r) Omega x     (= X for GLVQ)
    ZW: np.ndarray   # (K, r) Omega w     (= W for GLVQ)


def batch_terms(X: np.ndarray, y: np.ndarray, W: np.ndarray, wl: np.ndarray, omega: np.ndarray | None,
                phi: str = "identity", beta: float = 1.0) -> Terms:
    """Winners, derivative coefficients and difference vectors of a batch (:mod:`.gradient` docstring)."""
    Z, ZW = _project(X, omega), _project(W, omega)
    D = np.maximum((Z * Z).sum(1)[:, None] - 2.0 * Z @ ZW.T + (ZW * ZW).sum(1)[None, :], 0.0)
    same = wl[None, :] == y[:, None]
    rows = np.arange(len(X))
    jp = np.where(same, D, np.inf).argmin(1)
    jm = np.where(same, np.inf, D).argmin(1)
    dp, dm = D[rows, jp], D[rows, jm]
    S = dp + dm
    S = np.where(S > 0, S, 1.0)  # d+ = d- = 0: mu = 0 and the gradient below is zero
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # non-finite terms: gradient.zero_nonfinite
        f, fp = _phi_prime((dp - dm) / S, phi, beta)
        ap = fp * 2.0 * dm / (S * S)
        am = -fp * 2.0 * dp / (S * S)
    Vp, Vm = X - W[jp], X - W[jm]
    Up, Um = (Vp, Vm) if omega is None else (Z - ZW[jp], Z - ZW[jm])
    return Terms(jp, jm, ap, am, Vp, Vm, Up, Um, f, Z, ZW)


def cost(X: np.ndarray, y: np.ndarray, W: np.ndarray, wl: np.ndarray, omega: np.ndarray | None,
         phi: str = "identity", beta: float = 1.0) -> float:
    """GLVQ cost ``sum_i Phi(mu_i)`` of a batch."""
    return float(batch_terms(X, y, W, wl, omega, phi, beta).cost.sum())


def predict(X: np.ndarray, W: np.ndarray, wl: np.ndarray, omega: np.ndarray | None,
            chunk: int = 8192) -> np.ndarray:
    """Label of the closest prototype for every record (chunked to bound memory)."""
    out = np.empty(len(X), dtype=np.int64)
    for a in range(0, len(X), chunk):
        out[a:a + chunk] = wl[distances(X[a:a + chunk], W, omega).argmin(1)]
    return out


def init_center(p: Mapping[str, Any], d: int) -> np.ndarray:
    """Public centre of the initialisation sums in [-1, 1]^d: the box centre or its lower corner."""
    if p["init_center"] == "mid":
        return np.zeros(d)
    if p["init_center"] == "lower":  # sparse data (e.g. pixels, background at the lower bound)
        return -np.ones(d)
    raise ValueError("init_center must be 'mid' or 'lower'")


def init_rows(p: Mapping[str, Any], Z: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Records shifted by the public centre and L2-clipped to ``init_clip`` (0: no clipping),
    with the L2 and L1 sensitivities of one record's contribution to the class sums."""
    d = Z.shape[1]
    centre = init_center(p, d)
    S = Z - centre
    lo, hi = -1.0 - centre, 1.0 - centre  # the box of a shifted record (Z lies in [-1, 1]^d)
    l2, l1 = sum_sensitivity(lo, hi, norm=2), sum_sensitivity(lo, hi, norm=1)
    clip = float(p["init_clip"])
    if clip > 0:
        if p["init"] == "laplace":
            raise ValueError("init_clip applies to the Gaussian initialisation only")
        S = clip_rows_l2(S, clip)[0]
        return S, min(clip, l2), l1
    return S, l2, l1


def evaluate(model: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray | None, schema: Schema) -> dict[str, float]:
    """Test error and accuracy of a trained LVQ model on labelled records."""
    if y is None:
        raise ValueError("LVQ evaluation needs labels")
    Z = rescale(schema.validate(X, clip_numeric=True), np.asarray(model["lower"]), np.asarray(model["upper"]))
    pred = predict(Z, np.asarray(model["prototypes"]), np.asarray(model["prototype_labels"]),
                   np.asarray(model["omega"]) if "omega" in model else None)
    acc = float(np.mean(pred == np.asarray(y)))
    return {"test_error": 1.0 - acc, "test_accuracy": acc}
