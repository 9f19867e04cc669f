"""Many parties: the Ray runner's pool of worker actors next to the in-process runner (and Flower).

    python bench/bench_scale.py [--parties 10,100,500,1000] [--rounds 20] [--mnist-epochs 0.5] [--skip-flower]

Every cell runs in its own Python process (so peak memory is the cell's own) and prints one JSON line:

1. **Rounds per second and peak memory** for an answer of d = 10^4 float64s per party per round: the
   ``noisy-mean`` job of tests/support/net_noisy_mean.py (Laplace noise from the ChaCha20 keystream on
   a 10^4-vector, the coordinator broadcasting a 10^4-vector model every round, every answer stored
   durably in the party's in-memory ledger as the session does), 10 to 1,000 parties holding 20
   records each. The rate is measured from the first to the last round's progress call (start-up
   excluded), with the CPU seconds per round of the driver and of each worker (load-independent: on an
   idle machine a round takes about the busiest worker's CPU time plus the driver's). Memory: the peak
   of the summed proportional set size (PSS: shared pages such as Ray's object store divided among the
   processes mapping them) of the cell's process and every process it started (Ray's raylet, GCS,
   agents and workers), sampled every 0.5 s.
2. **Start-up**: whole wall time of an 8-party naive Bayes job on Adult, Ray (starting and stopping a
   local Ray instance) and in process, with the CPU seconds of every process involved (load-independent:
   on two idle cores Ray's extra CPU time divided by two is a lower bound of its extra wall time).
3. **MNIST GLVQ with 1,000 parties** (d = 7,840; E = 50 epochs at q = 0.01 is T = 5,000 rounds): the job
   runs ``--mnist-epochs`` epochs on Ray; 50 is the whole job (wall time, peak memory, test error; an
   hour or so: run it on its own, ``--cell mnist 1000 50``, and add its line with ``--add-cells``),
   fewer epochs are extrapolated from the measured seconds per round plus the measured start-up (the
   noise calibration changes with E, the work per round does not).
4. **Flower** (``flwr[simulation]`` in its own virtual environment, /tmp/flwr-venv): 500 Ray-simulated
   NumPy clients (2 Ray actors: one CPU per client) each returning the broadcast 10^4-vector plus its
   record sums tiled to 10^4 and numpy Laplace noise, FedAvg; memory sampled as above over the Flower
   process tree.

Prints a markdown table and writes bench/results/scale.md. CPU is shared: the load average is reported.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SUPPORT = ROOT / "tests" / "support"
sys.path.insert(0, str(SUPPORT))  # the noisy-mean plugin
sys.path.insert(0, str(ROOT))
PLUGINS = ("net_noisy_mean",)
D = 10_000
FLWR_PY = Path("/tmp/flwr-venv/bin/python")


class _Clock:
    """Progress callback: wall and this process's CPU seconds per round, first to last progress call."""

    def __init__(self, rounds: int, log_every: int = 0) -> None:
        self.rounds, self.marks, self.log_every = rounds, [], log_every

    def __call__(self, fraction: float) -> None:
        t = os.times()
        self.marks.append((time.perf_counter(), t.user + t.system, fraction))
        if self.log_every and len(self.marks) % self.log_every == 0:  # how far a long cell got, on stderr
            print(json.dumps({"progress": fraction, "rounds_done": round(fraction * self.rounds),
                              "seconds_per_round": self.seconds_per_round(), "load": os.getloadavg()[0]}),
                  file=sys.stderr, flush=True)

    def seconds_per_round(self) -> float:
        (t0, _, f0), (t1, _, f1) = self.marks[0], self.marks[-1]
        return (t1 - t0) / ((f1 - f0) * self.rounds) if f1 > f0 else float("nan")

    def cpu_per_round(self) -> float:
        (_, c0, f0), (_, c1, f1) = self.marks[0], self.marks[-1]
        return (c1 - c0) / ((f1 - f0) * self.rounds) if f1 > f0 else float("nan")


def _pss(pid: int) -> int:
    """Proportional set size of ``pid`` in bytes: shared pages (the object store) divided among their users."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


class _PeakMemory:
    """Samples every ``period`` s the summed PSS of ``root`` and all its descendants (Ray's processes when Ray
    was started by ``root``); ``peak`` is the largest sum seen."""

    def __init__(self, root: int, period: float = 0.5) -> None:
        self.root, self.period, self.peak = root, period, 0
        self._cpu: dict[int, float] = {}  # pid -> its latest CPU seconds seen (user + system)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> int:
        pids = [self.root, *_descendants(self.root)]
        total = sum(_pss(p) for p in pids)
        self.peak = max(self.peak, total)
        for p in pids:
            self._cpu[p] = max(self._cpu.get(p, 0.0), _cpu_seconds(p))
        return total

    @property
    def cpu_seconds(self) -> float:
        """CPU seconds of the root and every descendant seen (up to each one's last sample)."""
        return sum(self._cpu.values())

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def __enter__(self) -> "_PeakMemory":
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def _noisy_mean_job(parties: int, rounds: int):
    from dpfed.algorithms.contract import JobSpec
    from dpfed.data.schema import Schema

    schema = Schema.numeric_box(10, 0.0, 1.0)
    rng = np.random.default_rng(0)
    data = [(rng.uniform(size=(20, 10)), None) for _ in range(parties)]
    spec = JobSpec(f"scale-{parties}", "noisy-mean", {"epsilon": 1.0, "delta": 0.0, "rounds": rounds,
                                                     "width": D - 1, "broadcast": D}, schema)
    return spec, data


def cell_round(backend: str, parties: int, rounds: int) -> dict:
    from dpfed.simulation.ray_runner import peak_rss_bytes

    spec, data = _noisy_mean_job(parties, rounds)
    clock = _Clock(rounds)
    t0 = time.perf_counter()
    out = {"cell": "round", "backend": backend, "parties": parties, "rounds": rounds, "load_before": os.getloadavg()[0]}
    with _PeakMemory(os.getpid()) as mem:
        if backend == "inproc":
            from dpfed.simulation import run_inprocess

            res = run_inprocess(spec, data, seed=0, plugins=PLUGINS, progress=clock)
        else:
            import ray

            from dpfed.simulation.ray_runner import init_local_ray, run_ray_simulation

            init_local_ray()
            res = run_ray_simulation(spec, data, seed=0, plugins=PLUGINS, progress=clock)
            ray.shutdown()
            out.update(workers=res.info["workers"], worker_peak_rss=res.info["worker_peak_rss"],
                       worker_cpu_per_round=[c / res.rounds for c in res.info["worker_cpu_seconds_in_rounds"]],
                       partials_per_round=res.info["max_partials_per_round"])
    out.update(peak_pss_bytes=mem.peak, driver_peak_rss=peak_rss_bytes())
    out.update(seconds_per_round=clock.seconds_per_round(), driver_cpu_per_round=clock.cpu_per_round(),
               wall=time.perf_counter() - t0,
               load_after=os.getloadavg()[0], epsilon_spent=res.epsilon_spent)
    return out


def cell_startup(backend: str, parties: int) -> dict:
    """The whole 8-party job, run twice: timed alone (``wall``), then under the memory/CPU sampler (``cpu_seconds``,
    ``peak_pss_bytes``, ``wall_sampled``). The sampler reads every Ray process's PSS and CPU ten times a second,
    which is work on the same 2 cores as the start-up it measures (about 0.9 s more wall with Ray's ten processes,
    next to nothing for the in-process runner's one), so the time is taken without it."""
    from dpfed.algorithms import get_algorithm
    from dpfed.algorithms.contract import JobSpec
    from dpfed.data.datasets import load_dataset, split_parties

    ds = load_dataset("adult")
    algo = get_algorithm("naive-bayes")
    data = split_parties(ds.X_train, ds.y_train, parties, "iid", np.random.default_rng(0))
    spec = JobSpec("startup", "naive-bayes", {"epsilon": 1.0, "delta": algo.default_delta}, ds.schema)
    if backend == "inproc":
        from dpfed.simulation import run_inprocess as run
    else:
        from dpfed.simulation.ray_runner import run_ray_simulation as run  # starts and stops a local Ray instance
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    res = run(spec, data, seed=0)
    wall = time.perf_counter() - t0
    with _PeakMemory(os.getpid(), period=0.1) as mem:
        cpu0 = mem.cpu_seconds
        t0 = time.perf_counter()
        run(spec, data, seed=0)
        wall_sampled = time.perf_counter() - t0
    acc = algo.evaluate(res.model, ds.X_test, ds.y_test, ds.schema)["test_accuracy"]
    return {"cell": "startup", "backend": backend, "parties": parties, "wall": wall, "accuracy": acc,
            "wall_sampled": wall_sampled, "cpu_seconds": mem.cpu_seconds - cpu0, "peak_pss_bytes": mem.peak,
            "load_before": load, "load_after": os.getloadavg()[0]}


def cell_mnist(parties: int, epochs: float) -> dict:
    import ray

    from dpfed.algorithms import get_algorithm
    from dpfed.algorithms.contract import JobSpec
    from dpfed.data.datasets import load_dataset, split_parties
    from dpfed.simulation.ray_runner import init_local_ray, peak_rss_bytes, run_ray_simulation

    from dpfed.cli import build_parser

    algo = get_algorithm("glvq")
    ds = load_dataset("mnist")
    args = build_parser().parse_args(["simulate", "--algorithm", "glvq", "--dataset", "mnist", "--parties", str(parties),
                                      "--epsilon", "1.5", "--epochs", str(epochs), "--transport", "ray"])
    params = {"epsilon": args.epsilon, "delta": algo.default_delta, **algo.params_from_args(args)}
    spec = JobSpec("scale-mnist", "glvq", params, ds.schema)
    data = split_parties(ds.X_train, ds.y_train, parties, "iid", np.random.default_rng(0))
    rounds = int(round(epochs / params["sampling_rate"])) + 1  # T DP-SGD rounds and the initialisation
    clock = _Clock(rounds, log_every=100)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with _PeakMemory(os.getpid()) as mem:
        init_local_ray()
        res = run_ray_simulation(spec, data, seed=0, progress=clock)
        ray.shutdown()
    wall = time.perf_counter() - t0
    per_round = clock.seconds_per_round()
    startup = wall - per_round * res.rounds
    full_rounds = int(round(50 / params["sampling_rate"])) + 1
    acc = algo.evaluate(res.model, ds.X_test, ds.y_test, ds.schema)
    return {"cell": "mnist", "parties": parties, "epochs": epochs, "rounds": res.rounds, "wall": wall,
            "cpu_seconds": mem.cpu_seconds, "test_error": 1.0 - acc.get("test_accuracy", float("nan")),
            "seconds_per_round": per_round, "startup": startup, "full_rounds": full_rounds,
            "full_wall_extrapolated": startup + per_round * full_rounds,
            "peak_pss_bytes": mem.peak, "driver_peak_rss": peak_rss_bytes(),
            "test_accuracy": acc.get("test_accuracy", float("nan")), "epsilon_spent": res.epsilon_spent,
            "load_before": load, "load_after": os.getloadavg()[0]}


FLOWER_SCRIPT = textwrap.dedent('''
    """Flower's Ray simulation of the same numpy round: each client returns the 10^4-vector plus noise."""
    import json, os, sys, time
    import numpy as np
    import flwr
    from flwr.client import NumPyClient
    from flwr.server import ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import start_simulation

    P, R, D = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    marks = []

    class Client(NumPyClient):
        def __init__(self, cid):
            self.rng = np.random.default_rng(int(cid))
            self.x = self.rng.uniform(size=(20, 10))
        def fit(self, parameters, config):
            s = self.x.sum(axis=0)
            v = np.tile(s, -(-D // s.size))[:D] + self.rng.laplace(scale=1.0, size=D)
            return [parameters[0] + v], len(self.x), {}

    def fit_done(metrics):
        marks.append(time.perf_counter())
        return {}

    strategy = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=P, min_available_clients=P,
                      initial_parameters=flwr.common.ndarrays_to_parameters([np.zeros(D)]),
                      fit_metrics_aggregation_fn=fit_done)
    t0 = time.perf_counter()
    start_simulation(client_fn=lambda cid: Client(cid).to_client(), num_clients=P, config=ServerConfig(num_rounds=R),
                     strategy=strategy, client_resources={"num_cpus": 1},
                     ray_init_args={"include_dashboard": False, "log_to_driver": False})
    wall = time.perf_counter() - t0
    def hwm(pid):
        try:
            return int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmHWM:")][0].split()[1]) * 1024
        except Exception:
            return 0
    print(json.dumps({"flwr": flwr.__version__, "wall": wall,
                      "seconds_per_round": (marks[-1] - marks[0]) / (len(marks) - 1) if len(marks) > 1 else None,
                      "driver_peak_rss": hwm(os.getpid())}))
''')


def flower_cell(parties: int, rounds: int) -> dict:
    """Flower's simulation (its own venv); peak memory sampled over every process it starts."""
    if not FLWR_PY.exists():
        return {"cell": "flower", "error": f"{FLWR_PY} missing: python -m venv /tmp/flwr-venv && "
                                           "/tmp/flwr-venv/bin/pip install 'flwr[simulation]'"}
    script = Path("/tmp/dpfed_bench_flower.py")
    script.write_text(FLOWER_SCRIPT)
    load = os.getloadavg()[0]
    from dpfed.simulation.ray_runner import LOCAL_RAY_ENV

    # Flower's Ray workers at the priority ours run at (Ray's default is nice 15: on a loaded machine that
    # alone makes a round several times slower)
    proc = subprocess.Popen([str(FLWR_PY), str(script), str(parties), str(rounds), str(D)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **LOCAL_RAY_ENV})
    with _PeakMemory(proc.pid) as mem:  # the Flower driver and every Ray process it starts
        out, err = proc.communicate()
    if proc.returncode != 0 or not out.strip():
        return {"cell": "flower", "parties": parties, "error": (err or out).strip().splitlines()[-1:] or ["?"]}
    res = json.loads(out.strip().splitlines()[-1])
    res.update(cell="flower", parties=parties, rounds=rounds, peak_pss_bytes=mem.peak, load_before=load,
               load_after=os.getloadavg()[0])
    return res


def _run_cell(argv: list[str], timeout: float = 7200) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(SUPPORT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__, "--cell", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"cell": argv[0], "args": argv, "error": proc.stderr.strip().splitlines()[-1:] or ["?"]}
    return json.loads(lines[-1])


def _gib(b: float) -> str:
    return f"{b / 2**30:.2f} GiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parties", default="10,100,500,1000")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--mnist-parties", type=int, default=1000)
    ap.add_argument("--mnist-epochs", type=float, default=0.5, help="epochs actually run (the job is extrapolated to 50)")
    ap.add_argument("--flower-parties", type=int, default=500)
    ap.add_argument("--skip-flower", action="store_true")
    ap.add_argument("--startup-runs", type=int, default=3, help="start-up cells per backend (the table gives the "
                    "median run of each and the range)")
    ap.add_argument("--skip-mnist", action="store_true")
    ap.add_argument("--cell", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--render-from", metavar="MD", help="re-render the tables from the raw cells of an earlier scale.md")
    ap.add_argument("--remeasure-startup", metavar="MD", help="keep the other cells of an earlier scale.md, measure the "
                    "start-up cells again (--startup-runs alternating pairs) and re-render")
    ap.add_argument("--add-cells", metavar="JSONL", action="append", default=[],
                    help="add cells measured separately (JSON lines printed by --cell, e.g. a whole MNIST job run "
                         "in the background with --cell mnist 1000 50) to the tables")
    args = ap.parse_args()
    if args.cell:
        kind, rest = args.cell[0], args.cell[1:]
        if kind == "round":
            res = cell_round(rest[0], int(rest[1]), int(rest[2]))
        elif kind == "startup":
            res = cell_startup(rest[0], int(rest[1]))
        elif kind == "mnist":
            res = cell_mnist(int(rest[0]), float(rest[1]))
        else:
            raise SystemExit(f"unknown cell {kind}")
        print(json.dumps(res))
        return 0

    if args.render_from or args.remeasure_startup:  # the raw cells of an earlier run
        text = Path(args.render_from or args.remeasure_startup).read_text()
        raw = text.split("```")[1]
        results = [json.loads(line) for line in raw.splitlines() if line.startswith("{")]
        cmd = next((ln.split("command: ", 1)[1] for ln in text.splitlines() if "command: " in ln), "?")
        if args.remeasure_startup:
            results = [c for c in results if c.get("cell") != "startup"]
            for _ in range(args.startup_runs):
                for b in ("inproc", "ray"):
                    results.append(_run_cell(["startup", b, "8"]))
                    print(json.dumps(results[-1]), flush=True)
            cmd += f" (start-up cells: python bench/bench_scale.py {' '.join(sys.argv[1:])})"
    else:
        results = []
        for p in [int(x) for x in args.parties.split(",")]:
            for b in ("inproc", "ray"):
                results.append(_run_cell(["round", b, str(p), str(args.rounds)]))
                print(json.dumps(results[-1]), flush=True)
        for _ in range(args.startup_runs):  # alternating: both backends see the same stretch of load
            for b in ("inproc", "ray"):
                results.append(_run_cell(["startup", b, "8"]))
        if not args.skip_mnist:
            results.append(_run_cell(["mnist", str(args.mnist_parties), str(args.mnist_epochs)]))
        if not args.skip_flower:
            results.append(flower_cell(args.flower_parties, min(args.rounds, 5)))
        cmd = "python bench/bench_scale.py " + " ".join(sys.argv[1:])
    for path in args.add_cells:
        results += [json.loads(line) for line in Path(path).read_text().splitlines() if line.startswith("{")]
    text = render(results, cmd)
    (ROOT / "bench" / "results" / "scale.md").write_text(text)
    print(text)
    return 0


def render(results: list[dict], cmd: str) -> str:
    """The markdown note: tables from the cells, then the raw cells."""
    def cpu(c: dict) -> str:
        if c["backend"] == "inproc":
            return f"{c['driver_cpu_per_round']:.3f} s"
        return f"{max(c['worker_cpu_per_round']):.3f} s busiest worker + {c['driver_cpu_per_round']:.3f} s driver"

    rows = ["| parties | backend | wall per round (rounds/s) | CPU per round | peak memory (PSS) | partials at the driver | load avg |",
            "|---|---|---|---|---|---|---|"]
    for c in results:
        if c.get("cell") != "round":
            continue
        if "error" in c:
            rows.append(f"| {c['args'][2]} | {c['args'][1]} | error: {c['error']} | | | | |")
            continue
        rows.append(f"| {c['parties']} | {'Ray pool, ' + str(c['workers']) + ' workers' if c['backend'] == 'ray' else 'in process'} "
                    f"| {c['seconds_per_round']:.3f} s ({1 / c['seconds_per_round']:.1f}) | {cpu(c)} | "
                    f"{_gib(c['peak_pss_bytes'])} | {c.get('partials_per_round', c['parties'])} | {c['load_before']:.1f} |")
    for f in (c for c in results if c.get("cell") == "flower"):
        if "error" in f:
            rows.append(f"| {f.get('parties', '?')} | Flower Ray simulation | error: {f['error']} | | | | |")
        else:
            rows.append(f"| {f['parties']} | Flower {f['flwr']} Ray simulation ({f['rounds']} rounds, whole run "
                        f"{f['wall']:.0f} s) | {f['seconds_per_round']:.3f} s ({1 / f['seconds_per_round']:.2f}) | | "
                        f"{_gib(f['peak_pss_bytes'])} | {f['parties']} | {f['load_before']:.1f} |")
    other = ["| measurement | result | load avg |", "|---|---|---|"]
    runs: dict[str, list[dict]] = {}
    for c in results:
        if c.get("cell") == "startup" and "error" not in c:
            runs.setdefault(c["backend"], []).append(c)
    st = {b: sorted(cs, key=lambda c: c["wall"])[(len(cs) - 1) // 2] for b, cs in runs.items()}  # median run
    if len(st) == 2:
        n = min(len(cs) for cs in runs.values())
        spread = "" if n < 2 else (f"; {n} runs each, Ray {min(c['wall'] for c in runs['ray']):.2f} to "
                                   f"{max(c['wall'] for c in runs['ray']):.2f} s, in process "
                                   f"{min(c['wall'] for c in runs['inproc']):.2f} to "
                                   f"{max(c['wall'] for c in runs['inproc']):.2f} s, median shown")
        cpu = ""
        if all("cpu_seconds" in c for c in st.values()):
            sampled = ("in a second run in the same, warm process, under the sampler; " if all("wall_sampled" in c for c in st.values())
                       else "")
            cpu = (f"; CPU of every process ({sampled}median runs) {st['inproc']['cpu_seconds']:.1f} s / "
                   f"{st['ray']['cpu_seconds']:.1f} s: "
                   f"on 2 idle cores at least {(st['ray']['cpu_seconds'] - st['inproc']['cpu_seconds']) / 2:.1f} s "
                   "more wall")
        other.append(f"| whole 8-party naive Bayes job on Adult, start-up included: in process / Ray (local Ray started "
                     f"and stopped; each run timed alone in a fresh process) | {st['inproc']['wall']:.2f} s / {st['ray']['wall']:.2f} s: Ray's overhead "
                     f"{st['ray']['wall'] - st['inproc']['wall']:.1f} s{cpu}{spread} (accuracy {st['ray']['accuracy']:.3f} both: "
                     f"{st['inproc']['accuracy'] == st['ray']['accuracy']}) | {st['ray']['load_before']:.1f} |")
    elif any(c.get("cell") == "startup" for c in results):
        other.append(f"| start-up, 8 parties | {[c for c in results if c.get('cell') == 'startup']} | |")
    for m in (c for c in results if c.get("cell") == "mnist"):
        if "error" in m:
            other.append(f"| MNIST GLVQ | error: {m['error']} | |")
            continue
        whole = m["rounds"] >= m["full_rounds"]
        other.append(f"| MNIST GLVQ (d = 7,840), {m['parties']} parties on the Ray pool: "
                     f"{'**whole job run**, ' if whole else ''}{m['epochs']:g} epochs = {m['rounds']} rounds | "
                     f"{m['wall']:.0f} s wall ({m['wall'] / 60:.1f} min): start-up {m['startup']:.0f} s + "
                     f"{m['seconds_per_round']:.3f} s per round; peak memory {_gib(m['peak_pss_bytes'])} (driver RSS "
                     f"{_gib(m['driver_peak_rss'])}); test error {1 - m['test_accuracy']:.4f}; epsilon spent "
                     f"{m['epsilon_spent']:.4f} | {m['load_before']:.1f} to {m['load_after']:.1f} |")
        if not whole:
            other.append(f"| MNIST GLVQ whole job, E = 50 epochs = {m['full_rounds']} rounds, **extrapolated** from the "
                         f"line above (not run) | {m['full_wall_extrapolated'] / 60:.0f} min | |")
    return "\n".join(["# Many parties: Ray worker pool vs in process (bench/bench_scale.py)", "",
                      "Answers of d = 10^4 float64s per party per round (`noisy-mean`: Laplace noise from the "
                      "ChaCha20 keystream, every answer recorded in the party's ledger), 20 rounds:", "", *rows, "",
                      *other, "",
                      f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other jobs (1-minute load "
                      f"average before each cell in the tables); Python {platform.python_version()}; command: {cmd}",
                      "", "Raw cells:", "", "```", *[json.dumps(r) for r in results], "```", ""])


if __name__ == "__main__":
    raise SystemExit(main())
