"""The distributed discrete Laplace under secure aggregation: every party adds one Polya share
(:func:`dpfed.core.polya.sample_polya_share`) to its integer vector mod 2^B, planned for ``shares`` = P_min - c
honest shares, which alone sum to the discrete Laplace of ``scale`` (Goryczka & Xiong 2017). One
record moves the survivors' integer sum by at most ``l1`` in L1, so the release is the discrete Laplace mechanism
(Ghosh, Roughgarden & Sundararajan 2009) with pure epsilon l1 / scale, whatever the other shares (independent
noise: post-processing). Charged as the randomized-response pair ``DiscreteLaplaceDpEvent(epsilon, 1)``, which
dominates every epsilon-DP mechanism (Kairouz, Oh & Viswanath 2015), the event the local discrete Laplace
releases of dpfed are charged with too; both ledgers (PLD and RDP) account it.

A plan may give each block of the vector its own scale (:attr:`PolyaNoisePlan.blocks`: runs of entries, each
with its scale t_b and its L1 sensitivity l1_b): the honest shares then sum to independent discrete Laplace
noise per block, and the release is pure sum_b l1_b / t_b (basic composition of pure DP).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from dp_accounting import dp_event

from dpfed.core.polya import geometric_tail_bound, polya_share_variance, sample_polya_share
from dpfed.core.rng import SecureRNG
from dpfed.core.samplers import laplace_fraction

__all__ = ["PolyaNoisePlan", "polya_scale", "polya_bits"]


def polya_scale(l1: int, epsilon: float) -> Fraction:
    """The summed discrete Laplace's scale for integer L1 sensitivity ``l1`` at ``epsilon``: (l1 + 1) / epsilon
    as an exact rational rounded up (:func:`dpfed.core.samplers.laplace_fraction`), so l1 / scale < epsilon
    exactly (the +1 as in :func:`dpfed.core.mechanisms.discrete_laplace` above its exact-PLD range)."""
    if int(l1) != l1 or l1 < 1 or not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError("the distributed discrete Laplace needs an integer l1 >= 1 and a finite epsilon > 0")
    return laplace_fraction(Fraction(int(l1) + 1) / Fraction(float(epsilon)))


@dataclass(frozen=True)
class PolyaNoisePlan:
    """One integer release's distributed discrete Laplace: its scale (of the sum of ``shares`` shares) and the
    honest shares it is planned for (the L1 sensitivity is the release's own, e.g. ``SecurePlan.l1``)."""

    scale: Fraction
    shares: int
    #: Per-block scales (module docstring): (entries, scale t_b, L1 sensitivity l1_b) runs covering the vector in
    #: order; ``scale`` is then their largest (the modulus' tail bound). Empty: ``scale`` on every entry.
    blocks: tuple[tuple[int, Fraction, int], ...] = ()

    def __post_init__(self) -> None:
        if not (isinstance(self.scale, Fraction) and self.scale > 0 and self.shares >= 1):
            raise ValueError("a Polya noise plan needs a positive rational scale and shares >= 1")
        if self.blocks and (any(n < 1 or not (isinstance(t, Fraction) and 0 < t <= self.scale) or int(b) != b or b < 1
                                for n, t, b in self.blocks) or max(t for _, t, _ in self.blocks) != self.scale):
            raise ValueError("per-block Polya scales need entries >= 1, integer l1 >= 1 and the largest as `scale`")

    def epsilon(self, l1: float) -> float:
        """The pure epsilon l1 / scale of a release of L1 sensitivity ``l1`` (per-block: sum_b l1_b / t_b times
        l1 / sum_b l1_b, 1 for the plan's own L1), as the smallest float not below the exact rational."""
        if self.blocks:  # an ``l1`` other than the blocks' sum scales every block's sensitivity alike
            exact = sum((Fraction(b) / t for _, t, b in self.blocks), Fraction(0))
            exact *= Fraction(float(l1)) / sum(b for _, _, b in self.blocks)
        else:
            exact = Fraction(float(l1)) / self.scale
        e = float(exact)
        return e if Fraction(e) >= exact else float(np.nextafter(e, np.inf))

    def event(self, l1: float) -> dp_event.DpEvent:
        """The event of a release of L1 sensitivity ``l1``: the randomized-response pair of pure epsilon l1 / scale
        (module docstring)."""
        if not (l1 > 0 and math.isfinite(l1)):
            raise ValueError("the L1 sensitivity must be positive and finite")
        return dp_event.DiscreteLaplaceDpEvent(noise_parameter=self.epsilon(l1), sensitivity=1)

    def share_variance(self) -> float:
        """Variance of one party's share (``shares`` of them: the discrete Laplace's variance) at ``scale`` (the
        largest block's)."""
        return polya_share_variance(self.scale, self.shares)

    def add_noise_mod(self, values: np.ndarray, bits: int, rng: SecureRNG) -> np.ndarray:
        """(values + one Polya share) mod 2^bits as uint64 words."""
        values = np.asarray(values)
        if values.dtype.kind not in "iu":
            raise TypeError("the distributed discrete Laplace takes integer values")
        if self.blocks:
            if values.shape != (sum(n for n, _, _ in self.blocks),):
                raise ValueError("a per-block Polya plan takes one vector of its blocks' entries")
            noise = np.concatenate([sample_polya_share(t, self.shares, n, rng) for n, t, _ in self.blocks])
        else:
            noise = sample_polya_share(self.scale, self.shares, values.shape, rng)
        noise += values.astype(np.int64, copy=False)
        noise &= (1 << int(bits)) - 1
        wrapped: np.ndarray = noise.view(np.uint64)
        return wrapped


def polya_bits(floor_bits: int, entry_max: float, plan: PolyaNoisePlan, parties: int, dimension: int,
               wrap_probability: float) -> int:
    """The fewest bits >= ``floor_bits`` holding a noiseless sum in [-entry_max, entry_max] plus the noise of all
    ``parties`` shares on all ``dimension`` entries except with probability ``wrap_probability`` (the tail bound
    :func:`dpfed.core.polya.geometric_tail_bound`, union bound). A wrapped entry is a post-processing of the
    noisy sum: it costs accuracy, never privacy."""
    tail = geometric_tail_bound(plan.scale, plan.shares, parties, wrap_probability / max(1, int(dimension)))
    bits = max(int(floor_bits), math.ceil(math.log2(float(entry_max) + tail + 1.0)) + 1)
    if bits > 62:
        raise ValueError(f"an integer release with entries up to {entry_max:.3g} needs more than 62 bits")
    return bits
