"""The coordinator's side of a secure round: the driver's ``gather`` for secure-aggregation jobs.

Transport-agnostic: :class:`SecureGather` is given ``send``, a function that delivers one task per
party (a mapping name -> task) and returns the answers that came back (name -> arrays; a party
that did not answer, refused or failed is simply missing). For each algorithm task it runs the SecAgg
steps (Bonawitz et al. 2017 with keys per job, :mod:`dpfed.federation.secagg`): ``secagg/advertise``
only to parties whose advert it lacks (all in the first round; again after a party missed a round:
it may have restarted with new keys), ``secagg/masked`` with each party's and its neighbours'
adverts (in full the first time, then by digest: those a party answered a masked task with are in its
verification cache, until its own advert changes, i.e. it restarted with new keys), ``secagg/unmask``
with the survivors' envelopes to the survivors needed to remove every mask
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
from typing import Any

import numpy as np

from dpfed.algorithms.contract import Aggregate, Answer, JobSpec, PartyAlgorithm, Task
from dpfed.algorithms.secure_noise import secure_params
from dpfed.core.errors import DpfedError
from dpfed.federation import secagg as sa
from dpfed.federation import secure_wire as sw

__all__ = ["SecureGather", "RoundAborted", "Send", "SendMerged"]

log = logging.getLogger("dpfed.coordinator")

Send = Callable[[Mapping[str, Task]], Mapping[str, Answer]]
Merge = Callable[[Task, Sequence[Aggregate]], Aggregate]
SendMerged = Callable[[Mapping[str, Task], Merge], Sequence[Aggregate]]


class RoundAborted(DpfedError, RuntimeError):
    """A secure round had too few survivors; nothing of it was unmasked."""


class SecureGather:
    """``gather(task) -> [Aggregate]`` for a secure job over ``send`` (see module docstring)."""

    def __init__(self, spec: JobSpec, half: PartyAlgorithm, send: Send, *, send_merged: SendMerged | None = None,
                 skip_aborted: bool = True) -> None:
        self.spec, self.half, self.send, self.skip_aborted = spec, half, send, skip_aborted
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
        plan = self.half.secure_plan(self.spec, task)
        if plan is None:
            raise ValueError(f"task kind {task.kind!r} has no secure release")
        job, r, roster = self.spec.job_id, int(task.round), self.params.roster
        bits = plan.noise.bits
        self.bits.add(bits)
        if not plan.integer:
            self.roundings.add(plan.noise.rounding)
        server = sa.SecAggServer(self._config(bits))  # one per round: nothing of an old round is kept
        meta = {"kind": task.kind}

        def one(name: str, items: list) -> Any:
            if len(items) != 1 or items[0].name != name:
                raise ValueError("an answer speaks for another party")
            return items[0]

        known = self._adverts.setdefault(bits, {})
        need = [n for n in roster if n not in known]
        if need:
            known.update(self._answers({n: Task(job, r, sw.ADVERTISE, meta) for n in need},
                                       lambda n, a: one(n, sw.adverts_from_arrays(a, job, roster))))
        routed = server.route_adverts(r, known.values())
        inner = {sw.INNER + k: np.asarray(v) for k, v in task.arrays.items()}
        masked_meta = {"kind": task.kind, "params": dict(task.params)}
        d = plan.length
        delivered = self._delivered.setdefault(bits, {})
        for n in routed:  # routed[n][0] is n's own advert: another one means new keys, an empty cache
            if delivered.get(n, {}).get(n) != routed[n][0].digest():
                delivered[n] = {}
        tasks = {n: Task(job, r, sw.MASKED, masked_meta,
                         {**inner, **self._advert_arrays(bits, n, routed[n], delivered[n])}) for n in routed}
        if self.send_merged is not None:
            parts = list(self.send_merged(tasks, functools.partial(sw.merge_masked, bits=bits, length=d)))
        else:
            parts = [Aggregate(a, (n,)) for n, a in self.send(tasks).items() if n in tasks]
        masked = self._masked(r, parts, bits, d)
        self.masked_parts.append(len(masked))
        answered = {w for m in masked for w in m.names}
        for n in answered & set(tasks):  # it verified (or held) every advert of its task
            delivered[n].update((a.name, a.digest()) for a in routed[n])
        for n in set(tasks) - answered:  # it may have restarted with new keys: ask for its advert again
            known.pop(n, None)
        try:
            req = server.collect_masked(r, masked, length=d)
        except sa.MaskedInputError as exc:
            raise RoundAborted(f"round {r} refused, nothing unmasked: {exc}") from None
        except sa.ReconstructionError as exc:
            survivors = sum(len(m.names) for m in masked)
            raise RoundAborted(f"round {r} aborted, nothing unmasked: {survivors} masked inputs, at least "
                               f"{self.params.min_survivors} survivors required ({exc})") from None
        self.last_request = req
        unmask_meta = {"kind": task.kind, "survivors": list(req.survivors), "dropped": list(req.dropped)}

        def unmask(names: Sequence[str]) -> dict[str, sa.UnmaskResponse]:
            self.unmask_requests += len(names)
            return self._answers({n: Task(job, r, sw.UNMASK, unmask_meta,
                                          sw.envelopes_to_arrays(server.envelopes_for(r, n), roster, sw.ENV))
                                  for n in names},
                                 lambda n, a: sw.unmask_from_arrays(a, job, r, n, roster))

        first = server.unmaskers(r)  # enough survivors to remove every mask (all of them with many dropouts)
        resps = unmask(first)
        try:
            total = server.unmask(r, resps.values())
        except sa.ReconstructionError:
            rest = [n for n in req.survivors if n not in set(first)]  # the same request, to the others
            resps.update(unmask(rest) if rest else {})
            try:
                total = server.unmask(r, resps.values())
            except sa.ReconstructionError as exc:
                raise RoundAborted(f"round {r} aborted: {len(resps)} of {len(req.survivors)} survivors answered "
                                   f"the unmask request, too few to reconstruct ({exc})") from None
        arrays = plan.decode(total)
        self.rounds += 1
        missing = len(roster) - len(req.survivors)
        self.dropouts += missing
        self.dropped_rounds += missing > 0
        self.survivors_seen_min = min(self.survivors_seen_min, len(req.survivors))
        return [Aggregate(arrays, tuple(req.survivors))]

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

