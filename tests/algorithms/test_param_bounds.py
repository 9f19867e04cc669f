"""Every parameter table of every registered algorithm, walked: each number is bounded, and the one
validation every caller uses (:func:`dpfed.algorithms.params.validate`, as the CLI, the coordinator and
the party call it) refuses it just above its upper bound or cap and just below its lower bound, naming
the parameter, and accepts it at a closed end.

The bounds compared against are each Param's own declared ones (``lo``, ``hi``, ``cap``), so the walk
covers a parameter added tomorrow; that every number HAS an upper bound is what notices a cap removed
(a resource cap is the only upper bound of e.g. k-means' ``k`` or LVQ's ``prototypes_per_class``).
"""
from __future__ import annotations

import math

import pytest

from dpfed.algorithms.contract import TaskRejected
from dpfed.algorithms.params import Param, table_for, validate
from dpfed.algorithms.registry import algorithm_names, get_algorithm

#: Numeric parameters allowed to have no upper (or lower) bound: none today.
UNBOUNDED: set[tuple[str, str]] = set()


def _numeric() -> list[tuple[str, Param]]:
    return [(name, p) for name in algorithm_names() for p in table_for(get_algorithm(name)).params
            if p.type in (int, float) and p.choices is None]


NUMERIC = _numeric()
IDS = [f"{a}-{p.name}" for a, p in NUMERIC]


def _base(name: str) -> dict:
    return {} if name == "epsilon" else {"epsilon": 1.0}


def _refused(algorithm: str, p: Param, value: float) -> None:
    with pytest.raises(TaskRejected) as err:
        validate(get_algorithm(algorithm), {**_base(p.name), p.name: value})
    assert str(err.value).startswith(f"{algorithm} parameter {p.name!r} must be "), str(err.value)


def test_the_walk_sees_every_table():
    names = {a for a, _ in NUMERIC}
    assert names == set(algorithm_names()) and len(NUMERIC) >= 40


@pytest.mark.parametrize("algorithm, p", NUMERIC, ids=IDS)
def test_every_number_is_bounded(algorithm, p):
    if (algorithm, p.name) in UNBOUNDED:
        pytest.skip("declared unbounded")
    assert p.upper is not None, f"{algorithm} {p.name}: no upper bound (hi or a resource cap)"
    assert p.lo is not None, f"{algorithm} {p.name}: no lower bound"


@pytest.mark.parametrize("algorithm, p", NUMERIC, ids=IDS)
def test_refused_just_above_the_upper_bound_or_cap(algorithm, p):
    upper = p.upper
    if upper is None:
        pytest.skip("unbounded above (see test_every_number_is_bounded)")
    _refused(algorithm, p, upper + 1)
    if p.type is float:
        _refused(algorithm, p, math.nextafter(float(upper), math.inf))
    open_end = p.hi_open and (p.cap is None or p.hi <= p.cap)
    if open_end:
        _refused(algorithm, p, upper)
    else:  # the closed end itself is allowed by the parameter's own check
        assert p.check(upper, algorithm) == upper


@pytest.mark.parametrize("algorithm, p", NUMERIC, ids=IDS)
def test_refused_just_below_the_lower_bound(algorithm, p):
    if p.lo is None:
        pytest.skip("unbounded below (see test_every_number_is_bounded)")
    _refused(algorithm, p, p.lo - 1)
    if p.type is float:
        _refused(algorithm, p, math.nextafter(float(p.lo), -math.inf))
    if p.lo_open:
        _refused(algorithm, p, p.lo)
    else:
        assert p.check(p.lo, algorithm) == p.lo
