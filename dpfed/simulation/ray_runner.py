"""Scale-out on Ray: a bounded pool of worker actors, each hosting many party sessions.

For researchers who simulate hundreds or thousands of parties on one machine or a Ray cluster
(``ray start`` / KubeRay, see ``deploy/``). The pool is sized to the cluster's CPUs (one worker per
``cpus_per_worker`` CPUs, spread over the nodes), not to the number of parties. Every party hosted
by a worker keeps its own records, ledger and generator and runs the party session the party daemon
runs (:mod:`dpfed.federation.session`: charge the job's whole spend to its own ledger first, then
answer planned tasks, each round once); nothing is shared between parties.

Each round the driver puts the task into the object store once and makes one call per worker; the
worker answers for all its parties and merges their answers with the algorithm's ``combine``
(associative), so the driver receives one :class:`~dpfed.algorithms.contract.Aggregate` per worker
and merges those in the one driver loop (:func:`~dpfed.algorithms.driver.drive`): a two-level
reduction tree, O(workers) arrays at the driver instead of O(parties). Each party's records go into
the object store once (``ray.put``); a worker fetches its parties' records when it starts.

With file ledgers (``ledger_dir`` or ``ledger_paths``) a worker that dies is restarted by Ray
(``max_restarts``) and re-creates its parties from the same ledger files: re-deciding the job finds
the plan already charged (the charge is idempotent on ``JOB:plan``), so nothing is charged twice.
In-memory ledgers cannot survive their process, so then a worker failure ends the run.

Secure-aggregation jobs (``noise = "distributed"``, ``secure_aggregation``) run the SecAgg
steps of each round through :class:`~dpfed.federation.secure_gather.SecureGather` at the driver;
its ``send`` groups the per-party tasks by the worker hosting each party, one call per worker. The
public steps (adverts, unmask answers) come back party by party (a refusal or simulated dropout
is a missing answer); the masked inputs (with their envelopes) are merged in the worker by SecureGather's picklable merge
(a sum mod 2^B naming its parties, :func:`~dpfed.federation.secure_wire.merge_masked`), so the
driver receives one masked partial sum per worker, and the SecAgg server counts the union of their
parties as the survivors. One simulated CA signs every party's SecAgg keys (made at the driver,
passed to the workers).

Transport is Ray's object store inside one trusted cluster, so this is a simulation backend, not a
deployment between mutually distrusting owners (that is the gRPC / mutual-TLS path).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from dpfed.algorithms.contract import Aggregate, JobSpec, Task
from dpfed.algorithms.driver import drive
from dpfed.algorithms.secure_noise import is_secure
from dpfed.algorithms.secure_release import release_for
from dpfed.federation.secure_gather import SecureGather
from dpfed.core.errors import DpfedError
from dpfed.core.ledger import BudgetExceededError
from dpfed.federation.plugins import load_algorithm
from dpfed.federation.session import answer_hosted, decide
from dpfed.simulation.inprocess import JobRefused, default_ledger, make_parties, secure_send, simulation_credentials
from dpfed.simulation.steps import PartyData, SimulationResult, job_summary, on_round, report, start_job

__all__ = ["run_ray_simulation", "init_local_ray", "peak_rss_bytes", "WorkerLost"]

#: Answers a worker merges at once: bounds a worker's memory to CHUNK answers whatever its party count.
CHUNK = 32


class WorkerLost(DpfedError, RuntimeError):
    """A Ray worker actor died and could not be restarted (in-memory ledgers, or restarts used up)."""


def peak_rss_bytes() -> int:
    """This process's peak resident set size (``VmHWM`` from ``/proc/self/status``; 0 if unknown)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


#: Environment of a local Ray instance's processes beyond this process's own (see :func:`init_local_ray`).
LOCAL_RAY_ENV = {
    # Ray lowers its workers' priority by 15 (nice 15) by default; the pool's workers do all the parties'
    # work, so on a shared machine they would get a small fraction of the CPU a nice-0 process gets (the
    # in-process runner, anything else running). They run at this process's own priority instead.
    "RAY_worker_niceness": "0",
}


def init_local_ray(**kwargs: Any) -> None:
    """Start a local Ray instance whose workers import what this process imports.

    The workers inherit this process's ``sys.path`` as ``PYTHONPATH`` (as the gRPC simulation's party
    processes do), so algorithm plugins found by the driver are found by the workers too, and run at
    this process's priority (:data:`LOCAL_RAY_ENV`; a variable already set in the environment wins).
    """
    import ray

    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)),
           **{k: v for k, v in LOCAL_RAY_ENV.items() if k not in os.environ}}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with _lean_local_node():
            ray.init(include_dashboard=False, log_to_driver=False, logging_level="ERROR", **kwargs)
    finally:
        for k, v in old.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _lean_local_node() -> Iterator[None]:
    """While a local Ray instance starts: without the autoscaler monitor, the log monitor and the API server.

    A simulation's local instance never autoscales, and its logs do not go to the driver
    (``log_to_driver=False``), so those two Python daemons would only cost start-up and shut-down
    time (about 1.3 CPU seconds and 1 s of shut-down, measured on Ray 2.60). ``ray.init`` has no
    option for them; its node parameters (``ray._private.parameter.RayParams``) do. With
    ``include_dashboard=False`` Ray still starts its API server (``dashboard.py``) with the usage-stats
    module only and waits for it to publish its address (about 0.6 s and 0.7 CPU seconds on this
    machine, while the raylet, its two agents and the workers start on the same cores); a simulation
    uses neither the dashboard nor the job and state APIs, so the head starts without it
    (``Node.start_api_server`` skipped, only when the dashboard is off). If a Ray version lacks these
    hooks, nothing changes: the instance starts with every daemon.
    """
    try:
        from ray._private import node as node_module
        from ray._private import parameter
    except ImportError:
        yield
        return
    base = getattr(parameter, "RayParams", None)
    node_cls = getattr(node_module, "Node", None)
    if not isinstance(base, type) or not isinstance(node_cls, type):
        yield
        return

    class LeanParams(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kw: Any) -> None:
            super().__init__(*args, **kw)
            if hasattr(self, "no_monitor") and hasattr(self, "include_log_monitor"):
                self.no_monitor, self.include_log_monitor = True, False

    start_api = getattr(node_cls, "start_api_server", None)

    def lean_api_server(self: Any, *args: Any, **kw: Any) -> Any:
        if kw.get("include_dashboard") is False and hasattr(self, "_webui_url"):
            self._webui_url = None  # what Node keeps when the API server did not start
            return None
        return start_api(self, *args, **kw) if start_api is not None else None

    parameter.RayParams = LeanParams
    if start_api is not None:
        node_cls.start_api_server = lean_api_server
    try:
        yield
    finally:
        parameter.RayParams = base
        if start_api is not None:
            node_cls.start_api_server = start_api


class PartyWorker:
    """One Ray worker actor: the parties of one shard, each with its own records, ledger, generator, session.

    The constructor decides the job for every party (a restarted worker re-decides: the durable
    ledgers hold the plan already, so the charge is a no-op); :meth:`answer` answers one task for
    all parties and returns their answers merged by the algorithm's ``combine``.
    """

    def __init__(self, spec_json: str, names: Sequence[str], data_refs: Sequence[Any], seed: int | None,
                 ledger_paths: Sequence[str], plugins: Sequence[str], dropout: float = 0.0,
                 credentials: tuple[bytes, dict[str, tuple[bytes, bytes]]] | None = None) -> None:
        import ray

        self.spec = JobSpec.from_json(spec_json)
        self.parties, self.sessions = [], []
        self.refusals: list[tuple[str, str, tuple | None]] = []
        self.error: Exception | None = None
        try:
            data = ray.get(list(data_refs))
            ledgers = []
            for path in ledger_paths:
                if path != ":memory:":
                    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                ledgers.append(default_ledger(self.spec, path))
            self.parties = make_parties(self.spec, data, seed=seed, ledgers=ledgers, party_names=names,
                                        plugins=plugins, dropout=dropout, credentials=credentials)
            self.combine = load_algorithm(self.spec.algorithm, plugins).combine
        except Exception as exc:  # noqa: BLE001 - e.g. records outside the schema: the driver raises it
            self.error = exc
            return
        for party in self.parties:
            d = decide(party, self.spec)
            if d.accept:
                self.sessions.append(d.session)
            else:
                be = d.budget_error
                self.refusals.append((party.name, d.reason, None if be is None else (be.limit, be.spent,
                                                                                     be.requested, be.job)))

    def status(self) -> dict[str, Any]:
        """Refusals (name, reason, budget error fields), node id and pid: the driver checks them before round 0."""
        import ray

        ctx = ray.get_runtime_context()
        return {"refusals": self.refusals, "error": self.error, "node": ctx.get_node_id(), "pid": os.getpid(),
                "restarted": ctx.was_current_actor_reconstructed, "nice": os.nice(0)}

    def answer(self, task: Task) -> Aggregate:
        """Every hosted party answers ``task`` through its session; the answers are merged CHUNK at a time."""
        acc: Aggregate | None = None
        answers = answer_hosted(self.sessions, task)  # lazily, one party after the other
        for i in range(0, len(self.sessions), CHUNK):
            parts = [Aggregate(next(answers), (s.party.name,)) for s in self.sessions[i:i + CHUNK]]
            acc = self.combine(task, parts if acc is None else [acc, *parts])
        assert acc is not None
        return acc

    def answer_each(self, tasks: dict[str, Task]) -> dict[str, Any]:
        """Secure jobs: each named hosted party answers its own task; a refusal is a missing answer."""
        return dict(secure_send(self.sessions)(tasks))

    def answer_merged(self, tasks: dict[str, Task], merge: Callable[[Task, list[Aggregate]], Aggregate]) -> Aggregate:
        """Secure jobs, masked inputs: as :meth:`answer_each`, merged by ``merge`` (one partial sum)."""
        answers = self.answer_each(tasks)
        return merge(next(iter(tasks.values())), [Aggregate(a, (n,)) for n, a in answers.items()])

    def spent(self) -> dict[str, float]:
        return {p.name: p.ledger.spent(self.spec.job_id) for p in self.parties}

    def usage(self) -> tuple[int, float]:
        """Peak RSS (bytes) and CPU seconds (user + system) of this worker process so far."""
        t = os.times()
        return peak_rss_bytes(), t.user + t.system

    def close(self) -> None:
        for p in self.parties:
            p.ledger.close()


def _raise_refusal(spec: JobSpec, name: str, reason: str, budget: tuple | None) -> None:
    if budget is not None:
        raise BudgetExceededError(*budget)
    raise JobRefused(f"party {name!r} refused job {spec.job_id}: {reason}")


def _pool_size(n_parties: int, workers: int | None, cpus_per_worker: float) -> int:
    import ray

    if workers is None:
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        workers = int(cpus // cpus_per_worker)
    return max(1, min(int(workers), n_parties))


def _ledger_paths(names: Sequence[str], ledger_paths: Sequence[str] | None,
                  ledger_dir: str | None) -> tuple[list[str], str | None]:
    """start: one ledger path per party (``:memory:`` unless file ledgers are asked for) and the temporary
    directory made for ``ledger_dir="temp"`` (None otherwise)."""
    if ledger_paths is not None:
        paths = list(ledger_paths)
        if len(paths) != len(names):
            raise ValueError("one ledger path per party")
        return paths, None
    if ledger_dir is None:
        return [":memory:"] * len(names), None
    tmp = tempfile.mkdtemp(prefix="dpfed-ray-ledgers-") if ledger_dir == "temp" else None
    root = os.path.abspath(tmp or ledger_dir)
    return [os.path.join(root, f"{n}.sqlite") for n in names], tmp


def _start_ray(address: str | None) -> bool:
    """start: join or start Ray unless this process already did; True when it is started here."""
    import ray

    if ray.is_initialized():
        return False
    if address is None:
        init_local_ray()
    else:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    return True


class _Pool:
    """The worker actors of one run and which worker hosts each party."""

    def __init__(self, spec: JobSpec, names: Sequence[str], party_data: PartyData, paths: Sequence[str], *,
                 seed: int | None, workers: int, cpus_per_worker: float, max_restarts: int,
                 plugins: Sequence[str], dropout: float) -> None:
        """start: the parties' records into the object store once, one actor per shard of the parties
        (restarted by Ray only with file ledgers)."""
        import ray

        self.durable = all(p != ":memory:" for p in paths)
        self.size = workers
        creds = simulation_credentials(names) if is_secure(spec.params) else None
        # the pool holds the records' refs for its whole life: a restarted worker fetches them again
        self.refs = refs = [ray.put((np.asarray(X), None if y is None else np.asarray(y))) for X, y in party_data]
        shards = np.array_split(np.arange(len(names)), workers)
        restarts = max_restarts if self.durable else 0
        actor = ray.remote(PartyWorker).options(
            num_cpus=cpus_per_worker, max_restarts=restarts, max_task_retries=restarts if restarts else 0,
            scheduling_strategy="SPREAD")
        spec_json = spec.to_json()
        self.workers: list[Any] = [
            actor.remote(spec_json, [names[i] for i in s], [refs[i] for i in s], seed, [paths[i] for i in s],
                         tuple(plugins), dropout,
                         None if creds is None else (creds[0], {names[i]: creds[1][names[i]] for i in s}))
            for s in shards]
        self.host = {names[i]: w for w, s in zip(self.workers, shards, strict=True) for i in s}
        self.partials: list[int] = []

    def offer(self, spec: JobSpec) -> list[tuple[int, float]]:
        """offer: every party has decided (charged) before any answer; raise the first refusal. Returns each
        worker's usage before the rounds."""
        import ray

        for st in ray.get([w.status.remote() for w in self.workers]):
            if st["error"] is not None:
                raise st["error"]
            for name, reason, budget in st["refusals"]:
                _raise_refusal(spec, name, reason, budget)
        return ray.get([w.usage.remote() for w in self.workers])

    def gather(self, task: Task) -> list[Aggregate]:
        """drive: one call per worker, each answering for its parties merged (the task enters the object
        store once per round)."""
        import ray

        ref = ray.put(task)
        try:
            parts = ray.get([w.answer.remote(ref) for w in self.workers])
        except ray.exceptions.RayActorError as exc:
            hint = ("its restarts were used up" if self.durable else
                    "its parties' ledgers were in memory, so it cannot be restarted without losing them; "
                    "give file ledgers (ledger_dir, dpfed simulate --ledger-dir) to survive worker failures")
            raise WorkerLost(f"a Ray worker died in round {task.round} ({type(exc).__name__}); {hint}") from None
        self.partials.append(len(parts))
        return parts

    def per_worker(self, tasks: Mapping[str, Task], method: str, *args: Any) -> list[Any]:
        """drive, secure jobs: SecureGather's transport, one call per worker with its parties' tasks."""
        import ray

        calls: dict[Any, dict[str, Task]] = {}
        for name, t in tasks.items():
            calls.setdefault(self.host[name], {})[name] = t
        try:
            out = ray.get([getattr(w, method).remote(ts, *args) for w, ts in calls.items()])
        except ray.exceptions.RayActorError as exc:
            raise WorkerLost(f"a Ray worker died in a secure round ({type(exc).__name__})") from None
        self.partials.append(len(calls))
        return out

    def send(self, tasks: Mapping[str, Task]) -> dict[str, Any]:
        return {n: a for part in self.per_worker(tasks, "answer_each") for n, a in part.items()}

    def send_merged(self, tasks: Mapping[str, Task], merge: Callable) -> list[Aggregate]:
        return [agg for agg in self.per_worker(tasks, "answer_merged", merge) if agg.parties]

    def collect(self, usage0: Sequence[tuple[int, float]]) -> tuple[dict[str, float], dict[str, Any]]:
        """collect: every party's spend, and the pool's facts for ``result.info``."""
        import ray

        spent: dict[str, float] = {}
        for part in ray.get([w.spent.remote() for w in self.workers]):
            spent.update(part)
        final = ray.get([w.status.remote() for w in self.workers])
        usage = ray.get([w.usage.remote() for w in self.workers])
        info = {"workers": self.size, "nodes": sorted({st["node"] for st in final}),
                "worker_nodes": [st["node"] for st in final],
                "restarted_workers": sum(bool(st["restarted"]) for st in final),
                "worker_nice": [st["nice"] for st in final],
                "max_partials_per_round": max(self.partials, default=0),
                "worker_peak_rss": [u[0] for u in usage], "worker_cpu_seconds": [u[1] for u in usage],
                "worker_cpu_seconds_in_rounds": [u[1] - u0[1] for u, u0 in zip(usage, usage0, strict=True)],
                "durable_ledgers": self.durable}
        return spent, info


def _stop(workers: Sequence[Any]) -> None:
    """Every worker closes its ledgers at once, then each is stopped."""
    import ray

    closing = []
    for w in workers:
        try:
            closing.append(w.close.remote())
        except Exception:  # noqa: BLE001 - a dead worker has nothing left to close
            pass
    for ref in closing:
        try:
            ray.get(ref, timeout=60)
        except Exception:  # noqa: BLE001
            pass
    for w in workers:
        ray.kill(w, no_restart=True)


def run_ray_simulation(spec: JobSpec, party_data: Sequence[tuple[np.ndarray, np.ndarray | None]], *,
                       seed: int | None = None, address: str | None = None,
                       ledger_paths: Sequence[str] | None = None,
                       progress: Callable[[float], None] | None = None,
                       workers: int | None = None, cpus_per_worker: float = 1.0,
                       ledger_dir: str | None = None, max_restarts: int = 3,
                       plugins: Sequence[str] = (), party_names: Sequence[str] | None = None,
                       dropout: float = 0.0) -> SimulationResult:
    """Run ``spec`` over ``party_data`` [(X, y), ...] on a pool of Ray worker actors.

    ``address`` joins an existing cluster (else a local one is started and stopped). ``workers``
    defaults to the cluster's CPUs divided by ``cpus_per_worker``. Ledgers are in memory unless
    ``ledger_paths`` (one per party) or ``ledger_dir`` (a file per party in it; a temporary directory
    if ``ledger_dir="temp"``) is given; only with file ledgers are workers restarted after a failure
    (``max_restarts`` times, the interrupted call retried). ``result.info`` holds the pool size, the
    nodes the workers ran on, their restarts, niceness and peak RSS.
    """
    import ray

    t0 = time.perf_counter()
    if cpus_per_worker <= 0:
        raise ValueError("cpus_per_worker must be > 0")
    names, spec = start_job(spec, party_data, party_names)
    paths, tmp = _ledger_paths(names, ledger_paths, ledger_dir)
    started_here = _start_ray(address)
    pool: _Pool | None = None
    try:
        algo = load_algorithm(spec.algorithm, plugins)
        pool = _Pool(spec, names, party_data, paths, seed=seed, workers=_pool_size(len(names), workers, cpus_per_worker),
                     cpus_per_worker=cpus_per_worker, max_restarts=max_restarts, plugins=plugins, dropout=dropout)
        usage0 = pool.offer(spec)
        coord = algo.coordinator(spec, names)
        sg = SecureGather(spec, release_for(algo, spec), pool.send, send_merged=pool.send_merged) if is_secure(spec.params) \
            else None
        rounds = drive(coord, pool.gather if sg is None else sg, algo.combine, on_round=on_round(progress))
        spent, info = pool.collect(usage0)
        return report(coord.model(), job_summary(coord, None if sg is None else sg.summary()), spent, names, rounds,
                      t0, info)
    finally:
        if pool is not None:
            _stop(pool.workers)
        if started_here:
            ray.shutdown()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
