"""Objective perturbation for one party holding all the data (binary logistic regression / Huber SVM).

Chaudhuri, Monteleoni & Sarwate (JMLR 2011), Algorithm 2, for pure epsilon-DP; Kifer, Smith & Thakurta
(COLT 2012), Algorithm 1 / Theorem 2, for (epsilon, delta)-DP with Gaussian noise. Conditions (both
papers): every record has ``|x| <= 1`` (here the encoded record with its bias 1, divided by the public
bound ``sqrt(n_features + 1)``, :func:`dpfed.data.encoding.max_norm` plus the bias), the loss l(y f.x) is
convex and twice differentiable with ``|l'| <= 1`` and ``|l''| <= c`` (the *smoothness constant*: c = 1/4
for the logistic loss, c = 1 / (2 h) for the Huber hinge with smoothing h), the regulariser is
``(Lambda / 2) |f|^2`` (Lambda > 0: ``l2``), and the minimiser is exact (we solve to 1e-10 by L-BFGS; a
loose solver weakens the guarantee, Iyengar et al. 2019). The released f minimises::

    J(f) = (1/n) sum_i l(y_i f.x_i) + (Lambda / 2) |f|^2 + (1/n) b.f + (Delta / 2) |f|^2

* delta = 0 (Chaudhuri et al. Alg. 2): eps' = eps - log(1 + 2c/(n Lambda) + c^2/(n^2 Lambda^2)); if eps' > 0,
  Delta = 0, else Delta = c / (n (e^{eps/4} - 1)) - Lambda and eps' = eps / 2; b has density proportional
  to exp(-eps' |b| / 2): |b| ~ Gamma(d, 2 / eps'), direction uniform.
* delta > 0 (Kifer et al., Thm. 2, objective sum(l) + (n Delta / 2)|f|^2 + b.f in their scaling): the
  Hessian of one loss term has rank 1 and norm <= c, so n Delta >= 2 c / eps; b ~ N(0, s^2 I) with
  ``s^2 = zeta^2 (8 log(2 / delta) + 4 eps) / eps^2``, zeta = 1 (the bound on |grad l|).

Multinomial logistic regression (more than two classes) is not covered (its Hessian has rank up to K - 1
and the proofs above are for one score): use DP-SGD there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from dpfed.algorithms.linear_models.model import loss_terms, smoothness
from dpfed.core.rng import SecureRNG

__all__ = ["ObjectiveNoise", "objective_noise", "draw_b", "fit_objective"]


@dataclass(frozen=True)
class ObjectiveNoise:
    """The perturbation of one fit: ``kind`` "gamma" (pure, scale of |b|'s Gamma: 2 / eps') or "gaussian"
    (std of every coordinate of b), and the extra regulariser Delta (on the averaged objective)."""

    kind: str
    scale: float
    extra_l2: float


def objective_noise(n: int, epsilon: float, delta: float, c: float, l2: float) -> ObjectiveNoise:
    """The noise and extra regulariser of the module's formulas for n records."""
    if not (n >= 1 and epsilon > 0 and l2 > 0 and c > 0):
        raise ValueError("objective perturbation needs n >= 1, epsilon > 0, l2 > 0 and a smoothness c > 0")
    if delta > 0:
        return ObjectiveNoise("gaussian", math.sqrt(8.0 * math.log(2.0 / delta) + 4.0 * epsilon) / epsilon,
                              2.0 * c / (epsilon * n))
    eps1 = epsilon - math.log(1.0 + 2.0 * c / (n * l2) + c * c / (n * n * l2 * l2))
    if eps1 > 0:
        return ObjectiveNoise("gamma", 2.0 / eps1, 0.0)
    return ObjectiveNoise("gamma", 4.0 / epsilon, c / (n * math.expm1(epsilon / 4.0)) - l2)


def draw_b(noise: ObjectiveNoise, d: int, rng: SecureRNG) -> np.ndarray:
    """b from the secure generator: Gaussian coordinates, or a Gamma(d, scale) norm times a uniform direction
    (the Gamma variate as a sum of d exponentials -log U, U uniform on (0, 1])."""
    if noise.kind == "gaussian":
        return rng.normal(d, noise.scale)
    u = rng.normal(d, 1.0)
    u /= max(float(np.linalg.norm(u)), 1e-300)
    radius = float(-np.log1p(-rng.uniform(d)).sum()) * noise.scale
    return u * radius


def fit_objective(Xa: np.ndarray, y: np.ndarray, loss: str, *, epsilon: float, delta: float, l2: float,
                  huber: float, rng: SecureRNG) -> tuple[np.ndarray, ObjectiveNoise]:
    """The released weights f (D + 1,) for records ``Xa`` = [encoded, 1] already scaled to norm <= 1 (checked),
    labels y in {0, 1}."""
    if np.any(np.einsum("ij,ij->i", Xa, Xa) > 1.0 + 1e-9):
        raise ValueError("objective perturbation needs every record scaled to norm <= 1")
    n, d = Xa.shape
    noise = objective_noise(n, epsilon, delta, smoothness(loss, huber), l2)
    b = draw_b(noise, d, rng)
    lam = l2 + noise.extra_l2

    def J(f: np.ndarray) -> tuple[float, np.ndarray]:
        val, A = loss_terms(loss, (Xa @ f)[:, None], y, huber)
        return (float(val.sum() + b @ f) / n + 0.5 * lam * float(f @ f),
                (A[:, 0] @ Xa + b) / n + lam * f)

    res = minimize(J, np.zeros(d), jac=True, method="L-BFGS-B", options={"maxiter": 5000, "gtol": 1e-10,
                                                                         "ftol": 1e-15})
    return np.asarray(res.x, dtype=np.float64), noise
