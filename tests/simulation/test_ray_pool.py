"""The Ray runner's pool of worker actors, on a real local Ray instance (2 CPUs, started once here).

Checked against things computed independently of the pool: the in-process runner's model (same
seeds, so the same noise: the tree of worker sums must equal the flat sum exactly), the number of
partial aggregates the driver receives (one per worker), the plan's epsilon by basic composition of
Laplace releases, and, after a real SIGKILL of a worker process, the parties' ledger files read back
from disk (one charge each, none twice) and a log of every noise draw the parties made (each round
drawn once: the restarted worker replays the stored answers).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray")

from dp_accounting import LaplaceDpEvent  # noqa: E402

from dpfed.algorithms import get_algorithm  # noqa: E402
from dpfed.algorithms.contract import JobSpec  # noqa: E402
from dpfed.core.ledger import BudgetExceededError, BudgetLedger  # noqa: E402
from dpfed.data.datasets import load_dataset, split_parties  # noqa: E402
from dpfed.data.schema import Schema  # noqa: E402
from dpfed.simulation import run_inprocess  # noqa: E402
from dpfed.simulation.inprocess import default_ledger  # noqa: E402
from dpfed.simulation.ray_runner import init_local_ray, run_ray_simulation  # noqa: E402

PLUGINS = ("ray_crash_plugin",)  # tests/support, on sys.path (conftest) and so on the Ray workers' PYTHONPATH


@pytest.fixture(scope="module")
def mushroom():
    return load_dataset("mushroom")


@pytest.fixture(scope="module")
def local_ray():
    import ray

    init_local_ray(num_cpus=2)
    yield
    ray.shutdown()


def _child_commands() -> list[str]:
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                if int(fh.read().rsplit(")", 1)[1].split()[1]) != os.getpid():
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                out.append(fh.read().replace(b"\0", b" ").decode(errors="replace"))
        except (OSError, ValueError, IndexError):
            pass
    return out


def test_the_local_instance_runs_without_the_autoscaler_log_monitor_and_api_server(local_ray):
    """init_local_ray starts Ray's head without the three Python daemons a simulation does not use
    (the autoscaler monitor, the log monitor, the dashboard's API server), and the pool still runs."""
    cmds = _child_commands()
    assert any("gcs_server" in c for c in cmds) and any("raylet" in c for c in cmds)  # the instance is ours
    assert not [c for c in cmds if "log_monitor.py" in c or "autoscaler/_private/monitor.py" in c]
    assert not [c for c in cmds if "dashboard/dashboard.py" in c]


def test_pool_of_two_workers_hosts_300_parties_and_matches_the_flat_sum(local_ray, mushroom):
    algo = get_algorithm("naive-bayes")
    data = split_parties(mushroom.X_train, mushroom.y_train, 300, "iid", np.random.default_rng(1))
    spec = JobSpec("pool-nb", "naive-bayes", {"epsilon": 1.0, "delta": algo.default_delta}, mushroom.schema)
    res = run_ray_simulation(spec, data, seed=3)
    ref = run_inprocess(spec, data, seed=3)
    assert res.info["workers"] == 2 and res.info["max_partials_per_round"] == 2
    assert res.info["worker_nice"] == [os.nice(0)] * 2  # the workers run at the driver's priority, not Ray's +15
    assert sorted(res.party_epsilon) == sorted(ref.party_epsilon) and len(res.party_epsilon) == 300
    assert res.epsilon_spent <= 1.0 + 1e-9 and res.epsilon_spent == pytest.approx(ref.epsilon_spent)
    assert sorted(res.model) == sorted(ref.model)
    for key in ref.model:
        np.testing.assert_array_equal(np.asarray(res.model[key]), np.asarray(ref.model[key]), err_msg=key)


def test_a_refusal_in_a_worker_reaches_the_driver(local_ray, tmp_path):
    schema = Schema.numeric_box(3, 0.0, 1.0)
    rng = np.random.default_rng(0)
    data = [(rng.uniform(size=(5, 3)), None) for _ in range(6)]
    spec = JobSpec("pool-refused", "crash-mean", {"epsilon": 1.0, "delta": 0.0, "rounds": 2,
                                                  "answer_log": str(tmp_path / "log"),
                                                  "crash_marker": str(tmp_path / "marker")}, schema)
    paths = [str(tmp_path / f"p{i}.sqlite") for i in range(6)]
    with default_ledger(spec, paths[4]) as ledger:  # party 4 already spent its whole budget elsewhere
        ledger.charge("earlier-job", LaplaceDpEvent(1.0))
    with pytest.raises(BudgetExceededError, match="privacy budget exceeded"):
        run_ray_simulation(spec, data, seed=0, ledger_paths=paths, plugins=PLUGINS, workers=2)
    assert not (tmp_path / "log").exists()  # nobody answered anything


def _crash_job(tmp_path: Path, parties: int = 12, rounds: int = 3):
    """Party i holds 5 + i records (its number in the answer log); party 2 (7 rows, in worker 0) crashes in round 1."""
    schema = Schema.numeric_box(3, 0.0, 1.0)
    rng = np.random.default_rng(0)
    data = [(rng.uniform(size=(5 + i, 3)), None) for i in range(parties)]
    spec = JobSpec("pool-crash", "crash-mean", {"epsilon": 1.0, "delta": 1e-6, "rounds": rounds, "width": 4,
                                                "crash_rows": 7, "crash_round": 1,
                                                "answer_log": str(tmp_path / "answers.log"),
                                                "crash_marker": str(tmp_path / "crashed")}, schema)
    return spec, data


def test_a_killed_worker_is_restarted_from_its_ledger_files_and_charges_nothing_twice(local_ray, tmp_path):
    spec, data = _crash_job(tmp_path)
    res = run_ray_simulation(spec, data, seed=0, ledger_dir=str(tmp_path / "ledgers"), plugins=PLUGINS, workers=2)
    assert (tmp_path / "crashed").exists(), "the worker process was not killed"
    assert res.rounds == 3 and res.info["restarted_workers"] == 1
    assert res.model["count"] == pytest.approx(np.mean([len(X) for X, _ in data]) * len(data), abs=200)
    # Laplace releases of epsilon / rounds each: epsilon in total by basic composition (at delta 1e-6 a
    # little less); charged twice it would be about twice that.
    for i in range(len(data)):
        with BudgetLedger(tmp_path / "ledgers" / f"party-{i}.sqlite", epsilon_limit=10.0,
                          delta_limit=1e-6) as ledger:
            assert ledger.charge_ids() == ["pool-crash:plan"], f"party-{i}"
            assert 0.5 * spec.epsilon < ledger.spent("pool-crash") <= spec.epsilon + 1e-9
    draws = {tuple(map(int, line.split())) for line in (tmp_path / "answers.log").read_text().splitlines()}
    assert draws == {(5 + i, r) for i in range(len(data)) for r in range(3)}  # every party answered every round


def test_a_restarted_worker_replays_stored_answers_instead_of_drawing_again(local_ray, tmp_path):
    """Parties 0 and 1 answered round 1 before party 2 killed their worker; the retried call finds their
    answers in their ledger files (the session's durable answer records) and sends those bytes again."""
    spec, data = _crash_job(tmp_path)
    run_ray_simulation(spec, data, seed=0, ledger_dir=str(tmp_path / "ledgers"), plugins=PLUGINS, workers=2)
    pairs = (tmp_path / "answers.log").read_text().splitlines()
    assert len(pairs) == len(set(pairs)) == len(data) * 3  # each party drew noise once per round, crash or not
