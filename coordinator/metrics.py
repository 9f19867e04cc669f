"""The coordinator's Prometheus metrics (``metrics_port``) and the job timelines the console shows.

:class:`Metrics` is the one observer the coordinator's runner and party calls report to (a round ended,
bytes went out or came in, a party refused, a secure round lost parties or was aborted); it counts into
its own ``prometheus_client`` registry (never the process-global one: several coordinators may share a
process in tests) and into :class:`coordinator.timeline.Timelines`. Gauges that describe the present
(connected parties, every party's spent epsilon and limit, jobs by state, parties per ingress shard)
are read from the coordinator's status at scrape time. The metric list is in deploy/README.md.

Counts are of this process's life (a restarted coordinator starts at 0, as Prometheus expects of a
counter); labels are bounded: algorithm names, refusal kinds, job states, party names, shard indices.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinator.timeline import Timelines

__all__ = ["Metrics", "refusal_kind", "REFUSAL_KINDS", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: (kind, words any of which in a refusal's reason mark it), first match wins; else "other".
REFUSAL_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("budget", ("privacy budget exceeded",)),
    ("event_mismatch", ("differs from the job's plan",)),
    ("job_conflict", ("already used with other parameters", "already charged without")),
    ("schema", ("schema",)),
    ("labels", ("needs labels",)),
    ("algorithm", ("unknown algorithm",)),
    ("secure_aggregation", ("secure aggregation", "secure-aggregation", "survivors", "colluders", "honest shares",
                            "peers")),
    ("parameters", ("bad job parameters", "malformed")),
    ("timeout", ("timed out",)),
    ("task", ("task rejected", "failed to compute")),
)
_ROUND_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)


def refusal_kind(reason: str) -> str:
    """A refusal's reason (free text from a party or the coordinator) as one of a few bounded label values."""
    low = reason.lower()
    for kind, words in REFUSAL_KINDS:
        if any(w in low for w in words):
            return kind
    return "other"


class _Live(Collector):
    """Gauges read from the coordinator's status when Prometheus scrapes."""

    def __init__(self, status: Callable[[], Mapping[str, Any]]) -> None:
        self.status = status

    def collect(self) -> Iterable[GaugeMetricFamily]:
        st = self.status()
        parties = st.get("parties", [])
        yield GaugeMetricFamily("dpfed_connected_parties", "Parties with an open task stream",
                                value=sum(1 for p in parties if p.get("connected")))
        yield GaugeMetricFamily("dpfed_known_parties", "Parties that ever registered", value=len(parties))
        spent = GaugeMetricFamily("dpfed_party_epsilon_spent", "Epsilon each party has spent (the coordinator's "
                                  "record of every plan the party accepted, composed)", labels=["party"])
        limit = GaugeMetricFamily("dpfed_party_epsilon_limit", "Each party's declared epsilon limit", labels=["party"])
        for p in parties:
            spent.add_metric([p["name"]], float(p.get("epsilon_spent", 0.0)))
            if "epsilon_limit" in p:
                limit.add_metric([p["name"]], float(p["epsilon_limit"]))
        yield spent
        yield limit
        jobs = GaugeMetricFamily("dpfed_jobs", "Jobs by state", labels=["state"])
        counts: dict[str, int] = {s: 0 for s in ("queued", "offering", "running", "done", "failed", "refused",
                                                 "cancelled")}
        for j in st.get("jobs", []):
            counts[j["state"]] = counts.get(j["state"], 0) + 1
        for state, n in sorted(counts.items()):
            jobs.add_metric([state], n)
        yield jobs
        if "shards" in st:
            sh = GaugeMetricFamily("dpfed_shard_connected_parties", "Parties streaming through each ingress shard",
                                   labels=["shard"])
            for s in st["shards"]:
                sh.add_metric([str(s["index"])], len(s["parties"]))
            yield sh


class Metrics:
    """Counters, histograms and live gauges of one coordinator, and its jobs' timelines."""

    def __init__(self, status: Callable[[], Mapping[str, Any]]) -> None:
        self.registry = r = CollectorRegistry()
        self.timelines = Timelines()
        self.rounds = Counter("dpfed_rounds", "Rounds completed, all jobs", ["algorithm"], registry=r)
        self.round_seconds = Histogram("dpfed_round_seconds", "Seconds from a round's task to its last answer",
                                       ["algorithm"], buckets=_ROUND_BUCKETS, registry=r)
        self.bytes_sent = Counter("dpfed_task_bytes_sent", "Bytes of task messages put on parties' streams "
                                  "(serialized protobuf, per recipient)", registry=r)
        self.bytes_received = Counter("dpfed_result_bytes_received", "Bytes of result messages received from "
                                      "parties (serialized protobuf)", registry=r)
        self.refusals = Counter("dpfed_refusals", "Refusals: offers a party refused, tasks refused, events that "
                                "did not match the plan", ["kind"], registry=r)
        self.dropouts = Counter("dpfed_dropouts", "Secure aggregation: party-rounds a party missed", registry=r)
        self.aborted = Counter("dpfed_aborted_rounds", "Secure aggregation: rounds aborted (too few survivors; "
                               "nothing unmasked)", registry=r)
        self.finished = Counter("dpfed_jobs_finished", "Jobs that ended, by final state", ["state"], registry=r)
        self.shard_sent = Counter("dpfed_shard_task_bytes_sent", "Bytes of task messages handed to each ingress "
                                  "shard for its parties (per recipient)", ["shard"], registry=r)
        self.shard_received = Counter("dpfed_shard_result_bytes_received", "Bytes of the partial aggregates each "
                                      "ingress shard handed the driver (array payload)", ["shard"], registry=r)
        self.shard_parts = Counter("dpfed_shard_partial_aggregates", "Partial aggregates each ingress shard handed "
                                   "the driver", ["shard"], registry=r)
        r.register(_Live(status))

    # ------------------------------------------------------------------ what the coordinator reports
    def job_started(self, job_id: str, algorithm: str) -> None:
        tl = self.timelines.get(job_id, algorithm)
        tl.round_started = time.time()

    def round_done(self, job_id: str, algorithm: str, round_: int, dropouts: int = 0, aborted: int = 0) -> None:
        """A round of ``job_id`` ended; ``dropouts`` / ``aborted`` are the secure gather's totals so far."""
        seconds, _ = self.timelines.round_done(job_id, round_)
        self.rounds.labels(algorithm).inc()
        self.round_seconds.labels(algorithm).observe(seconds)
        self.secure_totals(job_id, dropouts, aborted)

    def secure_totals(self, job_id: str, dropouts: int, aborted: int) -> None:
        """Bring the job's dropout and aborted-round counts up to the secure gather's totals."""
        tl = self.timelines.get(job_id)
        if dropouts > tl.dropouts:
            self.dropouts.inc(dropouts - tl.dropouts)
            tl.dropouts = dropouts
        if aborted > tl.aborted_rounds:
            self.aborted.inc(aborted - tl.aborted_rounds)
            tl.aborted_rounds = aborted

    def refusal(self, job_id: str, party: str, reason: str) -> None:
        kind = refusal_kind(reason)
        self.refusals.labels(kind).inc()
        self.timelines.get(job_id).refusals.append({"time": time.time(), "party": party, "reason": reason[:500],
                                                    "kind": kind})

    def sent(self, nbytes: int, shard: int | None = None) -> None:
        self.bytes_sent.inc(nbytes)
        if shard is not None:
            self.shard_sent.labels(str(shard)).inc(nbytes)

    def received(self, job_id: str, nbytes: int) -> None:
        self.bytes_received.inc(nbytes)
        self.timelines.add_bytes(job_id, nbytes)

    def shard_part(self, job_id: str, shard: int, nbytes: int) -> None:
        self.shard_parts.labels(str(shard)).inc()
        self.shard_received.labels(str(shard)).inc(nbytes)
        self.timelines.add_bytes(job_id, nbytes)

    def job_finished(self, state: str) -> None:
        self.finished.labels(state).inc()

    def exposition(self) -> bytes:
        """The text exposition format Prometheus scrapes."""
        return generate_latest(self.registry)
