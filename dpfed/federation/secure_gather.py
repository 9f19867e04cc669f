"""The coordinator's side of a secure round: the driver's ``gather`` for secure-aggregation jobs.

Transport-agnostic: :class:`SecureGather` is given ``send``, a function that delivers one task per
party (a mapping name -> task) and returns the answers that came back (name -> arrays; a party
that did not answer, refused or failed is simply missing). For each algorithm task it walks a
:class:`SecureRound` through the stage functions of :data:`STAGES` (Bonawitz et al. 2017 with keys per
job, :mod:`dpfed.federation.secagg`): ``secagg/advertise`` only to parties whose advert it lacks (all
in the first round; again after a party missed a round: it may have restarted with new keys),
``secagg/masked`` with each party's and its neighbours'
adverts (in full the first time, then by digest: those a party answered a masked task with are in its
verification cache, until its own advert changes, i.e. it restarted with new keys), ``secagg/consistency``
to every survivor (the survivor set to sign), ``secagg/unmask`` with the survivors' envelopes and the
signatures each party checks to the survivors needed to remove every mask
(:meth:`~dpfed.federation.secagg.SecAggServer.unmaskers`: those with a dropped neighbour and enough
share holders of every survivor's self mask; the same request goes to the other survivors only if some
of these do not answer). It tolerates dropouts
down to P_min survivors, and returns one :class:`~dpfed.algorithms.contract.Aggregate` whose arrays
are the decoded real-valued sum (KLS21 Alg. 2: centre mod 2^B, times gamma, inverse rotation) and
whose ``parties`` are the survivors. With fewer than P_min masked inputs the round is aborted before
any unmask request is sent (with too few unmask answers to reconstruct, after fewer than threshold
shares of anything were revealed): nothing of it is unmasked, and a round is never retried (each
party answers each step once). An aborted round is returned as an empty ``Aggregate({}, ())`` that
the algorithm skips (``skip_aborted``, the default), or raises :class:`RoundAborted`.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpfed.algorithms.contract import Aggregate, Answer, JobSpec, Task
from dpfed.algorithms.secure_noise import secure_params
from dpfed.algorithms.secure_release import SecureRelease
from dpfed.core.errors import DpfedError
from dpfed.federation import secagg as sa
from dpfed.federation import secure_wire as sw

__all__ = ["SecureGather", "RoundAborted", "Send", "SendMerged", "SecureRound", "STAGES"]

log = logging.getLogger("dpfed.coordinator")

Send = Callable[[Mapping[str, Task]], Mapping[str, Answer]]
Merge = Callable[[Task, Sequence[Aggregate]], Aggregate]
SendMerged = Callable[[Mapping[str, Task], Merge], Sequence[Aggregate]]


class RoundAborted(DpfedError, RuntimeError):
    """A secure round had too few survivors; nothing of it was unmasked."""


class SecureGather:
    """``gather(task) -> [Aggregate]`` for a secure job over ``send`` (see module docstring)."""

    def __init__(self, spec: JobSpec, release: SecureRelease, send: Send, *, send_merged: SendMerged | None = None,
                 skip_aborted: bool = True) -> None:
        self.spec, self.release, self.send, self.skip_aborted = spec, release, send, skip_aborted
        self.send_merged = send_merged
        self.masked_parts: list[int] = []  # per round: masked parts (inputs or partial sums) received
        self.aborted_rounds = 0
        self.params = secure_params(spec.params)
        self._configs: dict[int, sa.SecAggConfig] = {}
        self.rounds = 0
        self.dropped_rounds = 0          # rounds in which at least one party did not contribute
        self.dropouts = 0                # party-rounds missing
        self.survivors_seen_min = self.params.parties
        self.last_request: sa.UnmaskRequest | None = None
        self.unmask_requests = 0         # unmask tasks sent (a round asks only the survivors it needs)
        self.bits: set[int] = set()
        self.roundings: set[str] = set()  # encodings of the real-valued releases (``auto`` resolved)
        self._adverts: dict[int, dict[str, sa.KeyAdvert]] = {}  # bits -> party -> its current advert
        # bits -> party -> name -> digest of the advert of that name the party verified (it answered a masked
        # task that carried it): sent by reference from then on
        self._delivered: dict[int, dict[str, dict[str, bytes]]] = {}
        self._advert_cache: dict[tuple[int, str], tuple[tuple, dict[str, np.ndarray]]] = {}

    def _config(self, bits: int) -> sa.SecAggConfig:
        if bits not in self._configs:
            self._configs[bits] = sw.secagg_config(self.spec, bits)
        return self._configs[bits]

    def _advert_arrays(self, bits: int, name: str, adverts: Sequence[sa.KeyAdvert],
                       delivered: Mapping[str, bytes]) -> dict[str, np.ndarray]:
        """The adverts of ``name``'s masked task as arrays (:func:`.secure_wire.routed_adverts_to_arrays`), reused
        (read-only) while the same adverts go the same way: every round of a job without restarts."""
        key = tuple((a.name, a.digest(), delivered.get(a.name) == a.digest()) for a in adverts)
        hit = self._advert_cache.get((bits, name))
        if hit is None or hit[0] != key:
            arrays = sw.routed_adverts_to_arrays(adverts, delivered, self.params.roster)
            for a in arrays.values():
                a.setflags(write=False)
            hit = (key, arrays)
            self._advert_cache[(bits, name)] = hit
        return hit[1]

    def _answers(self, tasks: Mapping[str, Task], parse: Callable[[str, Answer], Any]) -> dict[str, Any]:
        """Send, then parse every answer; an unparsable answer counts as a dropout."""
        out = {}
        for name, arrays in self.send(tasks).items():
            if name not in tasks:
                continue
            try:
                out[name] = parse(name, arrays)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("job %s: malformed %s answer from %s dropped: %s", self.spec.job_id,
                            next(iter(tasks.values())).kind, name, exc)
        return out

    def __call__(self, task: Task) -> list[Aggregate]:
        try:
            return self._round(task)
        except RoundAborted as exc:
            self.aborted_rounds += 1
            log.warning("job %s: %s", self.spec.job_id, exc)
            if not self.skip_aborted:
                raise
            return [Aggregate({}, ())]

    def _round(self, task: Task) -> list[Aggregate]:
        """One secure round: a :class:`SecureRound` walked through :data:`STAGES` (each stage function
        takes the gather and the round's state; a stage that cannot go on raises :class:`RoundAborted`)."""
        plan = self.release.plan(self.spec, task)
        if plan is None:
            raise ValueError(f"task kind {task.kind!r} has no secure release")
        bits = plan.noise.bits
        self.bits.add(bits)
        if not plan.integer:
            self.roundings.add(plan.noise.rounding)
        # one server per round: nothing of an old round is kept
        rnd = SecureRound(task, plan, int(task.round), bits, sa.SecAggServer(self._config(bits)))
        for stage in STAGES:
            stage(self, rnd)
        assert rnd.request is not None and rnd.total is not None
        arrays = self.release.decode(self.spec, task, plan, rnd.total)
        self.rounds += 1
        missing = len(self.params.roster) - len(rnd.request.survivors)
        self.dropouts += missing
        self.dropped_rounds += missing > 0
        self.survivors_seen_min = min(self.survivors_seen_min, len(rnd.request.survivors))
        return [Aggregate(arrays, tuple(rnd.request.survivors))]

    def _masked(self, r: int, parts: Sequence[Aggregate], bits: int, d: int) -> list[sa.MaskedSum]:
        """Step 1's parts as masked sums with their envelopes (:func:`~dpfed.federation.secure_wire.masked_part`):
        a party's own malformed answer is a dropout (logged), a malformed partial sum refuses the round."""
        out = []
        job, roster = self.spec.job_id, self.params.roster
        for part in parts:
            if not part.parties:
                continue
            y, envs = None, None
            try:
                y = sw.masked_part(part, bits, d)
                envs = tuple(sw.envelopes_from_arrays(part.arrays, job, r, roster, prefix=sw.ENV))
                if len(part.parties) == 1 and any(e.sender != part.parties[0] for e in envs):
                    envs = None  # a party's answer holding another's envelopes: that party dropped out
            except (ValueError, KeyError, TypeError) as exc:
                if len(part.parties) > 1:
                    raise RoundAborted(f"round {r} refused, nothing unmasked: {exc}") from None
            if y is None or envs is None:
                log.warning("job %s: malformed %s answer from %s dropped", job, sw.MASKED, part.parties[0])
                continue
            out.append(sa.MaskedSum(job, r, tuple(part.parties), y, envs))
        return out

    def summary(self) -> dict[str, Any]:
        """Facts for the job's report (JSON keys of ``dpfed simulate``); ``secure_rounding`` for the
        algorithms that round real rows (LVQ): the encoding used (``auto`` resolved)."""
        out = {"secure_aggregation": True, "bits": self.params.bits,
               "bits_per_round": sorted(self.bits), "survivors_min": self.params.min_survivors,
               "colluders": self.params.colluders, "dropped_rounds": self.dropped_rounds,
               "dropouts": self.dropouts, "aborted_rounds": self.aborted_rounds,
               "survivors_observed_min": self.survivors_seen_min, "unmask_requests": self.unmask_requests}
        if self.roundings:
            out["secure_rounding"] = "+".join(sorted(self.roundings))
        elif "secure_rounding" in self.spec.params:  # no real-valued release ran (e.g. every round aborted)
            out["secure_rounding"] = self.params.rounding
        return out



@dataclass
class SecureRound:
    """The coordinator's state of one secure round, filled in stage by stage (:data:`STAGES`)."""

    task: Task
    plan: Any
    r: int
    bits: int
    server: sa.SecAggServer
    routed: dict[str, list[sa.KeyAdvert]] = field(default_factory=dict)
    request: sa.UnmaskRequest | None = None
    total: np.ndarray | None = None

    @property
    def meta(self) -> dict[str, Any]:
        return {"kind": self.task.kind}


def _one(name: str, items: list) -> Any:
    if len(items) != 1 or items[0].name != name:
        raise ValueError("an answer speaks for another party")
    return items[0]


def advertise(g: SecureGather, rnd: SecureRound) -> None:
    """Stage ADVERTISE: ask the parties whose current advert is unknown, route every known one."""
    job, roster = g.spec.job_id, g.params.roster
    known = g._adverts.setdefault(rnd.bits, {})
    need = [n for n in roster if n not in known]
    if need:
        known.update(g._answers({n: Task(job, rnd.r, sw.ADVERTISE, rnd.meta) for n in need},
                                lambda n, a: _one(n, sw.adverts_from_arrays(a, job, roster))))
    rnd.routed = rnd.server.route_adverts(rnd.r, known.values())


def masked(g: SecureGather, rnd: SecureRound) -> None:
    """Stage MASKED: the algorithm's task with each party's adverts; the masked inputs (or partial sums)
    counted; the survivors fixed (fewer than P_min: aborted before anything is unmasked)."""
    job, r, task, routed = g.spec.job_id, rnd.r, rnd.task, rnd.routed
    inner = {sw.INNER + k: np.asarray(v) for k, v in task.arrays.items()}
    masked_meta = {"kind": task.kind, "params": dict(task.params)}
    d = rnd.plan.length
    delivered = g._delivered.setdefault(rnd.bits, {})
    for n in routed:  # routed[n][0] is n's own advert: another one means new keys, an empty cache
        if delivered.get(n, {}).get(n) != routed[n][0].digest():
            delivered[n] = {}
    tasks = {n: Task(job, r, sw.MASKED, masked_meta,
                     {**inner, **g._advert_arrays(rnd.bits, n, routed[n], delivered[n])}) for n in routed}
    if g.send_merged is not None:
        parts = list(g.send_merged(tasks, functools.partial(sw.merge_masked, bits=rnd.bits, length=d)))
    else:
        parts = [Aggregate(a, (n,)) for n, a in g.send(tasks).items() if n in tasks]
    inputs = g._masked(r, parts, rnd.bits, d)
    g.masked_parts.append(len(inputs))
    answered = {w for m in inputs for w in m.names}
    for n in answered & set(tasks):  # it verified (or held) every advert of its task
        delivered[n].update((a.name, a.digest()) for a in routed[n])
    for n in set(tasks) - answered:  # it may have restarted with new keys: ask for its advert again
        g._adverts[rnd.bits].pop(n, None)
    try:
        rnd.request = rnd.server.collect_masked(r, inputs, length=d)
    except sa.MaskedInputError as exc:
        raise RoundAborted(f"round {r} refused, nothing unmasked: {exc}") from None
    except sa.ReconstructionError as exc:
        raise RoundAborted(f"round {r} aborted, nothing unmasked: {len(answered)} masked inputs, at least "
                           f"{g.params.min_survivors} survivors required ({exc})") from None
    g.last_request = rnd.request


def consistency(g: SecureGather, rnd: SecureRound) -> None:
    """Stage CONSISTENCY: every survivor signs the survivor set (and its advert digests); the signatures
    are kept for the unmask requests (each party checks those of its neighbours itself)."""
    job, roster, r = g.spec.job_id, g.params.roster, rnd.r
    cr = rnd.server.consistency_request(r)
    meta = {**rnd.meta, "survivors": list(cr.survivors)}
    arrays = sw.consistency_to_arrays(cr, roster)
    sigs = g._answers({n: Task(job, r, sw.CONSISTENCY, meta, arrays) for n in cr.survivors},
                      lambda n, a: bytes(np.asarray(a["sig"], dtype=np.uint8).tobytes()))
    rnd.server.add_signatures(r, sigs)


def unmask(g: SecureGather, rnd: SecureRound) -> None:
    """Stage UNMASK: the request (survivors, dropped, envelopes, signatures) to the survivors needed,
    then to the others if some of these are silent; the masks removed."""
    job, roster, r, server = g.spec.job_id, g.params.roster, rnd.r, rnd.server
    req = rnd.request
    assert req is not None
    meta = {**rnd.meta, "survivors": list(req.survivors), "dropped": list(req.dropped)}

    def ask(names: Sequence[str]) -> dict[str, sa.UnmaskResponse]:
        g.unmask_requests += len(names)
        return g._answers({n: Task(job, r, sw.UNMASK, meta,
                                   {**sw.envelopes_to_arrays(server.envelopes_for(r, n), roster, sw.ENV),
                                    **sw.signatures_to_arrays(server.signatures_for(r, n), roster)})
                           for n in names},
                          lambda n, a: sw.unmask_from_arrays(a, job, r, n, roster))

    first = server.unmaskers(r)  # enough survivors to remove every mask (all of them with many dropouts)
    resps = ask(first)
    try:
        rnd.total = server.unmask(r, resps.values())
    except sa.ReconstructionError:
        rest = [n for n in req.survivors if n not in set(first)]  # the same request, to the others
        resps.update(ask(rest) if rest else {})
        try:
            rnd.total = server.unmask(r, resps.values())
        except sa.ReconstructionError as exc:
            raise RoundAborted(f"round {r} aborted: {len(resps)} of {len(req.survivors)} survivors answered "
                               f"the unmask request, too few to reconstruct ({exc})") from None


#: The stages of a secure round at the coordinator, in order (the shape of Flower's SecAgg+ workflow).
STAGES: tuple[Callable[[SecureGather, SecureRound], None], ...] = (advertise, masked, consistency, unmask)
