"""A party's side of a secure-aggregation job: encode with distributed noise, mask, unmask.

Used by :class:`~dpfed.federation.session.PartySession` for jobs whose params say
``noise = "distributed"`` and ``secure_aggregation = true`` (every runner: party daemon, in-process,
Ray). A round r is at most four tasks, one per stage (:class:`~dpfed.federation.secure_wire.Stage`, one method
each below), each answered once per (round, stage) (a repeat of the same task gets the stored answer;
anything older is refused):

1. ``secagg/advertise`` (only when the coordinator lacks this session's keys: the first round, after
   a restart or a dropout): the session's long-term X25519 keys, signed once per job
   (:class:`~dpfed.federation.secagg.SecAggClient`);
2. ``secagg/masked``: check the neighbours' signed keys against the CA (once per advert; an advert
   verified before may come as a reference to its digest), check the
   algorithm's task and its secure plan against the charged plan (:mod:`dpfed.federation.release_gate`,
   the same gate for every learner), encode its per-record rows (clip, rotate, scale,
   conditional rounding, one exact discrete Gaussian share planned for P_min survivors and c
   colluders, mod 2^B: :mod:`dpfed.core.distributed_noise`), mask with a fresh self mask and the
   round's pairwise seeds, Shamir-share the self-mask seed into envelopes, record masked vector and
   envelopes durably in the ledger (one masked input per round, ever: a restarted party never
   releases a second one for the same round; if the ledger already holds another one for the round,
   that stored one leaves and this session forgets the round: it never unmasks it), send;
3. ``secagg/consistency``: sign the survivor set the coordinator claims (once per round,
   :mod:`dpfed.federation.secagg_consistency`);
4. ``secagg/unmask``: only for exactly the signed set, with valid signatures on it from at least t
   neighbours: shares of the self-mask seeds of survivors, or the round's pairwise seeds with dropped
   neighbours, never both for one party, never for fewer than P_min survivors; then the round's
   secrets are erased.

Keys are per job and session, self masks per round (the SecAgg module gives the security argument). The
whole job was charged when it was accepted; nothing here spends outside that plan. :func:`secure_refusal`
runs in ``decide`` before the charge: it builds the job's SecAgg configuration (roster, graph,
threshold) and applies the party's own trust settings (:class:`SecAggParty`).
"""
from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpfed.algorithms.contract import Answer, JobSpec, PartyAlgorithm, Task, TaskRejected, is_builtin
from dpfed.algorithms.secure_noise import is_secure, secure_params
from dpfed.algorithms.secure_release import SecureRelease
from dpfed.core import distributed_noise as dn
from dpfed.core.rng import SecureRNG
from dpfed.federation import release_gate
from dpfed.federation import secagg as sa
from dpfed.federation import secure_wire as sw
from dpfed.federation.certs import valid_name

__all__ = ["SecAggParty", "SecureParty", "SecureRefusal", "secure_refusal"]

log = logging.getLogger("dpfed.party")


@dataclass(frozen=True)
class SecAggParty:
    """A party's secure-aggregation setup: its certificate and key (they sign its SecAgg keys and survivor
    sets), the deployment CA (checks everyone else's) and its revocation list (``revoked``, and
    ``revocation`` to re-read it: the daemon's reads the CRL file when it changes, at each job), and the
    party's own trust settings, applied before any charge (:func:`secure_refusal`):

    * ``min_survivors``: the fewest survivors (P_min) a job may plan for;
    * ``colluders``: the parties this party assumes may collude with the coordinator. A job declaring
      fewer is refused (so the noise plan, computed from the job's value at the coordinator and at every
      party, always uses max(own, job's) = the job's: no party plans differently and the decode holds);
    * ``min_honest_shares``: a floor on P_min - c, the honest noise shares the plan counts on;
    * ``peers``: if not empty, the only parties it aggregates with: names, or certificate SHA-256
      fingerprints as ``sha256:HEX``. A roster naming anyone not listed by name is refused before the
      charge unless fingerprints are listed; then the certificates of the parties not named must carry
      one of them (checked when their advert arrives, before any key agreement);
    * ``public_records``: the bound on its record count this party publishes (party.toml; the daemon refuses
      to start when its data hold more). A job whose public bound on the TOTAL count, ``records``, is below it
      is refused: that bound is wrong for certain. Compared with the published bound, never with the data, so
      the refusal tells the coordinator nothing about the count.

    ``dropout`` (SIMULATIONS ONLY): the probability of missing each secure round (from its masked input on)."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes
    min_survivors: int = 2
    dropout: float = 0.0
    colluders: int = 0
    min_honest_shares: int = 1
    peers: tuple[str, ...] = ()
    public_records: int | None = None
    revoked: frozenset[int] = frozenset()
    revocation: Callable[[], Collection[int]] | None = None  # re-reads the deployment's revocation list

    def revoked_now(self) -> frozenset[int]:
        """The revoked serials as of now (``revoked`` and, if set, ``revocation()``): read per job."""
        return self.revoked | frozenset(self.revocation() if self.revocation is not None else ())

    def __post_init__(self) -> None:
        if self.min_survivors < 2:
            raise ValueError("min_survivors must be >= 2")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError("dropout must lie in [0, 1)")
        if self.colluders < 0 or self.min_honest_shares < 1:
            raise ValueError("need colluders >= 0 and min_honest_shares >= 1")
        bad = [p for p in self.peers if not (valid_name(p) or _fingerprint(p))]
        if bad:
            raise ValueError(f"peers lists party names or 'sha256:' + 64 hex digits, got {bad[0][:80]!r}")

    def fingerprints(self) -> frozenset[str]:
        return frozenset(f for f in (_fingerprint(p) for p in self.peers) if f)

    def accept_cert(self, name: str, der: bytes) -> str | None:
        """None if ``peers`` allows the certificate of ``name`` (DER), else why not."""
        if not self.peers or name in self.peers:
            return None
        if hashlib.sha256(der).hexdigest() in self.fingerprints():
            return None
        return f"{name!r} is not among this party's peers (by name or certificate fingerprint)"


def _fingerprint(entry: str) -> str:
    """The lowercase hex of a ``sha256:HEX`` peers entry ('' for a name)."""
    if not entry.lower().startswith("sha256:"):
        return ""
    hexpart = entry[7:].replace(":", "").lower()
    return hexpart if len(hexpart) == 64 and all(c in "0123456789abcdef" for c in hexpart) else ""


@dataclass(frozen=True)
class SecureRefusal:
    """Why a party refuses a secure job: a stable ``code`` (``not_secure``, ``no_secagg``, ``params``,
    ``roster``, ``not_in_roster``, ``min_survivors``, ``colluders``, ``min_honest_shares``, ``peers``,
    ``threshold``) and a public reason."""

    code: str
    reason: str


def secure_refusal(name: str, setup: SecAggParty | None, simulation: bool, needs_secure_aggregation: bool,
                   spec: JobSpec) -> SecureRefusal | None:
    """Why a party refuses ``spec`` for secure-aggregation reasons, or None; everything a secure job can
    be refused for is checked here, in ``decide``, before the charge (the SecAgg configuration built)."""
    if not needs_secure_aggregation:
        return None
    if not is_secure(spec.params):
        if simulation:
            return None
        return SecureRefusal("not_secure", "this job is private against the coordinator only under secure "
                             "aggregation (distributed noise) but does not ask for it (secure_aggregation = "
                             "false); the party accepts that only in simulations")
    if setup is None:
        return SecureRefusal("no_secagg", "this party does not take part in secure aggregation "
                             "(secure_aggregation = false, or no certificate)")
    try:
        sp = secure_params(spec.params)
        sw.check_roster(sp.roster)
    except ValueError as exc:
        return SecureRefusal("roster" if "roster" in str(exc) else "params",
                             f"bad secure-aggregation parameters: {exc}")
    if name not in sp.roster:
        return SecureRefusal("not_in_roster", f"this party ({name!r}) is not in the job's roster")
    return _trust_refusal(setup, sp) or _config_refusal(spec, sp)


def _trust_refusal(setup: SecAggParty, sp: Any) -> SecureRefusal | None:
    """The party's own trust settings against the job's public parameters."""
    if sp.min_survivors < setup.min_survivors:
        return SecureRefusal("min_survivors", f"the job's min_survivors {sp.min_survivors} is below this "
                             f"party's minimum {setup.min_survivors}")
    if sp.colluders < setup.colluders:
        return SecureRefusal("colluders", f"the job assumes {sp.colluders} colluding parties, this party "
                             f"assumes {setup.colluders}: the noise would be planned for too many honest shares")
    if sp.min_survivors - sp.colluders < setup.min_honest_shares:
        return SecureRefusal("min_honest_shares", f"the job plans its noise for P_min - c = "
                             f"{sp.min_survivors - sp.colluders} honest shares, this party requires at least "
                             f"{setup.min_honest_shares}")
    if setup.peers and not setup.fingerprints():
        unknown = [n for n in sp.roster if n not in setup.peers]
        if unknown:
            return SecureRefusal("peers", f"the roster names {len(unknown)} parties outside this party's peers "
                                 f"(first: {unknown[0]!r})")
    if setup.public_records is not None and sp.records < setup.public_records:
        return SecureRefusal("records", f"the job's public record bound {sp.records} (all parties together) is "
                             f"below this party's published bound {setup.public_records}")
    return None


def _config_refusal(spec: JobSpec, sp: Any) -> SecureRefusal | None:
    """The job's SecAgg configuration, built as every round will build it: refused if it cannot be built
    or its threshold does not exceed the colluders a neighbourhood may hold (secagg_graph's theorem)."""
    try:
        config = sw.secagg_config(spec, sp.bits)
    except ValueError as exc:
        return SecureRefusal("threshold", f"no secure-aggregation configuration for this roster: {exc}")
    if not config.safe_against_lying_coordinator:
        return SecureRefusal("threshold", f"the threshold {config.threshold} does not exceed the "
                             f"{config.colluders} colluders a neighbourhood may hold")
    return None


@dataclass
class SecureParty:
    """One accepted secure job at one party (created by ``decide``): one method per SecAgg stage."""

    name: str
    spec: JobSpec
    half: PartyAlgorithm
    release: SecureRelease  # the half's secure release (plan, rows); every masked input passes the release gate
    setup: SecAggParty
    rng: SecureRNG
    durable: Callable[[int, str, Answer], Answer]  # records round r's masked input before it leaves
    dropout_rng: SecureRNG | None = None
    _clients: dict[int, sa.SecAggClient] = field(default_factory=dict)
    _record: tuple[tuple[int, int], str, Answer] | None = None   # ((round, stage order), task digest, answer)
    _drops: dict[int, bool] = field(default_factory=dict)        # round -> misses it (simulated dropout)
    _roster: tuple[str, ...] = field(default=(), init=False, repr=False)  # the job's roster, read once

    def roster(self) -> tuple[str, ...]:
        if not self._roster:
            self._roster = tuple(secure_params(self.spec.params).roster)
        return self._roster

    def _client(self, bits: int) -> sa.SecAggClient:
        c = self._clients.get(bits)
        if c is None:
            try:
                revoked = self.setup.revoked_now()
            except Exception as exc:  # noqa: BLE001 - e.g. the CRL file vanished: refuse, never crash
                raise TaskRejected(f"the revocation list cannot be read ({type(exc).__name__}: {exc})") from None
            c = sa.SecAggClient(sw.secagg_config(self.spec, bits), self.name, self.setup.cert_pem,
                                self.setup.key_pem, self.setup.ca_pem, revoked=revoked,
                                accept=self.setup.accept_cert)
            self._clients[bits] = c
        return c

    def _drops_round(self, r: int) -> bool:
        """SIMULATIONS ONLY: whether this party misses round r from its masked input on (with keys per job,
        a survivor that misses the unmask step while a neighbour dropped would abort the round)."""
        if self.setup.dropout <= 0.0:
            return False
        if r not in self._drops:
            rng = self.dropout_rng or SecureRNG()
            self._drops = {r: bool(rng.uniform(2)[0] < self.setup.dropout)}
        return self._drops[r]

    def answer(self, task: Task, digest: str, X: np.ndarray, y: np.ndarray | None) -> Answer:
        """The answer to one SecAgg stage, or :class:`TaskRejected` with a public reason."""
        try:
            stage = sw.stage_of(task.kind)
        except ValueError as exc:
            raise TaskRejected(str(exc)) from None
        key = (int(task.round), stage.order)
        if self._record is not None:
            seen, seen_digest, stored = self._record
            if key == seen:
                if digest != seen_digest:
                    raise TaskRejected(f"round {task.round} step {task.kind} was already answered for a different task")
                return stored
            if key < seen:
                raise TaskRejected(f"round {task.round} step {task.kind} comes after round {seen[0]} "
                                   f"step {list(sw.Stage)[seen[1]].value} (out of order)")
        if stage.order >= sw.Stage.MASKED.order and self._drops_round(task.round):
            raise TaskRejected(f"simulated dropout: {self.name} misses round {task.round} from {task.kind}")
        try:
            out = self._stage(stage, task, digest, X, y)
        except (TaskRejected, sa.SecAggError) as exc:
            raise TaskRejected(f"{type(exc).__name__}: {exc}") from None
        except (ValueError, KeyError, TypeError) as exc:  # malformed task arrays or params
            if stage is sw.Stage.MASKED:  # the algorithm's rows may be in the trace: only the type leaves
                log.error("job %s round %d: secure answer failed (%s; message withheld: it may hold record "
                          "values)", self.spec.job_id, task.round, type(exc).__name__)
                raise TaskRejected(f"the party failed to compute its masked input ({type(exc).__name__}; "
                                   "see the party's log)") from None
            raise TaskRejected(f"malformed {task.kind} task: {exc}") from None
        self._record = (key, digest, out)
        return out

    def _stage(self, stage: sw.Stage, task: Task, digest: str, X: np.ndarray, y: np.ndarray | None) -> Answer:
        plan = self._plan(task)
        client = self._client(plan.noise.bits)
        if stage is sw.Stage.ADVERTISE:
            return self.advertise(client)
        if stage is sw.Stage.MASKED:
            return self.masked(client, task, digest, X, y)
        if stage is sw.Stage.CONSISTENCY:
            return self.consistency(client, task)
        return self.unmask(client, task)

    def _plan(self, task: Task) -> Any:
        inner = Task(task.job_id, task.round, str(task.params.get("kind", "")))
        plan = self.release.plan(self.spec, inner)
        if plan is None:
            raise TaskRejected(f"round {task.round}: {inner.kind!r} is not a secure task of this job")
        return plan

    def advertise(self, client: sa.SecAggClient) -> Answer:
        """Stage ADVERTISE: this session's signed long-term keys."""
        return sw.adverts_to_arrays([client.advert()], self.roster())

    def masked(self, client: sa.SecAggClient, task: Task, digest: str, X: np.ndarray,
               y: np.ndarray | None) -> Answer:
        """Stage MASKED: encode, mask, record durably, send. If the ledger holds another masked input for
        this round (a restart), that one leaves and the round is forgotten here: never unmasked."""
        r, roster = int(task.round), self.roster()
        for old in self._clients.values():  # erase every other round's secrets
            old.forget_except(r)
        inner = sw.inner_task(task)
        plan = release_gate.secure_plan(self.half, self.release, self.spec, inner)  # the charged plan
        if plan.noise.bits != client.config.bits:
            raise TaskRejected(f"round {r}: the masked task does not match the advertised one")
        adverts = sw.routed_adverts_from_arrays(task.arrays, self.spec.job_id, roster)
        direct = (self.release.row_sum(self.spec, inner, X, y, self.rng)
                  if plan.noise.rounding == "party" and not plan.integer and is_builtin(self.half) else None)
        if direct is not None:  # "party" rounding of the algorithm's own sum of clipped rows
            x = encode_party_sum(direct, plan, self.rng)
        else:
            x = encode_rows(self.release.rows(self.spec, inner, X, y, self.rng), plan, self.rng)
        mine = sw.masked_to_arrays(client.masked_input(r, x, adverts), plan.noise.bits, roster)
        try:
            out = self.durable(r, digest, mine)
        except Exception:
            client.forget(r)  # refused by the ledger: nothing of this session's masks left, never unmasked
            raise
        if set(out) != set(mine) or not all(np.array_equal(out[k], mine[k]) for k in mine):
            client.forget(r)  # an earlier session's masked input leaves: these masks never will
        return out

    def consistency(self, client: sa.SecAggClient, task: Task) -> Answer:
        """Stage CONSISTENCY: sign the claimed survivor set (once per round)."""
        r = int(task.round)
        req = sw.consistency_from_arrays(task.arrays, task.params.get("survivors"), self.spec.job_id, r,
                                         self.roster())
        sig = client.sign_survivors(r, req.survivors, req.advert_digests)
        return {"sig": np.frombuffer(sig, dtype=np.uint8).copy()}

    def unmask(self, client: sa.SecAggClient, task: Task) -> Answer:
        """Stage UNMASK: only for the signed set with enough valid signatures; then the round is erased."""
        r, roster = int(task.round), self.roster()
        surv, drop = task.params.get("survivors"), task.params.get("dropped")
        if not (isinstance(surv, list) and isinstance(drop, list)):
            raise TaskRejected("an unmask task lists survivors and dropped parties")
        envs = sw.envelopes_from_arrays(task.arrays, self.spec.job_id, r, roster, prefix=sw.ENV)
        sigs = sw.signatures_from_arrays(task.arrays, roster)
        try:
            resp = client.unmask(r, [str(s) for s in surv], [str(d) for d in drop], envs, sigs)
        except sa.ConsistencyRefused:
            client.forget(r)  # the round is aborted for this party: nothing of it will ever be revealed
            raise
        out = sw.unmask_to_arrays(resp, roster)
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
    discrete Gaussian share (a distributed discrete Laplace plan: a Polya share) added, mod 2^B
    (uint64 words). A plan with ``rounding == "party"`` sums
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
    return plan.add_noise_mod(total, rng)  # a discrete Gaussian or (integer plans) a Polya share
