"""The public parameters of a SecAgg job: the neighbour graph (complete, or a random Harary graph: SecAgg+,
Bell et al. CCS 2020) and the Shamir threshold t, identical at every party and the coordinator.

**The threshold against a lying coordinator** (:func:`safe_threshold`). Setting: the keys-per-job protocol
of :mod:`dpfed.federation.secagg` with its consistency round (:mod:`dpfed.federation.secagg_consistency`);
a coordinator that deviates arbitrarily (routes any adverts, claims any survivor set, to each party its
own) and colludes with a set C of parties; u an honest party, A_u the neighbours it masked with in round
r (those whose adverts it was given and verified), c_u = |C & A_u| <= min(c, k). Rules of an honest party
v: it signs at most one survivor set S_v per round, one that contains itself; it answers the unmask
step only for exactly S_v, carrying its own signature and valid signatures on the same message from at
least t members of A_v & S_v other than itself; it then reveals its share of b_w,r for w in S_v and
k_vw,r for w in A_v not in S_v, nothing else. Recovering x_u from y_u needs b_u,r (t shares, held only by
the members of A_u) and k_uv,r for every v in A_u.

*Theorem.* The coordinator and C can hold both t shares of b_u,r and every k_uv,r (v in A_u) only if
t <= c_u. So t >= min(c, k) + 1 (:func:`safe_threshold`) is necessary and sufficient for every honest
party on every graph of degree k, whatever the coordinator sends.

*Proof.* Suppose the coordinator knows every k_uv,r, v in A_u. (i) u answered the unmask step. Then t
members of A_u & S_u other than u signed S_u. An honest one, v, signed only S_u, which contains u, so it
answers (if at all) only for S_u and never reveals k_uv,r; u reveals it only if v is not in S_u, but it
is. So k_uv,r stays hidden (v may not even have computed it), a contradiction: all t signers are in C,
c_u >= t. (ii) u did not answer. Every honest v in A_u revealed k_uv,r itself, so it answered for a
set without u and revealed no share of b_u,r; honest parties outside A_u hold none. The shares of b_u,r
the coordinator holds are then the c_u of C, and it needs t: c_u >= t. Tightness: if t <= c_u, the
coordinator gives u only the adverts of t corrupt neighbours; they hold t shares of b_u,r and know every
k_uv,r, and nothing is asked of any honest party. ``tests/federation/test_secagg_consistency.py``
searches every strategy of a coordinator (the adverts routed to the target, the set told to it, and
for each other honest party: the target's set, all parties, or all but the target) on complete and
ring graphs up to 7 parties and every corrupt set, and finds an attack exactly when t <= c_u.

Without the consistency round the same coordinator unmasks x_u whenever 2t <= |A_u| + c_u (different
sets to different parties: the attack of issue 24); Bonawitz et al.'s malicious bound t > (n + c)/2
(their Thm. A.2 family) is not needed here because an honest party counts only signatures of the
neighbours it masked with, on the very set it signed. On the complete graph the threshold
is chosen deterministically (t > c >= c_u). On a Harary graph it is Bell et al.'s statistical choice:
P(c_u >= t) < 2^-41 / n for colluders placed independently of the graph; the graph seed comes from the
job id, which the coordinator picks, so a coordinator placing the victim among its colluders must try
about 2^40 job ids per success.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpfed.federation.secagg_crypto import expand_mask, hkdf, lp

__all__ = ["harary_parameters", "neighbourhoods", "SecAggConfig", "safe_threshold"]


def safe_threshold(neighbours: int, colluders: int) -> int:
    """The least threshold t (= min(c, k) + 1) at which a coordinator colluding with c parties, lying as it
    likes, cannot unmask an honest input of a party with k neighbours (module docstring: theorem, proof)."""
    if neighbours < 1 or colluders < 0:
        raise ValueError("need >= 1 neighbour and >= 0 colluders")
    return min(colluders, neighbours) + 1


def _log_tail(logpmf: np.ndarray) -> np.ndarray:
    """log P(X >= i) for i = 0..k from log pmf values (stable in log space)."""
    from scipy.special import logsumexp

    return np.array([logsumexp(logpmf[i:]) for i in range(len(logpmf))])


def harary_parameters(n: int, corrupt_fraction: float, dropout_fraction: float, *,
                      security_bits: float = 40.0, correctness_bits: float = 20.0) -> tuple[int, int]:
    """(degree k, threshold t) of a random Harary graph for ``n`` parties (Bell et al. 2020, Sec. 4).

    Smallest even k such that (a) removing the corrupt and dropped parties disconnects the graph with
    probability < 2^-(sec+1) (union bound over pairs of k/2-long gaps in the ring), (b) a party has
    >= t corrupt neighbours with probability < 2^-(sec+1)/n and (c) < t surviving neighbours with
    probability < 2^-cor/n; neighbour counts are hypergeometric, tails summed exactly in log space.
    """
    from scipy.stats import hypergeom

    if not (0 <= corrupt_fraction < 1 and 0 <= dropout_fraction < 1 and corrupt_fraction + dropout_fraction <= 0.9):
        raise ValueError("need 0 <= corrupt, dropout < 1 and corrupt + dropout <= 0.9")
    adv = math.floor(corrupt_fraction * n + 1e-12)
    surv = math.ceil((1 - dropout_fraction) * n - 1e-12)
    bad = adv + (n - surv)
    lsec = -(security_bits + 1) * math.log(2)
    for k in range(2, n - 1, 2):
        if k <= bad:
            log_gap = (math.log(n) + math.log(n - k - 1) - math.log(2) + math.lgamma(bad + 1)
                       + math.lgamma(n - k + 1) - math.lgamma(n + 1) - math.lgamma(bad - k + 1))
            if log_gap >= lsec:
                continue
        j = np.arange(k + 1)
        adv_tail = _log_tail(hypergeom(n, adv, k).logpmf(j)) if adv else np.where(j == 0, 0.0, -np.inf)
        t = max(2, int(j[adv_tail < lsec - math.log(n)][0]))  # P(>= t corrupt neighbours) negligible
        if t > k:
            continue
        log_cdf = np.logaddexp.accumulate(hypergeom(n, surv, k).logpmf(j))  # log P(surviving <= i)
        if log_cdf[t - 1] < -correctness_bits * math.log(2) - math.log(n):  # P(< t survive) small
            return k, t
    raise ValueError(f"no Harary parameters for n={n}, corrupt={corrupt_fraction}, dropout={dropout_fraction}")


def _permutation(seed: bytes, n: int) -> np.ndarray:
    """A public random permutation of range(n): argsort of ChaCha20 keystream words."""
    keys = expand_mask(seed, 0, n, 64)
    return np.argsort(keys, kind="stable")


def neighbourhoods(parties: Sequence[str], degree: int | None, seed: bytes) -> dict[str, tuple[str, ...]]:
    """Each party's neighbours: all others (``degree`` None) or a Harary graph H(degree, n) on a public
    random ordering of the parties (SecAgg+, Bell et al. 2020): position i joins i +- 1..degree/2."""
    names = sorted(parties)
    n = len(names)
    if degree is None or degree >= n - 1:
        return {u: tuple(v for v in names if v != u) for u in names}
    if degree < 2 or degree % 2:
        raise ValueError("the Harary degree must be even and >= 2")
    order = [names[i] for i in _permutation(seed, n)]
    pos = {u: i for i, u in enumerate(order)}
    half = degree // 2
    return {u: tuple(sorted(order[(pos[u] + o) % n] for o in range(-half, half + 1) if o)) for u in names}




@dataclass(frozen=True)
class SecAggConfig:
    """Public parameters of one job, identical at every party and the coordinator.

    ``parties``: the roster; ``bits``: B (all arithmetic mod 2^B, 1 <= B <= 62); ``min_survivors``:
    P_min (no unmasking below it); ``corrupt_fraction`` and ``dropout_fraction``: the design point of
    the graph and threshold; ``degree``/``threshold``: overrides; ``complete_graph_max``: the complete
    graph is used up to this many parties; ``graph_seed``: public, from the job specification.
    """

    job_id: str
    parties: tuple[str, ...]
    bits: int = 32
    min_survivors: int = 2
    corrupt_fraction: float = 0.05
    dropout_fraction: float = 0.3
    complete_graph_max: int = 64
    degree: int | None = None
    threshold: int | None = None
    graph_seed: bytes = b""

    def __post_init__(self) -> None:
        names = tuple(sorted(self.parties))
        object.__setattr__(self, "parties", names)
        if len(set(names)) != len(names) or len(names) < 2:
            raise ValueError("parties must be >= 2 distinct names")
        if len(names) >= 1 << 16:
            raise ValueError("at most 65535 parties (share x-coordinates are 16-bit)")
        if not 1 <= self.bits <= 62:
            raise ValueError("bits must lie in [1, 62]")
        if not 1 <= self.min_survivors <= len(names):
            raise ValueError("min_survivors must lie in [1, number of parties]")
        n = len(names)
        if self.degree is None and n > self.complete_graph_max:
            try:
                k, t = harary_parameters(n, self.corrupt_fraction, self.dropout_fraction)
            except ValueError:  # no sparse graph fits: the complete graph (its threshold below)
                k, t = n - 1, None
            object.__setattr__(self, "degree", k if k < n - 1 else None)
            if t is not None and k < n - 1:  # the statistical bound on corrupt neighbours (Bell et al.)
                object.__setattr__(self, "_harary_t", t)
            if self.threshold is None and t is not None:
                object.__setattr__(self, "threshold", t)
        if self.threshold is None:
            nb = self.neighbour_count
            t1 = math.floor(self.corrupt_fraction * n + 1e-12)  # colluders the threshold must exceed
            t2 = math.ceil((1 - self.dropout_fraction) * n - 1e-12) - 1  # surviving neighbours of a survivor
            if t2 <= t1:
                raise ValueError(f"no threshold: {t1} colluders vs {t2} surviving neighbours")
            object.__setattr__(self, "threshold", max(2, t1 + 1, min(t2, nb // 2 + 1), safe_threshold(nb, t1)))
        if not 1 <= self.threshold <= self.neighbour_count:
            raise ValueError(f"threshold {self.threshold} must lie in [1, {self.neighbour_count}]")
        object.__setattr__(self, "_xs", {n: i + 1 for i, n in enumerate(names)})
        object.__setattr__(self, "_graph", neighbourhoods(names, self.degree,
                                                          hkdf(self.graph_seed, lp(b"dpfed-secagg-graph-v1", self.job_id, *names))))

    @property
    def colluders(self) -> int:
        """c: the parties that may collude with the coordinator (from ``corrupt_fraction``)."""
        return math.floor(self.corrupt_fraction * len(self.parties) + 1e-12)

    @property
    def safe_against_lying_coordinator(self) -> bool:
        """t > c_u for every party: t >= :func:`safe_threshold` (k, c) on a complete graph, Bell et al.'s
        statistical bound on a Harary one; every job's own configuration is, an override may not be."""
        assert self.threshold is not None
        return self.threshold >= self.__dict__.get("_harary_t", safe_threshold(self.neighbour_count, self.colluders))

    @property
    def neighbour_count(self) -> int:
        return len(self.parties) - 1 if self.degree is None else min(self.degree, len(self.parties) - 1)

    def neighbours(self, name: str) -> tuple[str, ...]:
        return self._graph[name]  # type: ignore[attr-defined]

    def x_of(self, name: str) -> int:
        """The Shamir x-coordinate of shares held by ``name`` (1 + its roster index)."""
        return self._xs[name]  # type: ignore[attr-defined,no-any-return]
