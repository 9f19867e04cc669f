"""shared_cache: one computation per key however many threads ask at once (the calibration caches)."""
from __future__ import annotations

import threading
import time

import pytest

from dpfed.core.memo import shared_cache


def _hammer(fn, args_per_thread):
    barrier = threading.Barrier(len(args_per_thread))
    out, errors = [None] * len(args_per_thread), []

    def run(i, a):
        barrier.wait()
        try:
            out[i] = fn(*a)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(args_per_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out, errors


def test_concurrent_callers_of_one_key_compute_once():
    calls = []

    @shared_cache(maxsize=4)
    def slow(x):
        calls.append(x)
        time.sleep(0.05)
        return x * 2

    out, errors = _hammer(slow, [(3,)] * 12)
    assert not errors and out == [6] * 12
    assert calls == [3]
    assert slow.cache_info().misses == 1 and slow.cache_info().hits == 11


def test_distinct_keys_do_not_wait_for_each_other():
    """Four keys are computed at the same time: each computation waits inside the function for the other
    three (a barrier), which would break (timeout) if one key's computation blocked another's."""
    inside = threading.Barrier(4, timeout=10)

    @shared_cache(maxsize=8)
    def meet(x):
        inside.wait()
        return x

    out, errors = _hammer(meet, [(i,) for i in range(4)])
    assert not errors and out == [0, 1, 2, 3]


def test_failures_are_not_cached_and_every_caller_sees_one():
    calls = []

    @shared_cache(maxsize=4)
    def bad(x):
        calls.append(x)
        time.sleep(0.02)
        raise ValueError(f"bad {x}")

    out, errors = _hammer(bad, [(1,)] * 5)
    assert len(errors) == 5 and all(isinstance(e, ValueError) for e in errors)
    with pytest.raises(ValueError):
        bad(1)
    assert len(calls) >= 2  # computed again after a failure


def test_lru_eviction_and_clear():
    calls = []

    @shared_cache(maxsize=2)
    def f(x, scale=1):
        calls.append((x, scale))
        return x * scale

    assert [f(1), f(2), f(1), f(3), f(2)] == [1, 2, 1, 3, 2]  # 2 was evicted by 3 (1 was used more recently)
    assert calls == [(1, 1), (2, 1), (3, 1), (2, 1)]
    assert f(2, scale=5) == 10 and f(2, scale=5) == 10 and calls[-1] == (2, 5) and len(calls) == 5
    f.cache_clear()
    assert f.cache_info().currsize == 0
    f(2, scale=5)
    assert len(calls) == 6
    with pytest.raises(ValueError):
        shared_cache(maxsize=0)


def test_a_job_offered_to_many_daemons_of_one_process_is_calibrated_once(monkeypatch):
    """25 party daemons as threads of one host process, offered one DP-SGD job at once, calibrate its
    noise multiplier once (was 25 PLD searches under one GIL: minutes for 100 parties on 4 hosts)."""
    from dpfed.algorithms import lvq
    from dpfed.core import accounting

    real, calls = accounting.calibrate_noise_multiplier, []

    def counting(*a, **k):
        calls.append(a)
        time.sleep(0.05)  # let every thread arrive while the first one calibrates
        return real(*a, **k)

    monkeypatch.setattr(accounting, "calibrate_noise_multiplier", counting)
    params = {"epsilon": 1.234567, "delta": 1e-5, "sampling_rate": 0.05, "epochs": 0.2}
    out, errors = _hammer(lambda: lvq.privacy_plan(params), [()] * 25)
    assert not errors and len({p.noise_multiplier for p in out}) == 1
    assert len(calls) == 1


# ------------------------------------------------------------------------------- per_object

def test_per_object_caches_by_identity_not_by_content():
    """The same object is computed once; an equal but distinct object is computed again (a cache by
    identity never answers for an object it did not see), a failure is not cached, and the oldest
    object is evicted beyond maxsize."""
    from dpfed.core.memo import per_object

    calls = []

    @per_object(maxsize=2)
    def f(obj):
        calls.append(obj)
        if obj.get("fail"):
            raise ValueError("bad object")
        return sum(obj["x"])

    a, b = {"x": [1, 2]}, {"x": [1, 2]}
    assert f(a) == 3 and f(a) == 3 and len(calls) == 1
    assert f(b) == 3 and len(calls) == 2  # equal content, another object: computed
    bad = {"fail": True}
    for _ in range(2):
        with pytest.raises(ValueError):
            f(bad)
    assert len(calls) == 4  # failures are recomputed
    c = {"x": [5]}
    assert f(c) == 5 and len(calls) == 5  # maxsize 2: a (the oldest) is evicted
    assert f(b) == 3 and len(calls) == 5
    assert f(a) == 3 and len(calls) == 6
    f.cache_clear()
    assert f(c) == 5 and len(calls) == 7


def test_per_object_result_is_the_uncached_result_for_a_job_spec():
    """The LVQ layout and secure plan, cached per spec object, equal a fresh computation for a new spec of
    the same content, and a spec with another layout gets its own."""
    from dpfed.algorithms import lvq
    from dpfed.algorithms.contract import JobSpec
    from dpfed.algorithms.lvq.layout import layout
    from dpfed.data.datasets import load_dataset

    schema = load_dataset("segmentation").schema
    base = {"epsilon": 1.0, "delta": 1e-5, "noise": "distributed", "secure_aggregation": True,
            "roster": ["a", "b", "c"], "records": 300, "epochs": 1, "sampling_rate": 0.1}
    s1 = JobSpec("j1", "gmlvq", dict(base), schema)
    s2 = JobSpec("j1", "gmlvq", dict(base), schema)
    s3 = JobSpec("j1", "gmlvq", {**base, "omega_rank": 2}, schema)
    assert layout(s1) is layout(s1)
    assert layout(s1) == layout(s2) == (7, 19, 1, 19, True)
    assert layout(s3) == (7, 19, 1, 2, True)
    assert lvq.secure_lvq_plan(s1) is lvq.secure_lvq_plan(s1)
    assert lvq.secure_lvq_plan(s1).step == lvq.secure_lvq_plan(s2).step
    assert lvq.secure_lvq_plan(s3).step.dimension == 7 * 19 + 2 * 19 != lvq.secure_lvq_plan(s1).step.dimension
