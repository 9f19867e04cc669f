"""A least-recently-used cache that computes each key once even when many threads ask at the same time.

``functools.lru_cache`` is thread-safe but not single-flight: N threads that miss the same key all
compute it. For the noise calibrations (a PLD or RDP search of seconds) that is the difference between
one calibration and N under one GIL: a host process running 25 party daemons as threads, all offered the
same job at once, spent minutes calibrating the same plan 25 times. :func:`shared_cache` makes the
second and later callers of a key wait for the first one's result instead.

Failures are not cached (as with ``lru_cache``): a caller that waited on a failed computation computes
again, so each caller sees its own exception.
"""
from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

__all__ = ["shared_cache", "per_object", "CacheInfo"]

F = TypeVar("F", bound=Callable[..., Any])
Key = tuple[Any, ...]


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    maxsize: int
    currsize: int


def _key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Key:
    return (args, tuple(sorted(kwargs.items()))) if kwargs else (args,)


def shared_cache(maxsize: int = 128) -> Callable[[F], F]:
    """Decorator: an LRU cache of at most ``maxsize`` results (hashable arguments) in which concurrent
    calls with one key run the function once; ``cache_clear()`` and ``cache_info()`` as in functools."""
    if maxsize < 1:
        raise ValueError("maxsize must be >= 1")

    def decorate(fn: F) -> F:
        cache: OrderedDict[Key, Any] = OrderedDict()
        pending: dict[Key, threading.Lock] = {}  # key -> lock held by the thread computing it
        guard = threading.Lock()
        stats = [0, 0]  # hits, misses

        def lookup(key: Key) -> tuple[bool, Any]:
            if key in cache:
                cache.move_to_end(key)
                stats[0] += 1
                return True, cache[key]
            return False, None

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = _key(args, kwargs)
            with guard:
                found, value = lookup(key)
                if found:
                    return value
                lock = pending.setdefault(key, threading.Lock())
            with lock:  # the first caller computes; the others wait here, then find its result
                with guard:
                    found, value = lookup(key)
                    if found:
                        return value
                    stats[1] += 1
                try:
                    value = fn(*args, **kwargs)
                except BaseException:
                    with guard:
                        if pending.get(key) is lock:
                            del pending[key]
                    raise
                with guard:  # stored before the key stops being pending: no window for a second computation
                    cache[key] = value
                    cache.move_to_end(key)
                    while len(cache) > maxsize:
                        cache.popitem(last=False)
                    if pending.get(key) is lock:
                        del pending[key]
                return value

        def cache_clear() -> None:
            with guard:
                cache.clear()
                stats[0] = stats[1] = 0

        def cache_info() -> CacheInfo:
            with guard:
                return CacheInfo(stats[0], stats[1], maxsize, len(cache))

        wrapper.cache_clear = cache_clear  # type: ignore[attr-defined]
        wrapper.cache_info = cache_info  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


def per_object(maxsize: int = 64) -> Callable[[F], F]:
    """Decorator for a function of one immutable object (a frozen ``JobSpec``): its result is cached by the
    object's identity, for the ``maxsize`` most recent objects (kept alive by the cache, so an id is never
    reused while cached). For values derived from a job's public spec on every task (layout, plan): the
    spec object a session holds is the same for every round, and hashing or serialising it per call
    (a 100-name roster, a 784-feature schema) cost more than the round's arithmetic. Exceptions are not
    cached; a new object with equal content is a miss (computed again, same result)."""
    if maxsize < 1:
        raise ValueError("maxsize must be >= 1")

    def decorate(fn: F) -> F:
        cache: OrderedDict[int, tuple[Any, Any]] = OrderedDict()
        guard = threading.Lock()

        @functools.wraps(fn)
        def wrapper(obj: Any) -> Any:
            with guard:
                hit = cache.get(id(obj))
                if hit is not None and hit[0] is obj:
                    return hit[1]
            value = fn(obj)
            with guard:
                cache[id(obj)] = (obj, value)
                cache.move_to_end(id(obj))
                while len(cache) > maxsize:
                    cache.popitem(last=False)
            return value

        def cache_clear() -> None:
            with guard:
                cache.clear()

        wrapper.cache_clear = cache_clear  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
