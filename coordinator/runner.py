"""The coordinator's job runner: one thread per running job offers it, then drives its rounds.

Every chosen party is offered the job spec and accepts only after charging its own ledger (or
refuses with a reason, shown to the operator); then the one driver loop
(:func:`dpfed.algorithms.driver.drive`) runs the algorithm's coordinator half: each task is put on the
streams of all parties (a header part, then chunk groups), and once all answers have arrived (a
condition variable wakes the runner on every result) they are merged by the algorithm's ``combine``.
Before every round the coordinator's half and the task are checkpointed durably, so a restarted
coordinator re-sends the identical task (see :mod:`coordinator.server` on faults and resuming).
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any, Mapping

import numpy as np

from coordinator.live import Active, CoordinatorBase, JobFailed
from coordinator.state import RESUMABLE_STATES, CheckpointError, JobRecord
from dpfed.algorithms.contract import Aggregate, CoordinatorAlgorithm, JobSpec, Task, jsonable
from dpfed.algorithms.driver import Combine, drive
from dpfed.algorithms.secure_noise import is_secure
from dpfed.algorithms.secure_release import release_for
from dpfed.data.schema import Schema
from dpfed.federation.plugins import load_algorithm
from dpfed.federation.secure_gather import SecureGather
from protos import dpfed_pb2 as pb
from protos.codec import PROTOCOL_VERSION, chunk_groups, encode_arrays

__all__ = ["JobRunner"]

log = logging.getLogger("dpfed.coordinator")


#: Reasons a resume cannot change (the same parameters are refused again): no resume hint for them.
HOPELESS = ("bad job", "differs from the job's plan", "invalid job", "unknown algorithm", "no such algorithm")


def resume_hint(reason: str, job_id: str) -> str:
    """What the operator can do about a failed, refused or cancelled job whose resume can succeed."""
    if "privacy budget exceeded" in reason:
        return f"a resume succeeds only after the refusing parties raise their limits: dpfed job resume {job_id}"
    return f"continue it with: dpfed job resume {job_id}"


class JobRunner(CoordinatorBase):
    """Runs queued jobs (mixed into :class:`coordinator.server.Coordinator`)."""

    def _run_loop(self) -> None:
        while True:
            job_id = self._queue.get()
            if job_id is None:
                return
            rec = self.jobs[job_id]
            with self._cond:
                if rec.terminal or job_id in self._running:  # cancelled while queued, or queued twice
                    continue
                self._running.add(job_id)
            try:
                self._run_job(rec)
            except Exception as exc:  # the coordinator keeps serving whatever a job does
                log.exception("job %s failed", job_id)
                self._finish(rec, "failed", f"{type(exc).__name__}: {exc}")
            finally:
                with self._cond:
                    self._running.discard(job_id)

    def _finish(self, rec: JobRecord, state: str, reason: str = "") -> None:
        with self._cond:
            act = self._actives.pop(rec.job_id, None)
            if self._stopping and state in ("failed", "cancelled") and rec.job_id not in self._cancel:
                # interrupted by the shutdown: keeps its state on disk and resumes on restart
                rec.reason = f"interrupted: {reason}"
                self.store.save_job(rec)
                self._changed()
                return
            rec.state, rec.reason, rec.finished = state, reason, time.time()
            self.metrics.job_finished(state)
            rec.resumable = state in RESUMABLE_STATES and not any(m in reason for m in HOPELESS)
            if rec.resumable and reason:
                rec.reason = f"{reason} ({resume_hint(reason, rec.job_id)})"
            self._cancel.discard(rec.job_id)
            self.store.save_job(rec)
            if self.pool is not None:
                for i in range(len(self.pool.addresses)):
                    self.pool.submit(i, ("end", rec.job_id))
            parties = act.parties if act is not None else []
            for name in parties:
                sess = self._sessions.get(name)
                if sess is not None:
                    sess.outbox.put(pb.CoordinatorMessage(version=PROTOCOL_VERSION, job_id=rec.job_id, round=-1,
                                                          job_end=f"{state}: {reason}" if reason else state))
            self._changed()
        if state == "done":
            self.store.drop_checkpoint(rec.job_id)
        log.info("job %s %s %s", rec.job_id, state, reason)

    def _wait(self, act: Active, done, timeout: float, what: str, waiting) -> None:
        """Wait (on the condition) until ``done()`` or the job fails; raise on failure or timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not act.failure and not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    self._fail(act, f"timed out after {timeout:g} s waiting for {what} from "
                                      f"{', '.join(waiting())}")
                    break
                self._cond.wait(timeout=left)
            if act.failure:
                raise JobFailed(act.failure)

    def _run_job(self, rec: JobRecord) -> None:
        """Offer the job, then drive it from its first or checkpointed round to its end."""
        parties = self._job_parties(rec)
        if parties is None:
            return
        made = self._make_spec(rec, parties)
        if made is None:
            return
        spec, algo, checkpoint = made
        act = self._offer_job(rec, spec, algo, parties)
        if act is None:
            return
        first: Task | None = None
        if checkpoint is None:
            coord, rec.rounds = algo.coordinator(spec, parties), 0
        elif checkpoint.get("spec_json") != spec.to_json() or checkpoint.get("parties") != parties:
            self._finish(rec, "failed", "the job's checkpoint belongs to another spec or set of parties")
            return
        else:
            coord, first, rec.rounds = checkpoint["coordinator"], checkpoint["task"], int(checkpoint["rounds"])
            rec.resumed_at.append(int(first.round))
            log.info("job %s resumes at round %d", rec.job_id, first.round)
        with self._cond:
            rec.state, rec.progress = "running", float(coord.progress)
            self.store.save_job(rec)
            self._changed()
        self.metrics.job_started(rec.job_id, rec.algorithm)
        self._drive(rec, act, algo, coord, first)

    def _job_parties(self, rec: JobRecord) -> list[str] | None:
        """The job's parties once all are connected (None: the job ended here, with the reason)."""
        cfg = self.config
        if rec.parties:  # named parties (every resumed job): give them time to (re)connect
            self.wait_for_parties(list(rec.parties), cfg.offer_timeout, lambda: rec.terminal)
        with self._cond:
            if rec.terminal:  # cancelled while it waited for its parties
                return None
            if rec.job_id in self._cancel:
                self._finish(rec, "cancelled", "cancelled by the operator before it started")
                return None
            connected = sorted(n for n, s in self._sessions.items() if s.streaming and not s.closed)
            parties = list(rec.parties) or connected
            missing = [p for p in parties if p not in connected]
        if not parties:
            self._finish(rec, "failed", "no party is connected")
            return None
        if missing:
            self._finish(rec, "failed", f"party {', '.join(missing)} not connected (waited {cfg.offer_timeout:g} s)")
            return None
        schemas = {json.dumps(self.store.parties.get(p, {}).get("schema"), sort_keys=True) for p in parties}
        if rec.schema is None:
            if len(schemas) != 1:
                self._finish(rec, "failed", "the parties declare different schemas; give the job a schema")
                return None
            rec.schema = json.loads(schemas.pop())
        return parties

    def _make_spec(self, rec: JobRecord, parties: list[str]) -> tuple[JobSpec, Any, dict | None] | None:
        """The job's public spec (a secure job's roster added), its algorithm and its checkpoint."""
        try:
            params = dict(rec.params)
            if is_secure(params):  # the roster is part of the public spec each party checks
                params.setdefault("roster", list(parties))
            spec = JobSpec(rec.job_id, rec.algorithm, params, Schema.from_dict(rec.schema))
            algo = load_algorithm(rec.algorithm, self.config.plugins)
        except Exception as exc:  # noqa: BLE001 - any bad parameter ends this job only
            self._finish(rec, "failed", f"bad job: {type(exc).__name__}: {exc}")
            return None
        try:
            return spec, algo, self.store.load_checkpoint(rec.job_id)
        except CheckpointError as exc:
            self._finish(rec, "failed", str(exc))
            return None

    def _offer_job(self, rec: JobRecord, spec: JobSpec, algo: Any, parties: list[str]) -> Active | None:
        """Offer the job to every party and wait for their answers (None: it ended, refused or failed)."""
        offer = pb.CoordinatorMessage(version=PROTOCOL_VERSION, job_id=spec.job_id, round=-1,
                                      offer=pb.JobOffer(spec_json=spec.to_json()))
        # the plan every party must charge, from the public parameters; computed while the parties decide
        act = Active(spec, parties, self._planner.submit(lambda: algo.party_for(spec.params).job_event(spec)), offer)
        with self._cond:
            self._actives[spec.job_id] = act
            rec.parties, rec.state, rec.refusals = parties, "offering", {}
            rec.started = rec.started or time.time()
            self.store.save_job(rec)
            for p in parties:
                self._offer_to(self._sessions[p], act)
            self._changed()
        try:
            self._wait(act, lambda: len(act.responses) == len(parties), self.config.offer_timeout,
                       "an answer to the offer", lambda: [p for p in parties if p not in act.responses])
        except JobFailed as exc:
            self._record_offer(rec, act)
            self._finish(rec, "cancelled" if rec.job_id in self._cancel else "failed", str(exc))
            return None
        self._record_offer(rec, act)
        bad = act.plan.exception()
        if bad is not None:
            self._finish(rec, "failed", f"bad job: {type(bad).__name__}: {bad}")
        elif act.mismatch:
            self._finish(rec, "failed", "; ".join(v for _, v in sorted(act.mismatch.items())))
        elif rec.refusals:
            self._finish(rec, "refused", "; ".join(f"{p} refused: {r}" for p, r in sorted(rec.refusals.items())))
        else:
            return act
        return None

    def _secure_step(self, act: Active, tasks: Mapping[str, Task]) -> dict[str, dict[str, np.ndarray]]:
        """One SecAgg step in this process: a task per party; whoever refuses or is late has dropped out."""
        self._broadcast(act, next(iter(tasks.values())), tasks)
        deadline = time.monotonic() + self.config.task_timeout
        with self._cond:
            while not act.failure and not set(tasks) <= set(act.answers) | act.errors:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(timeout=left)
            if act.failure:
                raise JobFailed(act.failure)
            answers, act.answers, act.errors, act.complete = act.answers, {}, set(), True
        return answers

    def _drive(self, rec: JobRecord, act: Active, algo: Any, coord: CoordinatorAlgorithm, first: Task | None) -> None:
        """Run the driver loop: checkpoint, broadcast and gather every round; save the model at the end."""
        cfg, spec, parties = self.config, act.spec, act.parties
        last_save = time.monotonic()

        def send_merged(tasks: Mapping[str, Task], merge: Combine | None) -> list[Aggregate]:
            """Coordinator on Ray: a SecAgg step whose answers each shard merges with ``merge`` (the
            masked inputs: one partial sum per shard), or hands on per party (``merge`` None)."""
            self._broadcast(act, next(iter(tasks.values())), tasks, merge=merge)
            return self._collect(act, tasks, tolerant=True)

        def send(tasks: Mapping[str, Task]) -> dict[str, dict[str, np.ndarray]]:
            if self.pool is not None:
                return {agg.parties[0]: dict(agg.arrays) for agg in send_merged(tasks, None)}
            return self._secure_step(act, tasks)

        secure = SecureGather(spec, release_for(algo, spec), send, send_merged=send_merged if self.pool is not None else None) \
            if is_secure(spec.params) else None
        act.tolerant = secure is not None

        def gather(task: Task) -> list[Aggregate]:
            # Durable before the round leaves: the state after the previous round and this very task.
            self.store.save_checkpoint(rec.job_id, {"spec_json": spec.to_json(), "parties": parties,
                                                    "rounds": rec.rounds, "coordinator": coord, "task": task})
            if secure is not None:
                return secure(task)
            self._broadcast(act, task)
            if self.pool is not None:  # one partial aggregate per shard (merged there)
                return self._collect(act, parties, tolerant=False)
            self._wait(act, lambda: len(act.answers) == len(parties), cfg.task_timeout,
                       f"results of round {task.round}", lambda: [p for p in parties if p not in act.answers])
            with self._cond:
                answers, act.answers, act.complete = act.answers, {}, True
            return [Aggregate(a, (name,)) for name, a in sorted(answers.items())]

        def on_round(task: Task, c: CoordinatorAlgorithm) -> None:
            nonlocal last_save
            self.metrics.round_done(rec.job_id, rec.algorithm, int(task.round),
                                    *((secure.dropouts, secure.aborted_rounds) if secure is not None else (0, 0)))
            with self._cond:
                rec.rounds += 1
                rec.progress = float(c.progress)
                if time.monotonic() - last_save > 2.0:
                    self.store.save_job(rec)
                    last_save = time.monotonic()
                self._changed()

        try:
            drive(coord, gather, algo.combine, on_round=on_round, first=first)
        except JobFailed as exc:
            self._finish(rec, "cancelled" if rec.job_id in self._cancel else "failed", str(exc))
            return
        finally:
            if secure is not None:
                self.metrics.secure_totals(rec.job_id, secure.dropouts, secure.aborted_rounds)
        self.store.save_model(rec.job_id, coord.model())
        rec.summary = jsonable({**coord.summary(), **(secure.summary() if secure is not None else {})})
        rec.progress = 1.0
        self._finish(rec, "done")

    def _collect(self, act: Active, parties, tolerant: bool) -> list[Aggregate]:
        """Coordinator on Ray: the current round's parts from every shard holding one of ``parties``.
        Non-tolerant (a plain round): a refusal fails the job, so does a party silent for
        ``answer_timeout``. Tolerant (a SecAgg step): refusals and late parties are dropouts."""
        cfg, job = self.config, act.spec.job_id
        with self._cond:
            calls = {i: (job, act.round, act.task_id) for i in sorted({self.pool.assign(p) for p in parties})}
        deadline = time.monotonic() + cfg.task_timeout
        parts: list[Aggregate] = []
        while calls:
            with self._cond:
                if act.failure:
                    raise JobFailed(act.failure)
            left = deadline - time.monotonic()
            final = left <= 0
            results = self.pool.collect(calls, wait=min(1.0, max(left, 0.0)), final=final and tolerant)
            missing: list[str] = []
            for i, r in results.items():
                if r["errors"] and not tolerant:
                    who, err = sorted(r["errors"].items())[0]
                    self.metrics.refusal(job, who, err)
                    with self._cond:
                        self._fail(act, f"party {who!r} refused task {act.round} of job {job}: {err}")
                        raise JobFailed(act.failure)
                if r["stale"]:  # the shard moved on: this round cannot complete any more
                    with self._cond:
                        self._fail(act, f"ingress shard {i} no longer holds round {act.round} of job {job}")
                        raise JobFailed(act.failure)
                if r["complete"] or (final and tolerant):
                    parts.extend(r["parts"])
                    for agg in r["parts"]:
                        self.metrics.shard_part(job, i, sum(np.asarray(a).nbytes for a in agg.arrays.values()))
                    for who, err in r["errors"].items():
                        log.info("job %s round %d: %s dropped out (%s)", job, act.round, who, err)
                    del calls[i]
                else:
                    missing.extend(r["missing"])
            if calls and final:
                with self._cond:
                    self._fail(act, f"timed out after {cfg.task_timeout:g} s waiting for results of round "
                                    f"{act.round} from {', '.join(sorted(missing)) or 'a shard'}")
                    raise JobFailed(act.failure)
        with self._cond:
            act.complete = True
            self._changed()
        return parts

    def _record_offer(self, rec: JobRecord, act: Active) -> None:
        with self._cond:
            for p, r in act.responses.items():
                if p in act.mismatch:
                    self.metrics.refusal(rec.job_id, p, act.mismatch[p])
                    continue
                if r.accept:
                    rec.party_epsilon[p] = float(r.epsilon_job)
                else:
                    rec.refusals[p] = r.reason or "no reason given"
                    self.metrics.refusal(rec.job_id, p, rec.refusals[p])
            self.store.save_job(rec)

    def _broadcast(self, act: Active, task: Task, per_party: Mapping[str, Task] | None = None,
                   merge: Combine | None = None) -> None:
        """Put the task on the stream of every party that has accepted: a header part, then chunk groups
        (``per_party``: each listed party gets its own task of the same round and task id, e.g. a SecAgg
        step; ``merge``: the shards merge those answers with it). A party that is away gets it when it
        comes back and accepts again (:meth:`respond_job`)."""
        cfg = self.config
        task_id = uuid.uuid4().hex
        ids = dict(version=PROTOCOL_VERSION, job_id=act.spec.job_id, round=int(task.round), task_id=task_id)

        def messages(t: Task) -> list[pb.CoordinatorMessage]:
            groups = list(chunk_groups(encode_arrays(t.arrays, cfg.chunk_bytes), cfg.chunk_bytes))
            msgs = []
            for i, g in enumerate(groups):
                m = pb.CoordinatorMessage(**ids, chunks=g, last=i == len(groups) - 1)
                if i == 0:
                    m.task.CopyFrom(pb.TaskHeader(kind=t.kind, params_json=json.dumps(jsonable(dict(t.params)))))
                msgs.append(m)
            return msgs

        out = {p: messages(t) for p, t in per_party.items()} if per_party is not None else \
            dict.fromkeys(act.parties, messages(task))
        log.debug("job %s round %d: %s sent to %d parties", act.spec.job_id, task.round, task.kind, len(out))
        with self._cond:
            if act.failure:
                raise JobFailed(act.failure)
            act.round, act.task_id, act.answers, act.errors = int(task.round), task_id, {}, set()
            act.msgs, act.complete = out, False
            if self.pool is not None:
                self._broadcast_to_shards(act, task, out, per_party is not None, merge)
                return
            for p, msgs in out.items():
                sess = self._sessions.get(p)
                if sess is None or p not in act.ready:
                    log.warning("party %s is away; round %d of job %s waits for it", p, task.round, act.spec.job_id)
                    continue
                for m in msgs:
                    sess.outbox.put(m)
                self.metrics.sent(sum(m.ByteSize() for m in msgs))

    def _broadcast_to_shards(self, act: Active, task: Task, out: Mapping[str, list], per_party: bool,
                             merge: Combine | None = None) -> None:
        """Call with self._cond held: tell each shard which of its parties answer this round and how it
        merges their answers (the algorithm's combine; ``merge``; per party for a SecAgg step without
        one), then put the task on the streams of those that accepted (one operation per shard and
        message list)."""
        job = act.spec.job_id
        by_shard: dict[int, list[str]] = {}
        for p in out:
            by_shard.setdefault(self.pool.assign(p), []).append(p)
        header = Task(task.job_id, task.round, task.kind, task.params, {} if per_party else task.arrays)
        act.expects = {}
        for i, names in sorted(by_shard.items()):
            act.expects[i] = (job, act.round, act.task_id, header, act.spec.algorithm, names,
                              per_party and merge is None, act.tolerant, merge)
            self.pool.submit(i, ("expect", *act.expects[i]))
            groups: dict[int, tuple[list[str], list]] = {}
            for p in names:
                sess = self._sessions.get(p)
                if sess is None or p not in act.ready:
                    log.warning("party %s is away; round %d of job %s waits for it", p, task.round, job)
                    continue
                groups.setdefault(id(out[p]), ([], out[p]))[0].append(sess.token)
            for tokens, msgs in groups.values():
                self.pool.submit(i, ("send", tokens, msgs))
                self.metrics.sent(len(tokens) * sum(m.ByteSize() for m in msgs), shard=i)
