"""The coordinator's side of one SecAgg round (:class:`SecAggServer`): routes adverts, counts masked inputs
(alone or as partial sums), chooses whom to ask for the unmask step and removes the masks.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from dpfed.federation.secagg_consistency import ConsistencyRequest
from dpfed.federation.secagg_crypto import add_masks, clear_top, mask_dtype
from dpfed.federation.secagg_graph import SecAggConfig
from dpfed.federation.secagg_messages import (
    Envelope,
    KeyAdvert,
    MaskedInput,
    MaskedInputError,
    MaskedSum,
    ProtocolError,
    ReconstructionError,
    UnmaskRequest,
    UnmaskResponse,
)
from dpfed.federation.secagg_shamir import SECRET_BYTES, reconstruct_secret

__all__ = ['SecAggServer']


@dataclass
class _ServerRound:
    adverts: dict[str, KeyAdvert] = field(default_factory=dict)
    mask_sets: dict[str, set[str]] = field(default_factory=dict)  # u -> A_u,r (routed to u)
    total: np.ndarray | None = None  # the sum of the counted masked inputs, mod 2^64
    boxes: dict[str, list[Envelope]] = field(default_factory=dict)  # receiver -> survivors' envelopes
    request: UnmaskRequest | None = None
    refused: str = ""  # why the masked inputs could not be counted (the round is over)
    signatures: dict[str, bytes] = field(default_factory=dict)  # survivor -> its signature on the survivor set


class SecAggServer:
    """The coordinator's side of one round: routes adverts, collects masked inputs (with their envelopes),
    unmasks the sum."""

    def __init__(self, config: SecAggConfig) -> None:
        self.config = config
        self._rounds: dict[int, _ServerRound] = {}

    def _r(self, r: int) -> _ServerRound:
        return self._rounds.setdefault(r, _ServerRound())

    def route_adverts(self, r: int, adverts: Iterable[KeyAdvert]) -> dict[str, list[KeyAdvert]]:
        """Each party with a known advert receives its own and its neighbours' (A_u,r, symmetric)."""
        st = self._r(r)
        st.adverts = {a.name: a for a in adverts if a.job_id == self.config.job_id and a.name in self.config.parties}
        st.mask_sets = {u: {v for v in self.config.neighbours(u) if v in st.adverts} for u in st.adverts}
        return {u: [st.adverts[u]] + [st.adverts[v] for v in sorted(st.mask_sets[u])] for u in st.adverts}

    def collect_masked(self, r: int, inputs: Iterable[MaskedInput | MaskedSum], length: int | None = None) -> UnmaskRequest:
        """The survivors are those whose masked input arrived, alone or inside a partial sum; the rest
        of the routed parties are dropped. Every input must be of this job and round, from routed
        parties, none counted twice, all of one length (``length`` if given), its envelopes from its
        own parties to their neighbours: otherwise :class:`MaskedInputError` and the round is over (no
        request, nothing unmasked, ever)."""
        st = self._r(r)
        if st.refused:
            raise MaskedInputError(st.refused)
        if st.request is not None:
            return st.request  # inputs arriving after this are late: never counted
        try:
            total, names, envs = self._add_inputs(r, st, inputs, length)
        except MaskedInputError as exc:
            st.refused = str(exc)
            raise
        surv = tuple(sorted(names))
        if len(surv) < self.config.min_survivors:
            raise ReconstructionError(f"round {r}: {len(surv)} survivors < {self.config.min_survivors}; round aborted")
        st.total = total
        st.boxes = {u: [] for u in surv}
        for e in envs:
            if e.receiver in names:
                st.boxes[e.receiver].append(e)
        st.request = UnmaskRequest(self.config.job_id, r, surv, tuple(sorted(set(st.mask_sets) - set(surv))))
        return st.request

    def consistency_request(self, r: int) -> ConsistencyRequest:
        """The consistency round's message to every survivor: the survivor set and their adverts' digests."""
        st = self._r(r)
        if st.request is None:
            raise ProtocolError(f"round {r}: collect_masked first")
        surv = st.request.survivors
        return ConsistencyRequest(self.config.job_id, r, surv, {u: st.adverts[u].digest() for u in surv})

    def add_signatures(self, r: int, signatures: Mapping[str, bytes]) -> None:
        """Keep the survivors' signatures on the survivor set (relayed with the unmask requests; each party
        checks them itself, the coordinator has nothing to trust them for)."""
        st = self._r(r)
        if st.request is None:
            raise ProtocolError(f"round {r}: collect_masked first")
        surv = set(st.request.survivors)
        st.signatures.update((u, bytes(sig)) for u, sig in signatures.items() if u in surv)

    def signatures_for(self, r: int, name: str) -> list[tuple[str, bytes]]:
        """The signatures ``name`` checks before it unmasks: its own and those of the neighbours it masked with."""
        st = self._r(r)
        mine = {name} | st.mask_sets.get(name, set())
        return [(u, sig) for u, sig in sorted(st.signatures.items()) if u in mine]

    def envelopes_for(self, r: int, name: str) -> list[Envelope]:
        """The survivors' envelopes addressed to ``name`` (sent with its unmask request)."""
        return list(self._r(r).boxes.get(name, []))

    def unmaskers(self, r: int) -> tuple[str, ...]:
        """The survivors to send the unmask request first: few, but enough to remove every mask if they
        all answer. Every survivor with a dropped neighbour it masked with (only it can reveal that
        pairwise seed), then, greedily, the survivor holding envelopes of the most survivors still short
        of t holders, until each survivor's b_v,r has t share holders among them (ties broken in an
        order rotated by the round, which spreads the work over the parties). Asking fewer survivors
        reveals less (only their shares); the rest are asked, with the same request, only if some of
        these do not answer (``SecureGather``). With t = 2 and 24 Harary neighbours of 100 parties that
        is 12 parties instead of 100 (27 at t = 6): a round without dropouts asks an eighth of them."""
        st = self._r(r)
        req = st.request
        if req is None:
            raise ProtocolError(f"round {r}: collect_masked first")
        surv, drop = list(req.survivors), set(req.dropped)
        m, t = len(surv), self.config.threshold
        index = {u: i for i, u in enumerate(surv)}
        holds = np.zeros((m, m), dtype=bool)  # holds[u, v]: survivor u holds survivor v's envelope
        for u in surv:
            for e in st.boxes.get(u, ()):
                if e.sender in index:
                    holds[index[u], index[e.sender]] = True
        chosen = np.array([bool(st.mask_sets.get(u, set()) & drop) for u in surv], dtype=bool)
        need = t - holds[chosen].sum(axis=0)
        order = np.roll(np.arange(m), -(r % m)) if m else np.arange(0)
        while (need > 0).any():
            score = holds[order][:, need > 0].sum(axis=1)
            score[chosen[order]] = -1
            best = int(np.argmax(score))
            if score[best] <= 0:  # nobody left can help: ask everyone (reconstruction will say what lacks)
                return tuple(surv)
            u = int(order[best])
            chosen[u] = True
            need = need - holds[u]
        return tuple(u for u, c in zip(surv, chosen, strict=True) if c)

    def _add_inputs(self, r: int, st: _ServerRound, inputs: Iterable[MaskedInput | MaskedSum],
                    length: int | None) -> tuple[np.ndarray | None, set[str], list[Envelope]]:
        """The sum mod 2^64 of every input, the union of their parties and their envelopes (checked,
        see collect_masked)."""
        total: np.ndarray | None = None
        names: set[str] = set()
        envs: list[Envelope] = []
        for m in inputs:
            who = (m.name,) if isinstance(m, MaskedInput) else tuple(m.names)
            if m.job_id != self.config.job_id or m.round != r:
                raise MaskedInputError(f"round {r}: a masked input of job {m.job_id!r} round {m.round} offered")
            if not who:
                raise MaskedInputError(f"round {r}: a partial sum of no party")
            for w in who:
                if w in names:
                    raise MaskedInputError(f"round {r}: party {w!r} counted twice; round refused")
                if w not in st.mask_sets:
                    raise MaskedInputError(f"round {r}: a masked input of {w!r}, which was sent no keys; round refused")
                names.add(w)
            for e in m.envelopes:
                if e.sender not in who or e.receiver not in st.mask_sets.get(e.sender, ()) or \
                        e.job_id != self.config.job_id or e.round != r:
                    raise MaskedInputError(f"round {r}: an envelope from {e.sender!r} to {e.receiver!r} does not "
                                           "belong with its masked input; round refused")
                envs.append(e)
            y = np.asarray(m.y)
            if y.dtype != np.uint64 or y.ndim != 1:
                raise MaskedInputError(f"round {r}: a masked input is a 1-d uint64 array, got {y.dtype} {y.shape}")
            want = length if length is not None else (y.size if total is None else total.size)
            if y.size != want:
                raise MaskedInputError(f"round {r}: a masked input of {y.size} words, {want} expected")
            total = y.copy() if total is None else total + y
        return total, names, envs

    def unmask(self, r: int, responses: Iterable[UnmaskResponse]) -> np.ndarray:
        """Rebuild b_v,r of the survivors from t shares, take each survivor's revealed pairwise seeds with
        its dropped neighbours, return the sum mod 2^B (:class:`ReconstructionError` if anything lacks)."""
        st = self._r(r)
        req = st.request
        if req is None:
            raise ProtocolError(f"round {r}: collect_masked first")
        t, bits = self.config.threshold, self.config.bits
        surv, drop = set(req.survivors), set(req.dropped)
        b_sh: dict[str, list[bytes]] = {}
        seeds: dict[tuple[str, str], bytes] = {}
        for resp in responses:
            if resp.name not in surv or resp.round != r or resp.job_id != self.config.job_id:
                continue
            for v, sh in resp.self_mask_shares.items():
                if v in surv:
                    b_sh.setdefault(v, []).append(sh)
            for v, k in resp.pairwise_seeds.items():
                if v in drop and len(k) == SECRET_BYTES:
                    seeds[(resp.name, v)] = k
        assert st.total is not None  # a request lists >= 1 survivor, so some input was counted
        total = st.total.astype(mask_dtype(bits))  # mod 2^(8 * itemsize): exact mod 2^B
        masks = [(reconstruct_secret(b_sh.get(v, []), t), True) for v in req.survivors]  # remove +PRG(b_v)
        for u in req.survivors:
            for v in sorted(st.mask_sets.get(u, set()) & drop):
                k = seeds.get((u, v))
                if k is None:
                    raise ReconstructionError(f"round {r}: survivor {u!r} did not reveal its pairwise seed with "
                                              f"dropped {v!r}")
                masks.append((k, u < v))  # survivor u added +m_uv if u < v: remove it
        add_masks(total, masks, r)
        return clear_top(total, bits).astype(np.uint64)
