"""A party's side of a secure-aggregation job: encode with distributed noise, mask, unmask.

Used by :class:`~dpfed.federation.session.PartySession` for jobs whose params say
``noise = "distributed"`` and ``secure_aggregation = true`` (every runner: party daemon, in-process,
Ray). A round r is at most three tasks (:mod:`dpfed.federation.secure_wire`), each answered once per
(round, step) (a repeat of the same task gets the stored answer; anything older is refused):

1. ``secagg/advertise`` (only when the coordinator lacks this session's keys: the first round, after
   a restart or a dropout): the session's long-term X25519 keys, signed once per job
   (:class:`~dpfed.federation.secagg.SecAggClient`);
2. ``secagg/masked``: check the neighbours' signed keys against the CA (once per advert; an advert
   verified before may come as a reference to its digest), check the
   algorithm's task against the charged plan, encode its per-record rows (clip, rotate, scale,
   conditional rounding, one exact discrete Gaussian share planned for P_min survivors and c
   colluders, mod 2^B: :mod:`dpfed.core.distributed_noise`), mask with a fresh self mask and the
   round's pairwise seeds, Shamir-share the self-mask seed into envelopes, record masked vector and
   envelopes durably in the ledger (one masked input per round, ever: a restarted party never
   releases a second one for the same round), send;
3. ``secagg/unmask``: shares of the self-mask seeds of survivors, or the round's pairwise seeds with
   dropped neighbours, never both for one party, never for fewer than P_min survivors; then the
   round's secrets are erased.

``secagg/share`` is refused (protocol version 3 sends envelopes with the masked input). Keys are
per job and session, self masks per round (the SecAgg module gives the security argument). The
whole job was charged when it was accepted; nothing here spends outside that plan.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpfed.algorithms.contract import Answer, JobSpec, PartyAlgorithm, Task, TaskRejected, is_builtin
from dpfed.algorithms.secure_noise import is_secure, secure_params
from dpfed.core import distributed_noise as dn
from dpfed.core.rng import SecureRNG
from dpfed.federation import secagg as sa
from dpfed.federation import secure_wire as sw

__all__ = ["SecAggParty", "SecureParty", "secure_refusal"]

log = logging.getLogger("dpfed.party")


@dataclass(frozen=True)
class SecAggParty:
    """A party's secure-aggregation setup: its certificate and key (they sign its SecAgg keys), the
    deployment CA (checks everyone else's), the fewest survivors it accepts, and (SIMULATIONS ONLY)
    the probability ``dropout`` of missing each secure round (from its masked input on)."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes
    min_survivors: int = 2
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.min_survivors < 2:
            raise ValueError("min_survivors must be >= 2")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError("dropout must lie in [0, 1)")


def secure_refusal(name: str, setup: SecAggParty | None, simulation: bool, half: PartyAlgorithm,
                   spec: JobSpec) -> str | None:
    """Why a party refuses ``spec`` for secure-aggregation reasons, or None."""
    if not half.needs_secure_aggregation(spec):
        return None
    if not is_secure(spec.params):
        if simulation:
            return None
        return ("this job is private against the coordinator only under secure aggregation (distributed "
                "noise) but does not ask for it (secure_aggregation = false); the party accepts that only in "
                "simulations")
    if setup is None:
        return "this party does not take part in secure aggregation (secure_aggregation = false, or no certificate)"
    try:
        sp = secure_params(spec.params)
    except ValueError as exc:
        return f"bad secure-aggregation parameters: {exc}"
    if name not in sp.roster:
        return f"this party ({name!r}) is not in the job's roster"
    if sp.min_survivors < setup.min_survivors:
        return (f"the job's min_survivors {sp.min_survivors} is below this party's minimum "
                f"{setup.min_survivors}")
    return None


@dataclass
class SecureParty:
    """One accepted secure job at one party (created by ``decide``)."""

    name: str
    spec: JobSpec
    half: PartyAlgorithm
    setup: SecAggParty
    rng: SecureRNG
    durable: Callable[[int, str, Answer], Answer]  # records round r's masked input before it leaves
    dropout_rng: SecureRNG | None = None
    _clients: dict[int, sa.SecAggClient] = field(default_factory=dict)
    _record: tuple[tuple[int, int], str, Answer] | None = None   # ((round, step), task digest, answer)
    _drops: dict[int, int] = field(default_factory=dict)         # round -> first step it misses (4: none)
    _roster: tuple[str, ...] = field(default=(), init=False, repr=False)  # the job's roster, read once

    def roster(self) -> tuple[str, ...]:
        if not self._roster:
            self._roster = tuple(secure_params(self.spec.params).roster)
        return self._roster

    def _client(self, bits: int) -> sa.SecAggClient:
        c = self._clients.get(bits)
        if c is None:
            c = sa.SecAggClient(sw.secagg_config(self.spec, bits), self.name, self.setup.cert_pem,
                                self.setup.key_pem, self.setup.ca_pem)
            self._clients[bits] = c
        return c

    def _drop_step(self, r: int) -> int:
        """SIMULATIONS ONLY: from which step this party misses round r (4: it does not)."""
        if self.setup.dropout <= 0.0:
            return 4
        if r not in self._drops:
            rng = self.dropout_rng or SecureRNG()
            u = rng.uniform(2)
            # a dropout misses the round from its masked input on: with keys per job, a survivor that
            # misses the unmask step while a neighbour dropped would abort the round (secagg docstring)
            self._drops = {r: 2 if u[0] < self.setup.dropout else 4}
        return self._drops[r]

    def answer(self, task: Task, digest: str, X: np.ndarray, y: np.ndarray | None) -> Answer:
        """The answer to one SecAgg step, or :class:`TaskRejected` with a public reason."""
        try:
            step = sw.step_of(task.kind)
        except ValueError as exc:
            raise TaskRejected(str(exc)) from None
        key = (int(task.round), step)
        if self._record is not None:
            seen, seen_digest, stored = self._record
            if key == seen:
                if digest != seen_digest:
                    raise TaskRejected(f"round {task.round} step {task.kind} was already answered for a different task")
                return stored
            if key < seen:
                raise TaskRejected(f"round {task.round} step {task.kind} comes after round {seen[0]} "
                                   f"step {sw.SECURE_KINDS[seen[1]]} (out of order)")
        if step >= self._drop_step(task.round):
            raise TaskRejected(f"simulated dropout: {self.name} misses round {task.round} from {task.kind}")
        try:
            out = self._step(task, step, X, y)
            if step == 2:  # the release: durable (one masked input per round, ever) before it leaves
                out = self.durable(int(task.round), digest, out)
        except (TaskRejected, sa.SecAggError) as exc:
            raise TaskRejected(f"{type(exc).__name__}: {exc}") from None
        except (ValueError, KeyError, TypeError) as exc:  # malformed task arrays or params
            if step == 2:  # the algorithm's rows may be in the trace: only the type leaves the party
                log.error("job %s round %d: secure answer failed (%s; message withheld: it may hold record "
                          "values)", self.spec.job_id, task.round, type(exc).__name__)
                raise TaskRejected(f"the party failed to compute its masked input ({type(exc).__name__}; "
                                   "see the party's log)") from None
            raise TaskRejected(f"malformed {task.kind} task: {exc}") from None
        self._record = (key, digest, out)
        return out

    def _plan(self, task: Task) -> Any:
        inner = Task(task.job_id, task.round, str(task.params.get("kind", "")))
        plan = self.half.secure_plan(self.spec, inner)
        if plan is None:
            raise TaskRejected(f"round {task.round}: {inner.kind!r} is not a secure task of this job")
        return plan

    def _step(self, task: Task, step: int, X: np.ndarray, y: np.ndarray | None) -> Answer:
        r, roster = int(task.round), self.roster()
        plan = self._plan(task)
        client = self._client(plan.noise.bits)
        if step == 0:
            return sw.adverts_to_arrays([client.advert()], roster)
        if step == 1:
            raise TaskRejected(f"{sw.SHARE} is not a step of this protocol (envelopes travel with the masked input)")
        if step == 2:
            for old in self._clients.values():  # erase every other round's secrets
                old.forget_except(r)
            adverts = sw.routed_adverts_from_arrays(task.arrays, self.spec.job_id, roster)
            inner = sw.inner_task(task)
            plan = self.half.secure_plan(self.spec, inner)
            if plan is None or plan.noise.bits != client.config.bits:
                raise TaskRejected(f"round {r}: the masked task does not match the advertised one")
            direct = (self.half.secure_row_sum(self.spec, inner, X, y, self.rng)
                      if plan.noise.rounding == "party" and not plan.integer and is_builtin(self.half) else None)
            if direct is not None:  # "party" rounding of the algorithm's own sum of clipped rows
                x = encode_party_sum(direct, plan, self.rng)
            else:
                x = encode_rows(self.half.secure_rows(self.spec, inner, X, y, self.rng), plan, self.rng)
            return sw.masked_to_arrays(client.masked_input(r, x, adverts), plan.noise.bits, roster)
        surv, drop = task.params.get("survivors"), task.params.get("dropped")
        if not (isinstance(surv, list) and isinstance(drop, list)):
            raise TaskRejected("an unmask task lists survivors and dropped parties")
        envs = sw.envelopes_from_arrays(task.arrays, self.spec.job_id, r, roster, prefix=sw.ENV)
        out = sw.unmask_to_arrays(client.unmask(r, [str(s) for s in surv], [str(d) for d in drop], envs), roster)
        client.forget(r)  # the answer is kept by answer(): a repeat gets it, nothing else is answered for r
        return out


def encode_party_sum(total: np.ndarray, plan: Any, rng: SecureRNG) -> np.ndarray:
    """"party" rounding of a party's float64 sum of clipped rows: rotated, scaled and rounded once
    (:func:`dpfed.core.distributed_noise.quantize_party_sum`), one discrete Gaussian share, mod 2^B."""
    total = np.asarray(total, dtype=np.float64)
    if total.shape != (plan.noise.dimension,):
        raise ValueError(f"a secure row sum must have {plan.noise.dimension} entries")
    q = dn.quantize_party_sum(total, plan.noise, seed=plan.seed, rng=rng)
    return dn.add_noise_mod(q, plan.noise.sigma_share, plan.noise.bits, rng)


def encode_rows(chunks: Any, plan: Any, rng: SecureRNG) -> np.ndarray:
    """Distributed-noise encoding of a stream of per-record row chunks (KLS21 Alg. 1): each row
    clipped, rotated, scaled and conditionally rounded on its own, the integer rows summed, one
    discrete Gaussian share added, mod 2^B (uint64 words). A plan with ``rounding == "party"`` sums
    the clipped rows in float64 and rotates, scales and rounds that sum once
    (:func:`dpfed.core.distributed_noise.quantize_party_sum`). An ``integer`` plan takes integer rows
    as they are (their sensitivities are exact; the algorithm's plan states them) and sums them."""
    if not plan.integer and plan.noise.rounding == "party":  # the clipped rows summed, the sum rounded once
        acc = np.zeros(plan.noise.dimension, dtype=np.float64)
        for rows in chunks:
            rows = np.asarray(rows, dtype=np.float64)
            if rows.ndim != 2 or rows.shape[1] != plan.noise.dimension:
                raise ValueError(f"secure rows must have {plan.noise.dimension} columns")
            if len(rows):
                acc += dn.party_row_sum(rows, plan.noise.clip)
        return encode_party_sum(acc, plan, rng)
    total = np.zeros(plan.length, dtype=np.int64)
    for rows in chunks:
        rows = np.asarray(rows) if plan.integer else np.asarray(rows, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] != plan.noise.dimension:
            raise ValueError(f"secure rows must have {plan.noise.dimension} columns")
        if plan.integer:
            if rows.dtype.kind not in "iu":
                raise TypeError("an integer secure plan takes integer rows")
            total += rows.astype(np.int64).sum(axis=0)
        elif len(rows):
            total += dn.quantize(rows, plan.noise, seed=plan.seed, rng=rng)
    return dn.add_noise_mod(total, plan.noise.sigma_share, plan.noise.bits, rng)
