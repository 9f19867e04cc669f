"""One round's public plan of a release under secure aggregation (:class:`SecurePlan`).

Both sides derive it from public parameters alone (:mod:`dpfed.algorithms.secure_noise` calibrates the
noise); the party encodes its rows in :attr:`SecurePlan.layout`, the coordinator decodes the survivors'
sum with :meth:`SecurePlan.decode` (Kairouz, Liu & Steinke ICML 2021, Alg. 2). Kept apart from the
calibration so that the contract can name it without importing the parameter tables.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from dp_accounting import DpEvent

from dpfed.core import distributed_noise as dn
from dpfed.core.distributed_laplace import PolyaNoisePlan
from dpfed.core.events import DistributedDiscreteGaussianDpEvent
from dpfed.core.rng import SecureRNG

__all__ = ["SecurePlan"]


@dataclass(frozen=True)
class SecurePlan:
    """One round's secure release: the noise plan, the layout of the flat vector, the rotation seed."""

    noise: dn.DistributedNoisePlan
    layout: tuple[tuple[str, tuple[int, ...]], ...]
    seed: bytes
    #: True: the rows are already integer vectors with exact sensitivities (no clip, rotation, scale or
    #: rounding; ``noise.dimension`` coordinates, no padding) and the decoded sum is int64.
    integer: bool = False
    #: An ``integer`` plan's exact L1 sensitivity (its L2 one is ``noise.clip``); None: not stated (then
    #: :meth:`event` cannot be computed and the release gate refuses the round).
    l1: float | None = None
    #: An ``integer`` plan's distributed discrete Laplace (:mod:`dpfed.core.distributed_laplace`): each party
    #: adds one Polya share instead of a discrete Gaussian one, and :meth:`event` is the Laplace's pure-epsilon
    #: event (``noise`` then keeps the modulus, dimension and parties; its ``sigma_share`` is informational:
    #: the Polya share's standard deviation). None: the distributed discrete Gaussian.
    laplace: PolyaNoisePlan | None = None

    def __post_init__(self) -> None:
        if self.laplace is not None and not self.integer:
            raise ValueError("a distributed discrete Laplace plan needs integer rows (and their exact L1 sensitivity)")

    @property
    def dimension(self) -> int:
        return int(sum(math.prod(s) for _, s in self.layout))

    @property
    def length(self) -> int:
        """Coordinates of the masked vector: the dimension (the rotation keeps it; no padding)."""
        return self.noise.dimension

    def event(self) -> DpEvent:
        """The privacy event of this one round's release, from the plan itself (what the release gate compares
        with the round's charged ``task_event``). Real rows: ``noise.event()`` for one step (KLS21 Thm. 1 with
        the rounding slack, Poisson-subsampled when the plan samples); integer rows: the distributed discrete
        Gaussian with the exact sensitivities (``noise.clip`` in L2, :attr:`l1`). ValueError if not stated."""
        if not self.integer:
            return replace(self.noise, steps=1).event()
        if self.l1 is None:
            raise ValueError("an integer secure plan must state its L1 sensitivity")
        if self.laplace is not None:
            return self.laplace.event(self.l1)
        return DistributedDiscreteGaussianDpEvent(float(self.noise.sigma_share), int(self.noise.honest_parties),
                                                  float(self.noise.clip), float(self.l1), int(self.noise.dimension))

    def add_noise_mod(self, values: np.ndarray, rng: SecureRNG) -> np.ndarray:
        """(values + this party's noise share) mod 2^B as uint64 words: a Polya share under :attr:`laplace`, else a
        discrete Gaussian share N_Z(0, sigma_share^2) (KLS21 Alg. 1)."""
        if self.laplace is not None:
            return self.laplace.add_noise_mod(values, self.noise.bits, rng)
        return dn.add_noise_mod(values, self.noise.sigma_share, self.noise.bits, rng)

    def decode(self, total: np.ndarray) -> dict[str, np.ndarray]:
        """The survivors' sum mod 2^B as the named arrays (KLS21 Alg. 2, or centring only for integers)."""
        if self.integer:
            return self.split(dn.decode_integers(total, self.noise.bits))
        return self.split(dn.decode(total, self.noise, seed=self.seed))

    def split(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """The decoded flat vector as the named arrays of :attr:`layout`."""
        out, at = {}, 0
        for name, shape in self.layout:
            k = math.prod(shape)
            out[name] = np.asarray(flat[at:at + k], dtype=np.int64 if self.integer else np.float64).reshape(shape)
            at += k
        return out
