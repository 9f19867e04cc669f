"""One DP-SGD step's release: the Poisson sample, the Gaussian noise on the clipped sum, its event.

The noise is one Gaussian mechanism over the whole flat clipped sum (L2 sensitivity C, add/remove):
:func:`dpfed.core.mechanisms.float_gaussian` (ziggurat draws from the ChaCha20 keystream, as Opacus and
TF Privacy draw float noise) or, with ``exact``, :func:`dpfed.core.mechanisms.gaussian` (the sum on a
public grid plus exact rounded-Gaussian noise: floating-point safe, slower). A step on a Poisson(q)
sample is the subsampled Gaussian ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` (Abadi et al. 2016).
"""
from __future__ import annotations

import numpy as np
from dp_accounting import DpEvent, dp_event

from dpfed.core.mechanisms import float_gaussian, gaussian
from dpfed.core.rng import SecureRNG

__all__ = ["poisson_sample", "noisy_sum", "step_event", "subsampled"]


def poisson_sample(rng: SecureRNG, n: int, sampling_rate: float) -> np.ndarray:
    """Boolean mask of a Poisson sample of ``n`` records: each included independently with probability q."""
    return rng.poisson_mask(n, float(sampling_rate))


def noisy_sum(vector: np.ndarray, clip: float, noise_multiplier: float, rng: SecureRNG, *, exact: bool = False,
              parties: int = 1) -> tuple[np.ndarray, DpEvent]:
    """``vector`` (a sum of gradients clipped to ``clip``) plus N(0, (z C)^2) on every coordinate, with
    1/``parties`` of that variance at each of P parties under distributed noise; and the release's event
    (on the records the sum was taken over: wrap it in :func:`subsampled` for a Poisson sample)."""
    mech = gaussian if exact else float_gaussian
    rel = mech(vector, sensitivity=clip, noise_multiplier=noise_multiplier, parties=parties, rng=rng)
    return np.asarray(rel.value), rel.event


def subsampled(sampling_rate: float, event: DpEvent) -> DpEvent:
    """``event`` run on a Poisson(q) sample of the records."""
    return dp_event.PoissonSampledDpEvent(float(sampling_rate), event)


def step_event(sampling_rate: float, noise_multiplier: float) -> DpEvent:
    """The planned event of one step: the Poisson-subsampled Gaussian with multiplier z."""
    return subsampled(sampling_rate, dp_event.GaussianDpEvent(float(noise_multiplier)))
