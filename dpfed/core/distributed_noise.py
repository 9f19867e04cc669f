"""Distributed discrete Gaussian noise for secure aggregation: the encoder, its plan and its modulus.

Kairouz, Liu & Steinke, ICML 2021, "The Distributed Discrete Gaussian Mechanism for Federated
Learning with Secure Aggregation" (arXiv 2102.06387, cited as KLS21). A party turns its real vector
into integers mod 2^B that secure aggregation can sum (KLS21 Alg. 1):

    clip to L2 norm c  ->  x' = R x / gamma   (R: two overlapping randomized Hadamard blocks of
    n = 2^floor(log2 d) coordinates with public signs, orthogonal, d coordinates: :func:`rotate`)
    ->  conditional randomized rounding of x' to Z^d (retry until ||round||_2 <= Delta_2)
    ->  + a noise share y ~ N_Z(0, sigma_share^2)^d (exact sampler, SecureRNG)  ->  mod 2^B.

The server decodes the sum mod 2^B: centre to [-2^(B-1), 2^(B-1)), times gamma, inverse rotation.
KLS21 pads to d' = 2^ceil(log2 d) for one Hadamard block; here nothing is padded, so every length,
the sensitivities and the accounting use d itself, and the upload is d * B bits. The only price is
flatness: a coordinate's variance proxy is ||x||^2 / n with n > d/2 instead of ||x||^2 / d'
(:func:`rotation_block`), which enters the modulus headroom (:func:`choose_gamma`,
:func:`wraparound_bound`), never the privacy. ``sigma_share`` is in integer (lattice) units, so the
real noise of one share is gamma * sigma_share.

Privacy unit: one *encoded vector* (one row given to :func:`quantize`). Adding or removing it moves
the integer sum by its rounded vector, of L2 norm <= Delta_2 (:func:`rounded_l2_bound`) and L1 norm
<= Delta_1 (:func:`rounded_l1_bound`): KLS21's client-level setting. For record-level privacy inside
a party, pass the party's per-record vectors as rows (each rounded on its own, then summed).
"party" rounding (:func:`quantize_party_sum`) rounds a party's float sum of clipped rows once instead:
one record then moves the real vector that is rounded by at most clip / gamma, and
:func:`party_rounding_rdp` accounts the rounding by a coupling argument.

Accounting (RDP, add/remove neighbours; the event and its bound are in :mod:`dpfed.core.events`, as
dp-accounting keeps its events apart, the conversion and calibration in
:mod:`dpfed.core.ddgauss_calibration`; rotation and rounding in :mod:`dpfed.core.rotation` and
:mod:`dpfed.core.rounding`): the sum of n i.i.d. N_Z(0, sigma^2) shares is close to
N_Z(0, n sigma^2) (KLS21 Thm. 1 / Prop. 14, :func:`ddgauss_rdp`); Poisson subsampling by the binomial
expansion, valid in both directions because the mechanism is symmetric under a reflection
(:func:`poisson_subsampled_rdp`, with the proof), for integer orders.
Wrap-around mod 2^B is a post-processing of the noisy sum: it costs utility, never privacy; its
probability is bounded by :func:`wraparound_bound` (sub-Gaussian tails, union over coordinates).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from dp_accounting import dp_event
from dp_accounting.dp_event import DpEvent

from dpfed.core.ddgauss_calibration import calibrate_sigma_share, ddgauss_epsilon, distributed_dp_sgd_epsilon
from dpfed.core.dgauss_alias import sample_discrete_gaussian_alias
from dpfed.core.events import ROUNDINGS, DistributedDiscreteGaussianDpEvent
from dpfed.core.rng import SecureRNG
from dpfed.core.rotation import padded_dimension, rotate, rotate_inplace, rotation_block, rotation_signs, unrotate
from dpfed.core.rounding import (
    DEFAULT_BETA,
    clip_rows,
    conditional_round,
    conditional_round32,
    party_round,
    party_row_sum,
    party_sum_l2_bound,
    rounded_l1_bound,
    rounded_l2_bound,
)

# The encoder's parts (rotation, rounding) and its accounting are re-exported: callers use one module.
__all__ = [
    "DistributedNoisePlan", "DEFAULT_BETA", "ROUNDINGS",
    "padded_dimension", "rotation_block", "rotation_signs", "rotate", "unrotate", "clip_rows",
    "rounded_l2_bound", "rounded_l1_bound", "conditional_round", "conditional_round32", "quantize", "add_noise_mod",
    "encode", "modular_sum", "decode_integers", "decode", "choose_gamma", "choose_bits",
    "wraparound_bound", "party_sum_l2_bound", "party_round", "quantize_party_sum", "party_row_sum",
    "ddgauss_epsilon", "distributed_dp_sgd_epsilon", "calibrate_sigma_share", "plan_distributed_noise",
]

_MAX_BITS = 62
_CHUNK_ELEMENTS = 1 << 20  # rows are encoded in chunks of about this many coordinates (~30 MB of temporaries)
#: Longer rows are encoded in float64 (:func:`quantize`): the float32 pre-check of
#: :func:`conditional_round32` needs (d + 1) 2^-24 < 1/4.
_FLOAT32_MAX_DIMENSION = (1 << 22) - 1
_MAX_PARTY_ROWS = 10 ** 9


# --------------------------------------------------------------------------- plan, encode, decode

@dataclasses.dataclass(frozen=True)
class DistributedNoisePlan:
    """Public parameters of one distributed-noise release (all parties and the server agree).

    ``sigma_share`` is each party's noise share in integer units; ``honest_parties`` is the number
    of shares the accounting counts (minimum survivors minus colluders); ``vectors`` and ``parties``
    bound the encoded vectors and noise shares in one sum (for the modulus headroom).
    """

    dimension: int
    clip: float
    gamma: float
    bits: int
    sigma_share: float
    beta: float = DEFAULT_BETA
    honest_parties: int = 1
    parties: int = 1
    vectors: int = 1
    sampling_rate: float = 1.0
    steps: int = 1
    #: "record": every record's row rounded on its own (:func:`quantize`, KLS21 Alg. 1); "party": a party's
    #: clipped rows summed in float64 and the sum rounded once (:func:`quantize_party_sum`).
    rounding: str = "record"
    #: "party" rounding: a public bound on the rows a party sums (its sum is clipped to rows_max * clip).
    rows_max: int = 1

    def __post_init__(self) -> None:
        padded_dimension(self.dimension)
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"rounding must be one of {ROUNDINGS}, got {self.rounding!r}")
        if not (isinstance(self.rows_max, int) and 1 <= self.rows_max <= _MAX_PARTY_ROWS):
            raise ValueError(f"rows_max must be an integer in [1, {_MAX_PARTY_ROWS}], got {self.rows_max!r}")
        if not (self.gamma > 0 and math.isfinite(self.gamma)):
            raise ValueError(f"gamma must be positive and finite, got {self.gamma!r}")
        if not (int(self.bits) == self.bits and 2 <= self.bits <= _MAX_BITS):
            raise ValueError(f"bits must be an integer in [2, {_MAX_BITS}], got {self.bits!r}")
        if not self.sigma_share >= 0.5:
            raise ValueError(f"sigma_share must be >= 1/2 (KLS21 Thm. 1), got {self.sigma_share!r}")
        if not (1 <= self.honest_parties <= self.parties and self.vectors >= 1):
            raise ValueError("need 1 <= honest_parties <= parties and vectors >= 1")
        rounded_l2_bound(self.clip / self.gamma, self.beta, self.padded_dimension)

    @property
    def padded_dimension(self) -> int:
        """Coordinates of an encoded vector: ``dimension`` (no padding; name kept for callers)."""
        return padded_dimension(self.dimension)

    @property
    def l2_sensitivity(self) -> float:
        """Delta_2 in integer units. "party" rounding: the bound on how far one record moves the scaled,
        rotated party sum before rounding, clip / gamma plus the float margin (:func:`party_sum_l2_bound`).
        "record" rounding: the norm bound of one rounded vector, in d dimensions. Valid
        without padding: R is orthogonal, so ||R x / gamma|| <= clip / gamma, and the conditional
        rounding bound (KLS21 Alg. 1, :func:`rounded_l2_bound`) holds for any vector of R^d."""
        if self.rounding == "party":
            return party_sum_l2_bound(self.clip / self.gamma, self.rows_max)
        return rounded_l2_bound(self.clip / self.gamma, self.beta, self.padded_dimension)

    @property
    def l1_sensitivity(self) -> float:
        return rounded_l1_bound(self.l2_sensitivity, self.padded_dimension)

    def event(self) -> DpEvent:
        """The release(s) as a DpEvent: ``steps`` x (Poisson(q) x the distributed discrete Gaussian)."""
        ev: DpEvent = DistributedDiscreteGaussianDpEvent(
            float(self.sigma_share), int(self.honest_parties), float(self.l2_sensitivity),
            float(self.l1_sensitivity), int(self.padded_dimension), str(self.rounding))
        if self.sampling_rate < 1:
            ev = dp_event.PoissonSampledDpEvent(float(self.sampling_rate), ev)
        return ev if self.steps == 1 else dp_event.SelfComposedDpEvent(ev, int(self.steps))

    def wraparound(self) -> tuple[float, float]:
        """:func:`wraparound_bound` of this plan (per coordinate, any coordinate)."""
        return wraparound_bound(self.bits, self.gamma, vectors=self.vectors, shares=self.parties,
                                clip=self.clip, dimension=self.dimension,
                                sigma_share=self.sigma_share)


def quantize(x: np.ndarray, plan: DistributedNoisePlan, *, seed: bytes,
             rng: SecureRNG) -> np.ndarray:
    """Clip, rotate, scale by 1/gamma and conditionally round each row of ``x`` (1-D: one vector);
    returns the int64 sum of the rounded rows (length d). Each row is one privacy unit. The clip
    factor and 1/gamma are applied in one pass and the rotation works on that copy (R is linear).

    The rotation and the rounding run in float32 (:func:`fwht`, :func:`conditional_round32`). A
    float error cannot break privacy: the sensitivity argument (KLS21 Thm. 1) needs only that each
    row's rounded integer vector has ||r||_2 <= Delta_2, and that is checked exactly in integers
    after rounding, whatever real vector the floats produced; the rounded vectors and the noise
    share are integers, summed exactly. Floats only move the point that is rounded: by < 2^-24
    relative per float32 operation, so ||fl(R x / gamma) - R x / gamma|| <~ 2^-24 (log2 d + 3)
    ||x|| / gamma (a few 1e-6 of the vector), far below the rounding's own sqrt(d)/2 and the noise
    (tests/core/test_distributed_noise.py checks the decoded sums against the float64 pipeline)."""
    rows = np.atleast_2d(np.asarray(x, dtype=np.float64))
    if rows.shape[-1] != plan.dimension:
        raise ValueError(f"expected vectors of dimension {plan.dimension}, got {rows.shape[-1]}")
    total = np.zeros(plan.dimension, dtype=np.int64)
    step = max(1, _CHUNK_ELEMENTS // plan.dimension)  # bounded memory for many rows
    bound = plan.l2_sensitivity
    single = plan.dimension < _FLOAT32_MAX_DIMENSION  # conditional_round32's pre-check needs (d+1) 2^-24 < 1/4
    for lo in range(0, rows.shape[0], step):
        scaled = clip_rows(rows[lo:lo + step], plan.clip, scale=1.0 / plan.gamma,
                           dtype=np.float32 if single else np.float64)
        rotate_inplace(scaled, seed)
        rounded = conditional_round32(scaled, bound, rng) if single else conditional_round(scaled, bound, rng)
        total += rounded.sum(axis=0)
    return total



def quantize_party_sum(total: np.ndarray, plan: DistributedNoisePlan, *, seed: bytes,
                       rng: SecureRNG) -> np.ndarray:
    """"party" rounding: a party's float64 sum of clipped rows (``total``, length d) clipped to
    rows_max * clip (a public bound, so the float error is public too; a projection, 1-Lipschitz),
    scaled by 1/gamma, rotated in float64 and rounded once (:func:`party_round`): int64, length d.
    One rotation and one rounding per party and round instead of per record: privacy rests on the
    coupling bound of :func:`party_rounding_rdp`, not on a norm check."""
    if plan.rounding != "party":
        raise ValueError("quantize_party_sum needs a plan with rounding 'party'")
    s = np.array(total, dtype=np.float64, ndmin=2)
    if s.shape != (1, plan.dimension):
        raise ValueError(f"expected one vector of dimension {plan.dimension}, got shape {np.shape(total)}")
    scaled = clip_rows(s, plan.clip * plan.rows_max, scale=1.0 / plan.gamma, dtype=np.float64)
    rotate_inplace(scaled, seed)
    return party_round(scaled[0], rng)



def add_noise_mod(values: np.ndarray, sigma_share: float, bits: int, rng: SecureRNG) -> np.ndarray:
    """(values + y) mod 2^bits as uint64, y ~ N_Z(0, sigma_share^2) i.i.d. from the exact vectorised
    sampler (:func:`dpfed.core.dgauss_alias.sample_discrete_gaussian_alias`)."""
    values = np.asarray(values)
    if values.dtype.kind not in "iu":
        raise TypeError("add_noise_mod takes integer values")
    noise = sample_discrete_gaussian_alias(sigma_share, values.shape, rng)  # a new int64 array
    noise += values.astype(np.int64, copy=False)
    noise &= (1 << int(bits)) - 1
    wrapped: np.ndarray = noise.view(np.uint64)
    return wrapped


def encode(x: np.ndarray, plan: DistributedNoisePlan, *, seed: bytes, rng: SecureRNG) -> np.ndarray:
    """A party's message for secure aggregation: quantize(x) + noise share, mod 2^B (KLS21 Alg. 1)."""
    return add_noise_mod(quantize(x, plan, seed=seed, rng=rng), plan.sigma_share, plan.bits, rng)


def modular_sum(messages: np.ndarray, bits: int) -> np.ndarray:
    """Sum of uint64 messages (first axis) mod 2^bits: what secure aggregation reveals."""
    total = np.sum(np.asarray(messages, dtype=np.uint64), axis=0, dtype=np.uint64)  # wraps mod 2^64
    wrapped: np.ndarray = total & np.uint64((1 << int(bits)) - 1)
    return wrapped


def decode_integers(total: np.ndarray, bits: int) -> np.ndarray:
    """The sum mod 2^bits as centred signed integers in [-2^(bits-1), 2^(bits-1))."""
    v = (np.asarray(total, dtype=np.uint64) & np.uint64((1 << int(bits)) - 1)).astype(np.int64)
    half = 1 << (int(bits) - 1)
    centred: np.ndarray = v - (v >= half) * (2 * half)
    return centred


def decode(total: np.ndarray, plan: DistributedNoisePlan, *, seed: bytes) -> np.ndarray:
    """Server side: centre the sum mod 2^B, multiply by gamma, rotate back: the noisy real sum."""
    return unrotate(decode_integers(total, plan.bits) * plan.gamma, seed, plan.dimension)


# --------------------------------------------------------------------------- modulus

def _sum_variance_proxy(gamma: float, vectors: int, shares: int, clip: float, dimension: int,
                        sigma_share: float) -> float:
    """Variance proxy (integer units) of one coordinate of the sum before rounding error: signal
    (rotation signs: ||sum x||^2 / (gamma^2 n) <= (vectors clip / gamma)^2 / n, n the Hadamard block
    of :func:`rotation_block`, see :func:`rotate`) plus noise (N_Z(0, s^2) is s^2-sub-Gaussian,
    Canonne, Kamath & Steinke 2020)."""
    n = rotation_block(dimension)
    return (vectors * clip / gamma) ** 2 / n + shares * sigma_share ** 2


def choose_gamma(bits: int, *, vectors: int, shares: int, clip: float, dimension: int,
                 sigma_real: float, k_sigma: float = 4.0) -> float:
    """Granularity gamma such that k_sigma sub-Gaussian standard deviations of a coordinate of the
    sum, plus the rounding errors (< 1 per vector), fit in [-2^(B-1), 2^(B-1)):
    gamma = k sqrt((vectors c)^2 / n + shares sigma_real^2) / (2^(B-1) - vectors)
    (KLS21 §4.2 / §4.4 with flatness rho = 1 and d' replaced by the block n of
    :func:`rotation_block`, d/2 < n <= d; ``sigma_real`` = gamma * sigma_share)."""
    headroom = 2.0 ** (int(bits) - 1) - vectors
    if headroom <= 0:
        raise ValueError(f"{bits} bits cannot hold the rounding errors of {vectors} vectors")
    n = rotation_block(dimension)
    return k_sigma * math.sqrt((vectors * clip) ** 2 / n + shares * sigma_real ** 2) / headroom


def choose_bits(gamma: float, *, vectors: int, shares: int, clip: float, dimension: int,
                sigma_share: float, k_sigma: float = 4.0) -> int:
    """Fewest bits B with 2^(B-1) >= k_sigma sqrt(variance proxy) + vectors (see :func:`choose_gamma`)."""
    need = k_sigma * math.sqrt(_sum_variance_proxy(gamma, vectors, shares, clip, dimension,
                                                   sigma_share)) + vectors
    bits = max(2, math.ceil(math.log2(need)) + 1)
    if bits > _MAX_BITS:
        raise ValueError(f"{bits} bits needed, more than {_MAX_BITS}")
    return bits


def wraparound_bound(bits: int, gamma: float, *, vectors: int, shares: int, clip: float,
                     dimension: int, sigma_share: float) -> tuple[float, float]:
    """(p, P): p bounds the probability that a given coordinate of the sum leaves
    [-2^(B-1), 2^(B-1)) (so wraps mod 2^B), P bounds that any of the d coordinates does.

    S_j = A_j + E_j + N_j: signal A_j sub-Gaussian over the public rotation signs (fixed before the
    data) with variance proxy ||sum x||^2 / (gamma^2 n) for every coordinate j, also those the two
    overlapping blocks of :func:`rotate` both write (see there); rounding errors |E_j| < vectors,
    noise N_j sub-Gaussian; A and N independent, so p = 2 exp(-(2^(B-1) - vectors)^2 / (2 v)) and
    P = min(1, d p) (union bound over the d coordinates: no padding). Wrap-around is a
    post-processing of the noisy sum: it costs accuracy, not privacy."""
    t = 2.0 ** (int(bits) - 1) - vectors
    if t <= 0:
        return 1.0, 1.0
    v = _sum_variance_proxy(gamma, vectors, shares, clip, dimension, sigma_share)
    p = min(1.0, 2.0 * math.exp(-t * t / (2.0 * v)))
    return p, min(1.0, padded_dimension(dimension) * p)



def plan_distributed_noise(target_epsilon: float, delta: float, *, clip: float, dimension: int,
                           bits: int, parties: int, survivors_min: int, colluders: int = 0,
                           vectors: int | None = None, sampling_rate: float = 1.0, steps: int = 1,
                           beta: float = DEFAULT_BETA, k_sigma: float = 4.0) -> DistributedNoisePlan:
    """Gamma and sigma_share for a target (epsilon, delta) over ``steps`` Poisson(q) releases at
    ``bits`` bits: the survivors_min - colluders honest shares alone meet the target; gamma leaves
    k_sigma standard deviations of headroom for up to ``parties`` shares and ``vectors`` encoded
    vectors (default ``parties``). Fixed point: gamma from sigma_real = gamma sigma_share
    (:func:`choose_gamma`), sigma_share calibrated at that gamma (:func:`calibrate_sigma_share`);
    the returned sigma_share is calibrated at the returned gamma, so the target is met exactly."""
    honest = int(survivors_min) - int(colluders)
    if not (1 <= honest and survivors_min <= parties):
        raise ValueError("need colluders < survivors_min <= parties")
    vectors = int(parties if vectors is None else vectors)
    d = padded_dimension(dimension)

    def sigma_at(gamma: float) -> float:
        l2 = rounded_l2_bound(clip / gamma, beta, d)
        return calibrate_sigma_share(target_epsilon, delta, honest_parties=honest, l2_sensitivity=l2,
                                     l1_sensitivity=rounded_l1_bound(l2, d), dimension=d,
                                     sampling_rate=sampling_rate, steps=steps)

    gamma = choose_gamma(bits, vectors=vectors, shares=parties, clip=clip, dimension=d,
                         sigma_real=clip, k_sigma=k_sigma)
    for _ in range(30):
        sigma = sigma_at(gamma)
        new = choose_gamma(bits, vectors=vectors, shares=parties, clip=clip, dimension=d,
                           sigma_real=sigma * gamma, k_sigma=k_sigma)
        if abs(new / gamma - 1.0) < 1e-3:
            break
        gamma = new
    return DistributedNoisePlan(dimension=int(dimension), clip=float(clip), gamma=gamma, bits=int(bits),
                                sigma_share=sigma_at(gamma), beta=beta, honest_parties=honest,
                                parties=int(parties), vectors=vectors,
                                sampling_rate=float(sampling_rate), steps=int(steps))
