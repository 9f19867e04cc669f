"""Shared fixtures for the whole suite; the tests are arranged by layer (core, data, algorithms,
federation, daemons, simulation, cli) like the package.

No test module imports another. What several tests share lives here (fixtures) or in
``tests/support/``, a directory of plain modules that are not tests: ``net_helpers`` (PKI,
coordinator, party daemons and raw stubs for the networking tests), ``net_noisy_mean`` (a small real
DP algorithm the daemons load by name through their ``plugins`` setting) and ``sampler_checks``
(goodness-of-fit helpers). ``tests/support`` is put on ``sys.path`` here; the simulation runner and
``net_helpers.spawn_party`` pass ``sys.path`` on to the daemon processes they start, so a party
*process* imports the ``net_noisy_mean`` plugin by name too.
"""
from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _bytecode_cache() -> None:
    """Where the environment forbids writing bytecode (``PYTHONDONTWRITEBYTECODE``, as on the CI machine), keep it
    in a cache outside the source tree instead (``PYTHONPYCACHEPREFIX``: the system temporary directory, like the
    mypy cache of tests/test_lint.py), for this process and every Python process the tests start (party and
    coordinator daemons, the CLI, Ray workers): without it each of those few hundred processes compiled the whole
    package from source again, about 0.7 s of CPU each. Nothing is written into the source tree."""
    if not (sys.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE")):
        return
    prefix = os.environ.get("PYTHONPYCACHEPREFIX") or str(Path(tempfile.gettempdir()) / f"dpfed-pycache-{os.getuid()}")
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.pycache_prefix, sys.dont_write_bytecode = prefix, False


_bytecode_cache()
SUPPORT = Path(__file__).resolve().parent / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

from dpfed.data.datasets import Dataset, load_dataset  # noqa: E402
from net_helpers import Pki, ThreadParty, make_pki, party_config, start_coordinator, stop_parties  # noqa: E402


@pytest.fixture(scope="session")
def adult() -> Dataset:
    """The bundled UCI Adult data set (train and test split), loaded once."""
    return load_dataset("adult")


@pytest.fixture(scope="session")
def segmentation() -> Dataset:
    """The bundled UCI Image Segmentation data set, loaded once."""
    return load_dataset("segmentation")


@pytest.fixture(scope="session")
def secure_segmentation_runs(segmentation: Dataset, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """(algorithm, secure_rounding) -> the over-gRPC result of each job of ``secure_segmentation.JOBS``, all
    run by one federation of five party daemon processes started once (``tests/support/secure_segmentation.py``)."""
    from dpfed.simulation.grpc_local import run_grpc_simulations
    from secure_segmentation import JOBS, SEED, party_data, spec

    specs = [spec(segmentation, *key) for key in JOBS]
    results = run_grpc_simulations(specs, party_data(segmentation), seed=SEED,
                                   workdir=tmp_path_factory.mktemp("secure-segmentation") / "sim", timeout=600)
    return dict(zip(JOBS, results, strict=True))


@pytest.fixture()
def pki(tmp_path: Path) -> Pki:
    """A real certificate authority under ``tmp_path`` with certificates for the coordinator, the
    operator and party-0..2, plus an unrelated 'evil' CA whose certificates must be refused."""
    return make_pki(tmp_path)


@pytest.fixture()
def coordinator(pki: Pki, tmp_path: Path) -> Iterator:
    """A coordinator over mutual TLS on a free loopback port (state in ``tmp_path/state``), stopped after the test."""
    server = start_coordinator(pki, tmp_path / "state")
    yield server
    server.stop(0.5)


@pytest.fixture()
def thread_party(pki: Pki, tmp_path: Path) -> Iterator[Callable[..., ThreadParty]]:
    """Factory: ``thread_party(name, port, **party_config_options)`` starts a real party daemon in a
    thread (config, data and ledger under ``tmp_path/name``); every party started is stopped after the test."""
    started: list[ThreadParty] = []

    def start(name: str, port: int, **kw) -> ThreadParty:
        party = ThreadParty(party_config(pki, tmp_path, name, port, **kw))
        started.append(party)
        return party

    yield start
    stop_parties(started)
