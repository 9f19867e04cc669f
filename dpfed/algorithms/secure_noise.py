"""Distributed noise under secure aggregation: the public job parameters and per-round plans.

A job with ``noise = "distributed"`` and ``secure_aggregation = true`` has every party encode its
answer with the distributed discrete Gaussian (:mod:`dpfed.core.distributed_noise`, Kairouz, Liu &
Steinke ICML 2021, Alg. 1) and mask it with SecAgg (:mod:`dpfed.federation.secagg`); the
coordinator only sees the sum. Both sides derive the same :class:`SecurePlan` for each round from
the public job parameters alone:

* ``roster``: the parties' names (filled in by the runner that starts the job);
* ``bits`` (B, default 16): arithmetic mod 2^B; a round whose rounding headroom needs more bits
  (e.g. an initialisation summing every record) uses the fewest that fit (``bits`` is a floor);
* ``min_survivors`` (P_min, default: every party): the noise is planned so that P_min - c shares
  alone meet the target, and a round with fewer survivors is aborted before anything is unmasked;
* ``colluders`` (c, default 0): parties that may collude with the coordinator (their shares are not
  counted; the SecAgg threshold exceeds c);
* ``records``: a public bound on the total number of records across parties (the headroom of the
  modulus only: a wrong value costs accuracy through wrap-around, never privacy);
* ``secure_rounding``: ``record`` rounds each record's row on its own; ``party`` sums a party's
  clipped rows in float64 and rotates and rounds the sum once (one rotation per party and round instead of
  per sampled record; the party's sum is clipped to ``records`` x clip); ``auto`` (default) is ``party``
  when the job's DP-SGD release has at least :data:`AUTO_PARTY_DIMENSION` coordinates, else ``record``.

Privacy unit: one record. ``record``: each record's clipped vector is one encoded row (its own conditional
rounding), so adding or removing a record moves the integer sum by at most Delta_2 (KLS21 Thm. 1).
``party``: one record moves the party's real sum by at most clip / gamma before its one rounding; the
coupling bound of :func:`dpfed.core.events.party_rounding_rdp` accounts the rounding.
Accounting is RDP (the DDGauss bound has no PLD), so the party's ledger must be an RDP ledger.

A pure-DP integer release may use the distributed discrete Laplace instead (:func:`integer_laplace_release`,
:mod:`dpfed.core.distributed_laplace`): one Polya share per party, P_min - c of which sum to a discrete Laplace.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Callable, Mapping

from dp_accounting import DpEvent, dp_event

from dpfed.algorithms.params import Param
from dpfed.algorithms.secure_plan import SecurePlan
from dpfed.core import accounting
from dpfed.core import distributed_noise as dn
from dpfed.core.distributed_laplace import PolyaNoisePlan, polya_bits, polya_scale
from dpfed.core.events import DistributedDiscreteGaussianDpEvent
from dpfed.core.memo import shared_cache

__all__ = ["SecureParams", "SecurePlan", "secure_params", "is_secure", "rotation_seed",
           "calibrate_release", "batch_bound", "integer_bits", "integer_noise_plan", "integer_release_event",
           "integer_laplace_release", "rdp_pure_epsilon",
           "SECURE_PARAMS",
           "SECURE_ROUNDING_PARAM",
           "SECURE_ROUNDINGS", "AUTO_PARTY_DIMENSION", "resolve_rounding", "WRAP_PROBABILITY"]

#: The job parameters of secure aggregation (declared in each algorithm's parameter table).
SECURE_PARAMS = (
    Param("secure_aggregation", bool, False, help="distributed noise under SecAgg (discrete shares, RDP)"),
    Param("bits", int, 16, lo=8, hi=62, help="SecAgg arithmetic mod 2^B (a floor: a round may need more)"),
    Param("min_survivors", int, None, lo=2, hi=100_000, optional=True,
          help="P_min: noise planned for P_min survivors, rounds with fewer abort (default: every party)"),
    Param("colluders", int, 0, lo=0, hi=100_000, help="parties that may collude with the coordinator"),
    Param("records", int, None, lo=1, hi=10**9, optional=True,
          help="public bound on the total number of records (the modulus headroom)"),
    Param("roster", list, None, optional=True, help="the parties' names (filled in by the runner)"),
)
#: ``secure_rounding = "auto"`` picks ``party`` from this many coordinates of the DP-SGD release up. A cost rule,
#: not a privacy one (both encodings are accounted): ``record`` rotates and rounds every sampled record's row,
#: O(d log d) each, which at d = 622,496 made a secure round 11.3x a plain one against 1.0x with ``party``
#: (10 parties, ``bench_secure_grpc.py``), while at d = 7,840 the two cost the same (100 parties) and ``record``
#: is the standard conditional rounding of KLS21 (the Table-1 cells, d <= 7,840, run with it).
AUTO_PARTY_DIMENSION = 1 << 16
#: Values of ``secure_rounding``: ``auto`` resolves to one of :data:`dpfed.core.distributed_noise.ROUNDINGS`.
SECURE_ROUNDINGS = ("auto", *dn.ROUNDINGS)
#: For the algorithms whose secure rows are real vectors (LVQ's DP-SGD); integer releases are not rounded.
SECURE_ROUNDING_PARAM = Param("secure_rounding", str, "auto", choices=SECURE_ROUNDINGS,
                              help="'record': round each record's row; 'party': round each party's sum once "
                                   "(one rotation per party and round; privacy accounted by a coupling bound); "
                                   f"'auto': 'party' from {AUTO_PARTY_DIMENSION} coordinates up, else 'record'")


def resolve_rounding(rounding: str, dimension: int) -> str:
    """The encoding ``secure_rounding`` names for a job whose DP-SGD release has ``dimension`` coordinates
    (``auto``: :data:`AUTO_PARTY_DIMENSION`); both sides resolve it from the public layout."""
    if rounding == "auto":
        return "party" if int(dimension) >= AUTO_PARTY_DIMENSION else "record"
    if rounding not in dn.ROUNDINGS:
        raise ValueError(f"secure_rounding must be one of {', '.join(SECURE_ROUNDINGS)}, got {rounding!r}")
    return rounding



def is_secure(params: Mapping[str, Any]) -> bool:
    """True for a distributed-noise job run under secure aggregation."""
    return params.get("noise") == "distributed" and bool(params.get("secure_aggregation", False))


@dataclass(frozen=True)
class SecureParams:
    """The secure-aggregation parameters of a job (validated)."""

    roster: tuple[str, ...]
    bits: int
    min_survivors: int
    colluders: int
    records: int
    rounding: str = "auto"           # "auto" is resolved per job (resolve_rounding) before any plan

    @property
    def parties(self) -> int:
        return len(self.roster)

    @property
    def honest(self) -> int:
        """Noise shares the accounting counts: P_min - c."""
        return self.min_survivors - self.colluders


def secure_params(params: Mapping[str, Any]) -> SecureParams:
    """Parse and bound the public secure-aggregation parameters (ValueError with a reason)."""
    roster = params.get("roster")
    if not isinstance(roster, (list, tuple)) or len(roster) < 2 or not all(isinstance(n, str) for n in roster):
        raise ValueError("a secure-aggregation job needs 'roster': the names of >= 2 parties")
    if len(set(roster)) != len(roster):
        raise ValueError("the roster lists a party twice")
    n = len(roster)
    try:
        bits = int(params.get("bits", 16))
        pmin = int(params.get("min_survivors") or n)
        c = int(params.get("colluders", 0))
        if params.get("records") is None:
            raise KeyError("records")
        records = int(params["records"])
    except KeyError:
        raise ValueError("a secure-aggregation job needs 'records': a public bound on the total number of "
                         "records (the modulus headroom)") from None
    except (TypeError, ValueError):
        raise ValueError("bits, min_survivors, colluders and records must be integers") from None
    if not 8 <= bits <= 62:
        raise ValueError(f"bits must lie in [8, 62], got {bits}")
    if not (0 <= c and c + 2 <= pmin <= n):
        raise ValueError(f"need colluders + 2 <= min_survivors <= parties ({c} + 2 <= {pmin} <= {n})")
    if not 1 <= records <= 10**9:
        raise ValueError("records must lie in [1, 1e9]")
    rounding = params.get("secure_rounding", "auto")
    if rounding not in SECURE_ROUNDINGS:
        raise ValueError(f"secure_rounding must be one of {', '.join(SECURE_ROUNDINGS)}, got {rounding!r}")
    return SecureParams(tuple(str(x) for x in roster), bits, pmin, c, records, str(rounding))


def rotation_seed(job_id: str, round_: int) -> bytes:
    """The public seed of round ``round_``'s Hadamard rotation (fixed before any data are seen)."""
    return hashlib.sha256(f"dpfed-secure-rotation\x00{job_id}\x00{int(round_)}".encode()).digest()


def _event(sigma: float, honest: int, clip: float, gamma: float, dim: int, beta: float,
           q: float, steps: int, rounding: str = "record", rows_max: int = 1) -> DpEvent:
    plan = dn.DistributedNoisePlan(dimension=dim, clip=clip, gamma=gamma, bits=62, sigma_share=sigma, beta=beta,
                                   honest_parties=honest, parties=honest, sampling_rate=q, steps=steps,
                                   rounding=rounding, rows_max=rows_max)
    return plan.event()


@shared_cache(maxsize=64)
def _calibrate(key: str) -> tuple[float, float, int]:
    k = json.loads(key)
    prior = accounting.event_from_json(k["prior"]) if k["prior"] else None
    eps, delta, clip, dim = k["epsilon"], k["delta"], k["clip"], k["dimension"]
    honest, parties, vectors, q, steps = k["honest"], k["parties"], k["vectors"], k["q"], k["steps"]
    rounding, rows_max = k["rounding"], k["rows_max"]
    beta = dn.DEFAULT_BETA
    floor_bits = k["bits"]
    # the fewest bits >= the job's that leave room for the rounding errors of every vector
    bits = max(floor_bits, math.ceil(math.log2(2 * vectors + 2)) + 4)
    if bits > 62:
        raise ValueError(f"{vectors} vectors need more than 62 bits")

    def eps_of(sigma: float, gamma: float) -> float:
        ev = _event(sigma, honest, clip, gamma, dim, beta, q, steps, rounding, rows_max)
        return accounting.epsilon(ev if prior is None else accounting.compose([prior, ev]), delta, accountant="rdp")

    def sigma_at(gamma: float) -> float:
        lo, hi = 0.5, 1.0
        if eps_of(lo, gamma) <= eps:
            return lo
        while eps_of(hi, gamma) > eps:
            lo, hi = hi, 2.0 * hi
            if hi > 2.0 ** 40:
                raise ValueError("no noise meets the target epsilon (the rest of the job spends it all)")
        while hi - lo > 1e-4 * hi:
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if eps_of(mid, gamma) > eps else (lo, mid)
        return hi

    gamma = dn.choose_gamma(bits, vectors=vectors, shares=parties, clip=clip, dimension=dim, sigma_real=clip)
    for _ in range(30):
        sigma = sigma_at(gamma)
        new = dn.choose_gamma(bits, vectors=vectors, shares=parties, clip=clip, dimension=dim,
                              sigma_real=sigma * gamma)
        done = abs(new / gamma - 1.0) < 1e-3
        gamma = new
        if done:
            break
    return gamma, sigma_at(gamma), bits


def calibrate_release(sp: SecureParams, *, epsilon: float, delta: float, clip: float, dimension: int,
                      vectors: int, sampling_rate: float = 1.0, steps: int = 1,
                      prior: DpEvent | None = None) -> dn.DistributedNoisePlan:
    """The noise plan of ``steps`` Poisson(q) releases of per-record rows clipped to ``clip`` in
    ``dimension`` coordinates, calibrated so that ``prior`` (the job's earlier releases) composed with
    them meets (epsilon, delta) by RDP with P_min - c honest shares (KLS21 Prop. 14; Poisson subsampling by
    the binomial expansion, :func:`dpfed.core.events.poisson_subsampled_rdp`), and gamma leaves
    4 sub-Gaussian standard deviations of headroom for every party's share and ``vectors`` rounded rows (:func:`dpfed.core.distributed_noise.choose_gamma`)."""
    if sp.rounding not in dn.ROUNDINGS:  # "auto" for this one release (LVQ resolves it once per job instead)
        sp = replace(sp, rounding=resolve_rounding(sp.rounding, dimension))
    key = json.dumps({"prior": accounting.event_to_json(prior) if prior is not None else "", "epsilon": float(epsilon),
                      "delta": float(delta), "clip": float(clip), "dimension": int(dimension),
                      "honest": sp.honest, "parties": sp.parties, "vectors": int(vectors),
                      "q": float(sampling_rate), "steps": int(steps), "bits": sp.bits,
                      "rounding": sp.rounding, "rows_max": sp.records}, sort_keys=True)
    gamma, sigma, bits = _calibrate(key)
    return dn.DistributedNoisePlan(dimension=int(dimension), clip=float(clip), gamma=gamma, bits=bits,
                                   sigma_share=sigma, honest_parties=sp.honest, parties=sp.parties,
                                   vectors=int(vectors), sampling_rate=float(sampling_rate), steps=int(steps),
                                   rounding=sp.rounding, rows_max=sp.records)


def batch_bound(records: int, q: float) -> int:
    """Rows in one Poisson(q) round's sum, for the headroom: mean + 6 standard deviations."""
    m = q * records
    return max(1, int(math.ceil(m + 6.0 * math.sqrt(m) + 1)))


#: Union-bounded probability that the noise of all P shares wraps some entry of an integer release mod 2^B.
WRAP_PROBABILITY = 1e-9


def integer_bits(floor_bits: int, entry_max: float, sigma_share: float, parties: int, dimension: int) -> int:
    """The fewest bits >= ``floor_bits`` for an integer release whose noiseless sum has every entry in
    [-entry_max, entry_max] (a public bound) and whose P noise shares stay within
    sigma_share sqrt(2 P ln(2 L / WRAP_PROBABILITY)) on all L entries (sub-Gaussian tail, union bound).
    A wrong bound costs accuracy through wrap-around, never privacy (post-processing)."""
    tail = sigma_share * math.sqrt(2.0 * parties * math.log(2.0 * dimension / WRAP_PROBABILITY))
    bits = max(int(floor_bits), math.ceil(math.log2(float(entry_max) + tail + 1.0)) + 1)
    if bits > 62:
        raise ValueError(f"an integer release with entries up to {entry_max:.3g} needs more than 62 bits")
    return bits


def integer_noise_plan(sp: SecureParams, *, sigma_share: float, l2: float, dimension: int, bits: int
                       ) -> dn.DistributedNoisePlan:
    """The :class:`~dpfed.core.distributed_noise.DistributedNoisePlan` of an integer release (no rotation,
    gamma 1: its ``clip`` is the exact L2 sensitivity; the charged event is the algorithm's own
    ``DistributedDiscreteGaussianDpEvent``, not ``plan.event()``, which adds rounding slack)."""
    return dn.DistributedNoisePlan(dimension=int(dimension), clip=float(l2), gamma=1.0, bits=int(bits),
                                   sigma_share=float(sigma_share), honest_parties=sp.honest, parties=sp.parties,
                                   vectors=sp.records)


def integer_release_event(epsilon: float, delta: float, *, honest: int, l2: float, l1: float, dimension: int
                          ) -> tuple[float, DpEvent]:
    """(sigma_share, event) of one integer release with exact sensitivities ``l2`` and ``l1`` under distributed
    noise: the smallest share calibrated for (epsilon, delta), raised until the ledger's own RDP conversion of
    ``DistributedDiscreteGaussianDpEvent`` accepts it (KLS21 Prop. 14)."""
    sigma = dn.calibrate_sigma_share(epsilon, delta, honest_parties=honest, l2_sensitivity=l2, l1_sensitivity=l1,
                                     dimension=dimension)
    event = DistributedDiscreteGaussianDpEvent(float(sigma), int(honest), l2, l1, dimension)
    while accounting.epsilon(event, delta, accountant="rdp") > epsilon:  # the ledger's RDP conversion decides
        sigma *= 1.0 + 1e-6
        event = DistributedDiscreteGaussianDpEvent(float(sigma), int(honest), l2, l1, dimension)
    return float(sigma), event


def rdp_pure_epsilon(eps: float, delta: float) -> float:
    """The largest pure epsilon e <= ``eps`` (to 1e-9 relative) whose randomized-response pair
    ``DiscreteLaplaceDpEvent(e, 1)`` meets (eps, delta) by the RDP ledger of a secure party. That ledger never
    charges pure releases above their sum (:class:`~dpfed.core.rdp_accountant.ExtendedRdpAccountant`), so e is
    ``eps`` itself; before, its RDP conversion alone (e + ~log(1/delta)/alpha) left e 0.35 % below epsilon 1
    at delta 1e-5 and 6 % below 0.1 at 1e-6. ``delta`` 0: ``eps`` (a pure-DP question)."""
    if delta <= 0:
        return float(eps)

    def ok(e: float) -> bool:
        return accounting.epsilon(dp_event.DiscreteLaplaceDpEvent(e, 1), delta, accountant="rdp") <= eps

    lo, hi = 0.0, float(eps)
    if ok(hi):
        return hi
    while hi - lo > 1e-9 * eps:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def integer_laplace_release(epsilon: float, delta: float, *, honest: int, parties: int, floor_bits: int,
                            vectors: int, l1: int, l2: float, dimension: int, entry_max: float,
                            polya: Callable[[float], PolyaNoisePlan] | None = None
                            ) -> tuple[PolyaNoisePlan, dn.DistributedNoisePlan, DpEvent]:
    """The distributed discrete Laplace of one integer release with exact sensitivities ``l1`` (integer) and
    ``l2`` (:mod:`dpfed.core.distributed_laplace`): ``honest`` = P_min - c Polya shares summing to the discrete
    Laplace of scale (l1 + 1) / e, e = :func:`rdp_pure_epsilon` (epsilon, delta) (or the plan ``polya(e)`` gives,
    e.g. per-block scales of pure epsilon <= e); the noise plan with the fewest bits >= ``floor_bits`` holding
    ``entry_max`` plus the tail of all ``parties`` shares (its ``sigma_share`` is one share's standard deviation at
    the largest scale, informational); the charged event ``DiscreteLaplaceDpEvent(e, 1)``. A
    :class:`SecurePlan` takes the first two (``laplace=``, ``noise=``, ``integer=True``, ``l1=l1``)."""
    e = rdp_pure_epsilon(epsilon, delta)
    plan = PolyaNoisePlan(polya_scale(int(l1), e), int(honest)) if polya is None else polya(e)
    if Fraction(plan.epsilon(l1)) > Fraction(e):
        raise ValueError("the Polya noise plan spends more than its pure epsilon")
    bits = polya_bits(floor_bits, entry_max, plan, int(parties), int(dimension), WRAP_PROBABILITY)
    noise = dn.DistributedNoisePlan(dimension=int(dimension), clip=float(l2), gamma=1.0, bits=bits,
                                    sigma_share=max(0.5, math.sqrt(plan.share_variance())),
                                    honest_parties=int(honest), parties=int(parties), vectors=int(vectors))
    return plan, noise, dp_event.DiscreteLaplaceDpEvent(e, 1)
