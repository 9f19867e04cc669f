"""PCA model maths: the coordinator's post-processing of the summed noisy integer vector into the model
(mean, covariance, top-k eigenvectors; "Analyze Gauss", Dwork et al. STOC 2014, Alg. 1: symmetrise the
noisy second-moment matrix and take its top eigenvectors), projection, and the captured variance that
evaluates a subspace on held-out data."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from dpfed.algorithms.pca.plan import GRID, Geometry
from dpfed.data.schema import Schema

__all__ = ["decode_moments", "noisy_center", "postprocess", "project", "captured_variance", "evaluate", "top_components"]


def decode_moments(total: np.ndarray, g: Geometry) -> tuple[np.ndarray, np.ndarray, float]:
    """(sum u u^T, sum u, n) in rescaled units from the summed integer upper triangle (symmetrised)."""
    d = g.d
    M = np.zeros((d + 1, d + 1))
    M[np.triu_indices(d + 1)] = np.asarray(total, dtype=np.float64)
    M = M + np.triu(M, 1).T
    unit = g.clip / g.k_in                       # u = unit * q
    n = M[d, d] / float(g.a) ** 2
    return M[:d, :d] * unit * unit, M[:d, d] * unit / float(g.a), float(n)


def noisy_center(total: np.ndarray, g: Geometry, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Round 0's noisy mean in the original units, clamped into the public box (post-processing)."""
    t = np.asarray(total, dtype=np.float64)
    n = max(t[-1] / float(g.a), 1.0)
    m = g.origin + g.scale * (g.clip / g.k_in) * t[:-1] / n
    return np.clip(m, lower, upper)


def top_components(cov: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-k eigenvectors of symmetric ``cov`` as rows (sign fixed: largest |entry| positive) and their
    eigenvalues, largest first."""
    w, V = np.linalg.eigh(cov)
    order = np.argsort(w)[::-1][:k]
    comps = V[:, order].T
    signs = np.sign(comps[np.arange(len(comps)), np.argmax(np.abs(comps), axis=1)])
    return comps * np.where(signs == 0, 1.0, signs)[:, None], w[order]


def postprocess(total: np.ndarray, g: Geometry, k: int) -> dict[str, np.ndarray]:
    """Summed noisy vector -> model arrays in the ORIGINAL units (post-processing only): mean (the noisy mean
    clamped into the clip ball), covariance S/n - m m^T, the top-k components and their variances."""
    S, s, n = decode_moments(total, g)
    n = max(n, 1.0)
    m = s / n
    norm = float(np.linalg.norm(m))
    if norm > g.clip:
        m = m * (g.clip / norm)
    cov = S / n - np.outer(m, m)
    comps, var = top_components((cov + cov.T) / 2.0, k)
    total_var = float(np.trace(cov))
    return {
        "algorithm": np.array("pca"),
        "components": comps,
        "explained_variance": var * g.scale ** 2,
        "explained_variance_ratio": var / total_var if total_var > 0 else np.full(k, np.nan),
        "mean": g.origin + g.scale * m,
        "n_records": np.array(n),
        "center": g.origin.copy(),
        "scale": np.array(g.scale),
        "clip": np.array(g.clip),
        "grid": np.array(GRID),
    }


def project(model: Mapping[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """(X - mean) @ components^T, as scikit-learn's ``PCA.transform``."""
    return (np.asarray(X, dtype=np.float64) - np.asarray(model["mean"])) @ np.asarray(model["components"]).T


def captured_variance(components: np.ndarray, X: np.ndarray) -> float:
    """Variance of held-out ``X`` (centred by its own mean) inside the span of orthonormal ``components``."""
    Xc = np.asarray(X, dtype=np.float64)
    Xc = Xc - Xc.mean(axis=0)
    P = Xc @ np.asarray(components, dtype=np.float64).T
    return float(np.sum(P * P) / max(len(Xc), 1))


def evaluate(model: Mapping[str, np.ndarray], X: np.ndarray, y: np.ndarray | None, schema: Schema
             ) -> dict[str, float]:
    """Captured variance of the model's subspace on ``X`` and its fraction of X's total variance."""
    Xv = schema.validate(X, clip_numeric=True)
    cap = captured_variance(np.asarray(model["components"]), Xv)
    total = float(np.sum(np.var(Xv, axis=0)))
    return {"captured_variance": cap, "captured_variance_ratio": cap / total if total > 0 else float("nan")}
