"""GLVQ / GMLVQ: distances, cost, and per-sample clipped gradient sums (pure NumPy, no privacy).

GLVQ (Sato & Yamada 1996): for a record x with label y, d+ is the distance to the closest prototype
of class y, d- to the closest prototype of another class, and the cost is
``sum_i Phi(mu_i)``, ``mu = (d+ - d-) / (d+ + d-)``. GMLVQ (Schneider, Biehl & Hammer 2009) uses
``d(x, w) = (x - w)^T Omega^T Omega (x - w)`` with a learned (r x d) matrix Omega; GLVQ is the
case Omega = I. Brinkrolf, Berger & Hammer (ESANN 2018) train both by DP-SGD.

Gradients (write v = x - w, u = Omega v, a+ = dPhi/dmu * 2 d- / (d+ + d-)^2, a- = -dPhi/dmu * 2 d+ /
(d+ + d-)^2):

* ``dcost/dw+ = -2 a+ Omega^T u+`` and ``dcost/dw- = -2 a- Omega^T u-``;
* ``dcost/dOmega = 2 a+ u+ v+^T + 2 a- u- v-^T``: two rank-one outer products per record.

So a record's squared gradient norm needs only dot products (``ghost norms``):
``|g_Omega|^2 = 4 (a+^2 |u+|^2 |v+|^2 + a-^2 |u-|^2 |v-|^2 + 2 a+ a- (u+.u-)(v+.v-))``, and the
clipped sum over a batch is the one matrix product ``2 [U+; U-]^T diag(s a) [V+; V-]``: no (d x d)
matrix per record is ever formed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpfed.core.clipping import clamp, l2_clip_factors

__all__ = ["rescale", "distances", "batch_terms", "clipped_gradient_sum", "clipped_gradient_rows",
           "per_sample_gradients_naive", "cost", "predict", "GradientSum"]


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
class _Terms:
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
                phi: str = "identity", beta: float = 1.0) -> _Terms:
    """Winners, derivative coefficients and difference vectors of a batch (see module docstring)."""
    Z, ZW = _project(X, omega), _project(W, omega)
    D = np.maximum((Z * Z).sum(1)[:, None] - 2.0 * Z @ ZW.T + (ZW * ZW).sum(1)[None, :], 0.0)
    same = wl[None, :] == y[:, None]
    rows = np.arange(len(X))
    jp = np.where(same, D, np.inf).argmin(1)
    jm = np.where(same, np.inf, D).argmin(1)
    dp, dm = D[rows, jp], D[rows, jm]
    S = dp + dm
    S = np.where(S > 0, S, 1.0)  # d+ = d- = 0: mu = 0 and the gradient below is zero
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # non-finite terms: _zero_nonfinite
        f, fp = _phi_prime((dp - dm) / S, phi, beta)
        ap = fp * 2.0 * dm / (S * S)
        am = -fp * 2.0 * dp / (S * S)
    Vp, Vm = X - W[jp], X - W[jm]
    Up, Um = (Vp, Vm) if omega is None else (Z - ZW[jp], Z - ZW[jm])
    return _Terms(jp, jm, ap, am, Vp, Vm, Up, Um, f, Z, ZW)


@dataclass
class GradientSum:
    """Sum over a batch of (clipped) per-record gradients of the cost."""

    prototypes: np.ndarray           # (K, d)
    omega: np.ndarray | None         # (r, d) or None for GLVQ
    cost: float                      # sum of Phi(mu) over the batch (before clipping)
    clipped: int                     # records whose gradient norm exceeded the clip
    norms: np.ndarray                # (B,) per-record gradient norms before clipping


def clipped_gradient_sum(X: np.ndarray, y: np.ndarray, W: np.ndarray, wl: np.ndarray,
                         omega: np.ndarray | None, clip: float | None, *, phi: str = "identity",
                         beta: float = 1.0, learn_omega: bool = True) -> GradientSum:
    """Sum of per-record joint gradients (prototypes, Omega), each clipped to L2 norm ``clip``.

    Ghost clipping: norms from dot products, the Omega sum as one (r x 2B)(2B x d) product
    (module docstring). ``clip=None`` sums unclipped gradients (the non-private baseline).
    """
    K, d = W.shape
    B = len(X)
    if B == 0:
        return GradientSum(np.zeros_like(W), None if omega is None else np.zeros_like(omega), 0.0, 0, np.zeros(0))
    t = batch_terms(X, y, W, wl, omega, phi, beta)
    if clip is None and omega is not None:
        return _unclipped_sum(t, W, omega, learn_omega)
    if clip is not None:
        _zero_nonfinite(t)
    # prototype parts: -2 a Omega^T u, with Omega^T u+- = Omega^T Omega x - (Omega^T Omega w)[j+-]: one
    # (B x r)(r x d) product shared by both sides instead of one per side
    if omega is None:
        Pp, Pm = t.Vp, t.Vm
    else:
        P, PW = t.Z @ omega, t.ZW @ omega
        Pp, Pm = P - PW[t.jp], P - PW[t.jm]
    with np.errstate(over="ignore", invalid="ignore"):  # an overflowed norm is handled below
        sq = 4.0 * (t.ap ** 2 * (Pp * Pp).sum(1) + t.am ** 2 * (Pm * Pm).sum(1))
        with_omega = omega is not None and learn_omega
        if with_omega:
            up2, um2 = (t.Up * t.Up).sum(1), (t.Um * t.Um).sum(1)
            vp2, vm2 = (t.Vp * t.Vp).sum(1), (t.Vm * t.Vm).sum(1)
            cross = (t.Up * t.Um).sum(1) * (t.Vp * t.Vm).sum(1)
            sq = sq + 4.0 * (t.ap ** 2 * up2 * vp2 + t.am ** 2 * um2 * vm2 + 2.0 * t.ap * t.am * cross)
        norms = np.sqrt(np.maximum(sq, 0.0))
    if clip is not None:  # a finite gradient whose norm overflowed: it is clipped to nothing, never to NaN
        big = ~np.isfinite(norms)
        if big.any():
            norms[big] = np.inf
            t.ap[big], t.am[big] = 0.0, 0.0
    if clip is None:
        s = np.ones(B)
    else:
        s = l2_clip_factors(norms, clip)
    cp, cm = -2.0 * s * t.ap, -2.0 * s * t.am
    # scatter-add the scaled prototype gradients with one (K x B) @ (B x d) product per side
    M = np.zeros((K, 2 * B))
    M[t.jp, np.arange(B)] = cp
    M[t.jm, B + np.arange(B)] = cm
    gW = M @ np.concatenate([Pp, Pm])
    gO = None
    if omega is not None:
        if learn_omega:
            coef = 2.0 * np.concatenate([s * t.ap, s * t.am])
            gO = (np.concatenate([t.Up, t.Um]) * coef[:, None]).T @ np.concatenate([t.Vp, t.Vm])
        else:
            gO = np.zeros_like(omega)
    return GradientSum(gW, gO, float(t.cost.sum()), int((norms > clip).sum()) if clip is not None else 0, norms)


def _zero_nonfinite(t: _Terms) -> None:
    """Zero, in place, every record whose gradient terms are not all finite (before clipping).

    A broadcast model can make one record's gradient non-finite (e.g. prototypes near 1e-90 and a
    rank-one Omega orthogonal to that record: S*S underflows to 0 and 0*inf is NaN), and a NaN
    would pass clipping and noise and tell whether the record was sampled. A zero contribution
    has norm 0 <= C, so the clipped sum keeps its sensitivity whatever the broadcast."""
    ok = np.isfinite(t.ap) & np.isfinite(t.am)
    for M in (t.Vp, t.Vm, t.Up, t.Um, t.Z):
        ok &= np.isfinite(M).all(axis=1)
    if ok.all():
        return
    bad = ~ok
    t.ap[bad], t.am[bad] = 0.0, 0.0
    for M in (t.Vp, t.Vm, t.Up, t.Um, t.Z):
        M[bad] = 0.0


def clipped_gradient_rows(X: np.ndarray, y: np.ndarray, W: np.ndarray, wl: np.ndarray,
                          omega: np.ndarray | None, clip: float, *, phi: str = "identity", beta: float = 1.0,
                          learn_omega: bool = True) -> np.ndarray:
    """Per-record joint gradients (prototypes, then Omega when learned), each clipped to L2 norm
    ``clip``, one flat row per record, shape (B, K d [+ r d]): the rows that distributed noise encodes
    one by one (one record, one privacy unit). Their sum is :func:`clipped_gradient_sum`."""
    K, d = W.shape
    with_omega = omega is not None and learn_omega
    width = K * d + (omega.size if with_omega else 0)
    B = len(X)
    if B == 0:
        return np.zeros((0, width))
    t = batch_terms(X, y, W, wl, omega, phi, beta)
    _zero_nonfinite(t)  # a non-finite record contributes zero (see there)
    if omega is None:
        Pp, Pm = t.Vp, t.Vm
    else:
        P, PW = t.Z @ omega, t.ZW @ omega
        Pp, Pm = P - PW[t.jp], P - PW[t.jm]
    rows = np.zeros((B, width))
    gW = rows[:, :K * d].reshape(B, K, d)
    idx = np.arange(B)
    gW[idx, t.jp] += (-2.0 * t.ap)[:, None] * Pp
    gW[idx, t.jm] += (-2.0 * t.am)[:, None] * Pm
    if with_omega:
        gO = rows[:, K * d:].reshape((B,) + omega.shape)
        gO += np.einsum("b,br,bd->brd", 2.0 * t.ap, t.Up, t.Vp) + np.einsum("b,br,bd->brd", 2.0 * t.am, t.Um, t.Vm)
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    rows *= l2_clip_factors(norms, clip)[:, None]
    return rows


def _unclipped_sum(t: _Terms, W: np.ndarray, omega: np.ndarray, learn_omega: bool) -> GradientSum:
    """Non-private batch gradient: Omega^T applied once per prototype, not once per record."""
    B = len(t.jp)
    M = np.zeros((len(W), 2 * B))
    M[t.jp, np.arange(B)] = -2.0 * t.ap
    M[t.jm, B + np.arange(B)] = -2.0 * t.am
    gW = (M @ np.concatenate([t.Up, t.Um])) @ omega
    gO = np.zeros_like(omega)
    if learn_omega:
        coef = 2.0 * np.concatenate([t.ap, t.am])
        gO = (np.concatenate([t.Up, t.Um]) * coef[:, None]).T @ np.concatenate([t.Vp, t.Vm])
    return GradientSum(gW, gO, float(t.cost.sum()), 0, np.full(B, np.nan))


def per_sample_gradients_naive(X: np.ndarray, y: np.ndarray, W: np.ndarray, wl: np.ndarray,
                               omega: np.ndarray | None, *, phi: str = "identity", beta: float = 1.0
                               ) -> tuple[np.ndarray, np.ndarray | None]:
    """Materialised per-record gradients, (B, K, d) and (B, r, d): the reference for tests only."""
    t = batch_terms(X, y, W, wl, omega, phi, beta)
    B = len(X)
    gW = np.zeros((B,) + W.shape)
    lam = np.eye(W.shape[1]) if omega is None else omega.T @ omega
    for i in range(B):  # deliberately naive
        gW[i, t.jp[i]] += -2.0 * t.ap[i] * lam @ t.Vp[i]
        gW[i, t.jm[i]] += -2.0 * t.am[i] * lam @ t.Vm[i]
    if omega is None:
        return gW, None
    gO = np.zeros((B,) + omega.shape)
    for i in range(B):
        gO[i] = 2.0 * t.ap[i] * np.outer(omega @ t.Vp[i], t.Vp[i]) + 2.0 * t.am[i] * np.outer(omega @ t.Vm[i], t.Vm[i])
    return gW, gO


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
