"""GLVQ / GMLVQ per-record gradients for the DP-SGD engine (:mod:`dpfed.algorithms.dpsgd`), with ghost norms.

Brinkrolf, Berger & Hammer (ESANN 2018) train GLVQ and GMLVQ by DP-SGD. Gradients of the cost of
:mod:`dpfed.algorithms.lvq.model` (write v = x - w, u = Omega v, a+ = dPhi/dmu * 2 d- / (d+ + d-)^2,
a- = -dPhi/dmu * 2 d+ / (d+ + d-)^2):

* ``dcost/dw+ = -2 a+ Omega^T u+`` and ``dcost/dw- = -2 a- Omega^T u-``;
* ``dcost/dOmega = 2 a+ u+ v+^T + 2 a- u- v-^T``: two rank-one outer products per record.

So a record's squared gradient norm needs only dot products (``ghost norms``):
``|g_Omega|^2 = 4 (a+^2 |u+|^2 |v+|^2 + a-^2 |u-|^2 |v-|^2 + 2 a+ a- (u+.u-)(v+.v-))``, and the
clipped sum over a batch is the one matrix product ``2 [U+; U-]^T diag(s a) [V+; V-]``: no (d x d)
matrix per record is ever formed. :class:`LVQGradient` hands both to the engine; the flat gradient is
the prototypes, then Omega when it is learned.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from dp_accounting import DpEvent

from dpfed.algorithms.dpsgd import clipped_rows, ghost_clipped_sum, noisy_sum
from dpfed.algorithms.lvq.model import Terms, batch_terms
from dpfed.core.rng import SecureRNG

__all__ = ["LVQGradient", "LVQGhost", "GradientSum", "zero_nonfinite", "clipped_gradient_sum",
           "clipped_gradient_rows", "per_sample_gradients_naive", "gradient_release", "noisy_gradient_sum"]


@dataclass
class GradientSum:
    """Sum over a batch of (clipped) per-record gradients of the cost."""

    prototypes: np.ndarray           # (K, d)
    omega: np.ndarray | None         # (r, d) or None for GLVQ
    cost: float                      # sum of Phi(mu) over the batch (before clipping)
    clipped: int                     # records whose gradient norm exceeded the clip
    norms: np.ndarray                # (B,) per-record gradient norms before clipping


def zero_nonfinite(t: Terms) -> None:
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


def _prototype_parts(t: Terms, omega: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Omega^T u+- = Omega^T Omega x - (Omega^T Omega w)[j+-]: one (B x r)(r x d) product shared by both
    sides instead of one per side (u = v for GLVQ)."""
    if omega is None:
        return t.Vp, t.Vm
    P, PW = t.Z @ omega, t.ZW @ omega
    return P - PW[t.jp], P - PW[t.jm]


class LVQGhost:
    """One batch's gradients for ghost clipping: norms from dot products, weighted sums as matrix products.
    With ``guard`` (clipped sums) a record whose norm overflows is clipped to nothing, never to NaN."""

    def __init__(self, t: Terms, W: np.ndarray, omega: np.ndarray | None, learn_omega: bool, guard: bool) -> None:
        self.t, self.W, self.omega, self.guard = t, W, omega, guard
        self.with_omega = omega is not None and learn_omega
        self.Pp, self.Pm = _prototype_parts(t, omega)

    @property
    def cost(self) -> float:
        return float(self.t.cost.sum())

    def norms(self) -> np.ndarray:
        t = self.t
        with np.errstate(over="ignore", invalid="ignore"):  # an overflowed norm is handled below
            sq = 4.0 * (t.ap ** 2 * (self.Pp * self.Pp).sum(1) + t.am ** 2 * (self.Pm * self.Pm).sum(1))
            if self.with_omega:
                up2, um2 = (t.Up * t.Up).sum(1), (t.Um * t.Um).sum(1)
                vp2, vm2 = (t.Vp * t.Vp).sum(1), (t.Vm * t.Vm).sum(1)
                cross = (t.Up * t.Um).sum(1) * (t.Vp * t.Vm).sum(1)
                sq = sq + 4.0 * (t.ap ** 2 * up2 * vp2 + t.am ** 2 * um2 * vm2 + 2.0 * t.ap * t.am * cross)
            norms = np.sqrt(np.maximum(sq, 0.0))
        if self.guard:  # a finite gradient whose norm overflowed: it is clipped to nothing, never to NaN
            big = ~np.isfinite(norms)
            if big.any():
                norms[big] = np.inf
                t.ap[big], t.am[big] = 0.0, 0.0
        return norms

    def weighted_sum(self, weights: np.ndarray) -> np.ndarray:
        """Flat ``sum_i s_i g_i``: the prototypes' part scatter-added by one (K x 2B) @ (2B x d) product,
        Omega's as one (r x 2B) @ (2B x d) product."""
        t, s, B = self.t, weights, len(weights)
        M = np.zeros((len(self.W), 2 * B))
        M[t.jp, np.arange(B)] = -2.0 * s * t.ap
        M[t.jm, B + np.arange(B)] = -2.0 * s * t.am
        gW = M @ np.concatenate([self.Pp, self.Pm])
        if not self.with_omega:
            return gW.ravel()
        coef = 2.0 * np.concatenate([s * t.ap, s * t.am])
        gO = (np.concatenate([t.Up, t.Um]) * coef[:, None]).T @ np.concatenate([t.Vp, t.Vm])
        return np.concatenate([gW.ravel(), gO.ravel()])


class LVQGradient:
    """The joint gradient (prototypes, then Omega when learned) of the GLVQ cost at a broadcast model:
    a :class:`dpfed.algorithms.dpsgd.PerRecordGradient` with ghost clipping."""

    def __init__(self, W: np.ndarray, wl: np.ndarray, omega: np.ndarray | None, *, phi: str = "identity",
                 beta: float = 1.0, learn_omega: bool = True) -> None:
        self.W, self.wl, self.omega, self.phi, self.beta = W, wl, omega, phi, beta
        self.learn_omega = learn_omega
        self.with_omega = omega is not None and learn_omega

    @property
    def dimension(self) -> int:
        return self.W.size + (self.omega.size if self.omega is not None and self.with_omega else 0)

    def terms(self, X: np.ndarray, y: np.ndarray) -> Terms:
        return batch_terms(X, y, self.W, self.wl, self.omega, self.phi, self.beta)

    def ghost(self, X: np.ndarray, y: np.ndarray | None, guard: bool = True) -> LVQGhost:
        assert y is not None
        t = self.terms(X, y)
        if guard:
            zero_nonfinite(t)
        return LVQGhost(t, self.W, self.omega, self.learn_omega, guard)

    def rows(self, X: np.ndarray, y: np.ndarray | None) -> np.ndarray:
        assert y is not None
        K, d = self.W.shape
        B = len(X)
        t = self.terms(X, y)
        zero_nonfinite(t)  # a non-finite record contributes zero (see there)
        Pp, Pm = _prototype_parts(t, self.omega)
        rows = np.zeros((B, self.dimension))
        gW = rows[:, :K * d].reshape(B, K, d)
        idx = np.arange(B)
        gW[idx, t.jp] += (-2.0 * t.ap)[:, None] * Pp
        gW[idx, t.jm] += (-2.0 * t.am)[:, None] * Pm
        if self.with_omega:
            assert self.omega is not None
            gO = rows[:, K * d:].reshape((B,) + self.omega.shape)
            gO += (np.einsum("b,br,bd->brd", 2.0 * t.ap, t.Up, t.Vp)
                   + np.einsum("b,br,bd->brd", 2.0 * t.am, t.Um, t.Vm))
        return rows

    def split(self, flat: np.ndarray, cost: float, clipped: int, norms: np.ndarray) -> GradientSum:
        """A flat gradient back into prototypes and Omega (zero when Omega is not learned)."""
        k = self.W.size
        omega = None if self.omega is None else (
            flat[k:].reshape(self.omega.shape) if self.with_omega else np.zeros_like(self.omega))
        return GradientSum(flat[:k].reshape(self.W.shape), omega, cost, clipped, norms)

    def zero_sum(self) -> GradientSum:
        """The sum over no records."""
        return GradientSum(np.zeros_like(self.W), None if self.omega is None else np.zeros_like(self.omega),
                           0.0, 0, np.zeros(0))

    def clipped_sum(self, X: np.ndarray, y: np.ndarray, clip: float) -> GradientSum:
        """The batch's gradients, each clipped to L2 norm ``clip`` by ghost clipping, summed."""
        if len(X) == 0:
            return self.zero_sum()
        batch = self.ghost(X, y)
        s = ghost_clipped_sum(batch, clip)
        return self.split(s.vector, batch.cost, s.clipped, s.norms)

    def release(self, X: np.ndarray, y: np.ndarray, clip: float, noise_multiplier: float, rng: SecureRNG, *,
                exact: bool = False, parties: int = 1) -> tuple[GradientSum, DpEvent]:
        """One party's DP-SGD release on the records (X, y): the clipped gradient sum plus N(0, (z C)^2)
        on every learned entry (1/``parties`` of that variance under distributed noise), and the release's
        event: one Gaussian mechanism over the flat (prototypes, Omega) vector
        (:func:`dpfed.algorithms.dpsgd.noisy_sum`)."""
        g = self.clipped_sum(X, y, clip)
        flat = np.concatenate([g.prototypes.ravel()] + ([g.omega.ravel()] if g.omega is not None and self.with_omega
                                                        else []))
        noisy, event = noisy_sum(flat, clip, noise_multiplier, rng, exact=exact, parties=parties)
        k = g.prototypes.size
        g.prototypes[...] = noisy[:k].reshape(g.prototypes.shape)
        if g.omega is not None and self.with_omega:
            g.omega[...] = noisy[k:].reshape(g.omega.shape)
        return g, event


def clipped_gradient_sum(X: np.ndarray, y: np.ndarray, W: np.ndarray, wl: np.ndarray,
                         omega: np.ndarray | None, clip: float | None, *, phi: str = "identity",
                         beta: float = 1.0, learn_omega: bool = True) -> GradientSum:
    """Sum of per-record joint gradients (prototypes, Omega), each clipped to L2 norm ``clip``, by ghost
    clipping (module docstring). ``clip=None`` sums unclipped gradients (the non-private baseline)."""
    grad = LVQGradient(W, wl, omega, phi=phi, beta=beta, learn_omega=learn_omega)
    if clip is None:
        return _unclipped_sum(grad, X, y)
    return grad.clipped_sum(X, y, clip)


def clipped_gradient_rows(X: np.ndarray, y: np.ndarray, W: np.ndarray, wl: np.ndarray,
                          omega: np.ndarray | None, clip: float, *, phi: str = "identity", beta: float = 1.0,
                          learn_omega: bool = True) -> np.ndarray:
    """Per-record joint gradients (prototypes, then Omega when learned), each clipped to L2 norm
    ``clip``, one flat row per record, shape (B, K d [+ r d]): the rows that distributed noise encodes
    one by one (one record, one privacy unit). Their sum is :func:`clipped_gradient_sum`."""
    return clipped_rows(LVQGradient(W, wl, omega, phi=phi, beta=beta, learn_omega=learn_omega), X, y, clip)


def _unclipped_sum(grad: LVQGradient, X: np.ndarray, y: np.ndarray) -> GradientSum:
    """Non-private batch gradient; for GMLVQ Omega^T is applied once per prototype, not once per record."""
    if len(X) == 0:
        return grad.zero_sum()
    if grad.omega is None:
        batch = grad.ghost(X, y, guard=False)
        norms = batch.norms()
        return grad.split(batch.weighted_sum(np.ones(len(X))), batch.cost, 0, norms)
    t, omega = grad.terms(X, y), grad.omega
    B = len(t.jp)
    M = np.zeros((len(grad.W), 2 * B))
    M[t.jp, np.arange(B)] = -2.0 * t.ap
    M[t.jm, B + np.arange(B)] = -2.0 * t.am
    gW = (M @ np.concatenate([t.Up, t.Um])) @ omega
    gO = np.zeros_like(omega)
    if grad.learn_omega:
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


def gradient_release(X: np.ndarray, y: np.ndarray, W: np.ndarray, wl: np.ndarray, omega: np.ndarray | None,
                     clip: float, noise_multiplier: float, rng: SecureRNG, *, phi: str = "identity",
                     beta: float = 1.0, learn_omega: bool = True, exact: bool = False, parties: int = 1
                     ) -> tuple[GradientSum, DpEvent]:
    """One party's DP-SGD release: the clipped gradient sum plus N(0, (z C)^2) on every learned entry
    (1/``parties`` of that variance under distributed noise), and the release's event
    (:meth:`LVQGradient.release`)."""
    return LVQGradient(W, wl, omega, phi=phi, beta=beta, learn_omega=learn_omega).release(
        X, y, clip, noise_multiplier, rng, exact=exact, parties=parties)


def noisy_gradient_sum(X: np.ndarray, y: np.ndarray, W: np.ndarray, wl: np.ndarray, omega: np.ndarray | None,
                       clip: float, std: float, rng: SecureRNG, *, phi: str = "identity", beta: float = 1.0,
                       learn_omega: bool = True, exact: bool = False) -> GradientSum:
    """:func:`gradient_release` with the noise given as its standard deviation ``std`` (= z C)."""
    return gradient_release(X, y, W, wl, omega, clip, std / clip, rng, phi=phi, beta=beta,
                            learn_omega=learn_omega, exact=exact)[0]
