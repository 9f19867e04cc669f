"""The privacy plan of a k-means job with distributed discrete Gaussian noise under secure aggregation
(``noise = "distributed"``): the public schedule of rounds, each round's integer layout, weights and
sensitivities, the calibrated noise shares and the composed event (the rounds themselves, and the
symbols S, S_a, S_c, Delta_2, Delta_1 used below: :mod:`dpfed.algorithms.kmeans.secure`).

Weights. S (integer units per rescaled unit, "resolution 2^-16 of the half range") is 2^16, lowered
only where a share's std would leave the exact sampler's comfortable range (2^26 units). The count
weight minimises the squared error of a new center, sigma^2 / N^2 (d / S^2 + ||mu||^2 / S_c^2) (mu the
rescaled cluster mean), at fixed Delta_2^2 = d S^2 + S_c^2: a Lagrange multiplier gives
S_c^2 = ||mu|| S^2, and ||mu||^2 = d / 3 for a uniform box, so S_c = rint(S (d / 3)^(1/4)) (at least 1).

Budget. Each release r gets a central noise multiplier z_r = s / f_r (shares f_r of epsilon as the
split rule, as :func:`dpfed.algorithms.kmeans.plan.make_plan`: count 2 %, sizes 5 %, the rest split between
the aggregate (1/2 when refining) and equal steps), so sigma_share_r = z_r Delta_2,r / sqrt(P_min - c);
the one scale s is calibrated (:func:`dpfed.core.accounting.calibrate`, RDP) so that the composition of
every round's ``DistributedDiscreteGaussianDpEvent(sigma_share_r, P_min - c, Delta_2,r, Delta_1,r, L_r)``
meets the job's (epsilon, delta). That composition is :func:`job_event`, which the party charges and the
coordinator recomputes from the same public parameters. Bits per round: the fewest >= ``bits`` that
hold the noiseless sum's public bound (``records`` S, P max_blocks S_a) plus the noise of all P shares
(:func:`dpfed.algorithms.secure_noise.integer_bits`).

What is refused. The NRS07 *center of attention* aggregator (``aggregator = "coa"``) cannot be made
sound here: it picks one block answer from all of them and scales its noise by a beta-smooth upper
bound on the local sensitivity of that choice, computed from the block answers. The coordinator only
sees a sum, of which the center of attention of the union is no function; and if each party ran it on
its own blocks, its noise scale S_beta(Z_p) / alpha would depend on the party's records, so no share
std can be fixed in advance for P_min survivors, and the sum of such shares is not the NRS07
Lemma 2.6 mechanism for any answer. Such a job is refused with that reason (the clamped mean is sound).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from dp_accounting import DpEvent

from dpfed.algorithms import secure_noise as sn
from dpfed.algorithms.contract import JobSpec, TaskRejected
from dpfed.algorithms.kmeans.options import COA_REFUSAL, NOT_SECURE_REFUSAL, job_options
from dpfed.algorithms.kmeans.plan import COUNT_SHARE, SIZES_SHARE
from dpfed.core import accounting
from dpfed.core import distributed_noise as dn
from dpfed.core.events import DistributedDiscreteGaussianDpEvent
from dpfed.core.memo import shared_cache

__all__ = ["GRID", "MAX_SIGMA_SHARE", "MIN_GRID", "Release", "SecureKMeansPlan", "schedule", "secure_kmeans_plan",
           "job_event"]

#: Integer units per rescaled unit of a coordinate (resolution 2^-16 of the half range).
GRID = 1 << 16
#: Largest planned share std in integer units (the exact sampler refuses above 2^28).
MAX_SIGMA_SHARE = float(1 << 26)
#: Smallest grid accepted when GRID must be lowered to keep the share std in range.
MIN_GRID = 16


def schedule(method: str, steps: int) -> tuple[str, ...]:
    """The kind of every round of a secure k-means job (public, from the job parameters)."""
    if method == "lloyd":
        return ("step",) * int(steps)
    return ("count", "aggregate") + ("step",) * int(steps) + (() if steps else ("sizes",))


def _shares(kinds: Sequence[str]) -> dict[str, float]:
    """Fraction of epsilon per release of each kind (the split rule, not the calibration)."""
    fixed = {"count": COUNT_SHARE, "sizes": SIZES_SHARE}
    out = {k: fixed[k] for k in kinds if k in fixed}
    rest = 1.0 - sum(out.values())
    steps = kinds.count("step")
    if "aggregate" in kinds:
        out["aggregate"] = rest * (0.5 if steps else 1.0)
        rest -= out["aggregate"]
    if steps:
        out["step"] = rest / steps
    return out


@dataclass(frozen=True)
class Release:
    """One kind of round: layout of the integer vector, its weights, sensitivities and noise."""

    kind: str
    layout: tuple[tuple[str, tuple[int, ...]], ...]
    scale: int                # integer units per rescaled unit (steps' sums, the aggregate); 1 for counts
    count_scale: int          # a step's units per record in its counts (0: none)
    l2: float                 # Delta_2 of one record's change
    l1: float
    multiplier: float         # central std / Delta_2
    noise: dn.DistributedNoisePlan

    @property
    def dimension(self) -> int:
        return int(sum(math.prod(s) for _, s in self.layout))

    @property
    def event(self) -> DistributedDiscreteGaussianDpEvent:
        return DistributedDiscreteGaussianDpEvent(float(self.noise.sigma_share), int(self.noise.honest_parties),
                                                     float(self.l2), float(self.l1), self.dimension)


@dataclass(frozen=True)
class SecureKMeansPlan:
    """Every round's release of a secure k-means job and the composed event (RDP)."""

    kinds: tuple[str, ...]
    releases: tuple[Release, ...]   # one per distinct kind
    event: DpEvent

    def release(self, kind: str) -> Release:
        return next(r for r in self.releases if r.kind == kind)


def _geometry(kind: str, k: int, d: int, scale: int) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], int,
                                                              float, float]:
    """(layout, count scale, Delta_2, Delta_1) of one kind at ``scale`` (:mod:`dpfed.algorithms.kmeans.secure`)."""
    if kind == "count":
        return (("count", (1,)),), 0, 1.0, 1.0
    if kind == "sizes":
        return (("counts", (k,)),), 0, 1.0, 1.0
    if kind == "aggregate":
        return (("sums", (k, d)),), 0, 2.0 * scale * math.sqrt(k * d), 2.0 * scale * k * d
    sc = max(1, int(round(scale * (d / 3.0) ** 0.25)))
    return (("sums", (k, d)), ("counts", (k,))), sc, math.sqrt(d * scale ** 2 + sc ** 2), float(d * scale + sc)


def _entry_bound(kind: str, scale: int, count_scale: int, sp: sn.SecureParams, max_blocks: int) -> float:
    """Public bound on every entry of the survivors' noiseless sum (the modulus headroom)."""
    if kind == "aggregate":
        return float(sp.parties * max_blocks * scale)
    return float(sp.records * max(scale, count_scale, 1))


@shared_cache(maxsize=64)
def _calibrated(method: str, k: int, d: int, steps: int, eps: float, delta: float, sp: sn.SecureParams,
                max_blocks: int) -> SecureKMeansPlan:
    kinds = schedule(method, steps)
    share = _shares(kinds)
    h = sp.honest
    scale = {kind: GRID if kind in ("step", "aggregate") else 1 for kind in share}
    for _ in range(4):
        geo = {kind: _geometry(kind, k, d, scale[kind]) for kind in share}

        def sigmas(s: float, geo: dict = geo) -> dict[str, float]:
            return {kind: max(0.5, s / share[kind] * geo[kind][2] / math.sqrt(h)) for kind in share}

        def event(s: float, geo: dict = geo) -> DpEvent:
            sg = sigmas(s)
            return accounting.compose([DistributedDiscreteGaussianDpEvent(
                sg[kind], h, geo[kind][2], geo[kind][3], sum(math.prod(x) for _, x in geo[kind][0])) for kind in kinds])

        s = accounting.calibrate(event, eps, delta, accountant="rdp", lo=1e-6, hi=1e9, guess=1.0, rtol=1e-4)
        sg = sigmas(s)
        over = {kind for kind in share if sg[kind] > MAX_SIGMA_SHARE}
        if not over:
            break
        for kind in over:
            if kind not in ("step", "aggregate"):
                raise ValueError(f"epsilon {eps:g} is too small for a distributed {kind} release (its noise share "
                                 "would leave the exact sampler's range)")
            scale[kind] = int(scale[kind] * MAX_SIGMA_SHARE / sg[kind])
            if scale[kind] < MIN_GRID:
                raise ValueError(f"epsilon {eps:g} is too small for a distributed integer {kind} release (the RDP "
                                 "bound needs noise beyond the exact sampler's range even on a coarse grid)")
    else:  # pragma: no cover - the scales shrink geometrically, so a few passes always settle
        raise ValueError("no integer grid keeps the noise shares within the sampler's range")
    releases = []
    for kind in share:
        layout, sc, l2, l1 = geo[kind]
        dim = sum(math.prod(x) for _, x in layout)
        bits = sn.integer_bits(sp.bits, _entry_bound(kind, scale[kind], sc, sp, max_blocks), sg[kind], sp.parties, dim)
        releases.append(Release(kind, layout, scale[kind], sc, l2, l1, s / share[kind],
                                sn.integer_noise_plan(sp, sigma_share=sg[kind], l2=l2, dimension=dim, bits=bits)))
    return SecureKMeansPlan(kinds, tuple(releases), event(s))


def _d(spec: JobSpec) -> int:
    d = int(spec.schema.numeric.sum())
    if d < 1:
        raise TaskRejected("kmeans needs at least one numeric feature with public bounds in the schema")
    return d


def secure_kmeans_plan(spec: JobSpec) -> SecureKMeansPlan:
    """The plan of a secure job from its public parameters (cached); :class:`TaskRejected` with a reason."""
    if not sn.is_secure(spec.params):
        raise TaskRejected(NOT_SECURE_REFUSAL)
    o = job_options(spec.params)
    if o["method"] == "sample-aggregate" and o["aggregator"] == "coa":
        raise TaskRejected(COA_REFUSAL)
    if spec.delta <= 0:
        raise TaskRejected("kmeans needs delta > 0 (discrete Gaussian shares)")
    steps = o["lloyd_iters"] if o["method"] == "lloyd" else o["refine_steps"]
    try:
        sp = sn.secure_params(spec.params)
        return _calibrated(o["method"], o["k"], _d(spec), int(steps), spec.epsilon, spec.delta, sp, o["max_blocks"])
    except ValueError as exc:
        raise TaskRejected(f"invalid secure kmeans parameters: {exc}") from None


def job_event(spec: JobSpec) -> DpEvent:
    """The whole job's event at a party (and the coordinator's recomputation of it): every round's
    distributed discrete Gaussian for P_min - c honest shares, composed; checked against epsilon by RDP."""
    plan = secure_kmeans_plan(spec)
    spent = accounting.epsilon(plan.event, spec.delta, accountant="rdp")
    if spent > spec.epsilon * (1.0 + 1e-9):
        raise TaskRejected(f"the job's noise gives epsilon {spent:.6g} > its stated epsilon {spec.epsilon:.6g}")
    return plan.event
