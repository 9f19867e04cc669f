"""Records what the distributed encoding of a secure-aggregation job sees at its noise step: every
party's noiseless integer vector and its encoded input (vector + noise share mod 2^B), keyed by
(round, party), so that a test can compare decoded sums with plain sums and measure the noise."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest

from dpfed.core import distributed_noise as dn


class ShareRecorder:
    """``with ShareRecorder() as rec:`` patches :func:`dpfed.core.distributed_noise.add_noise_mod`;
    ``rec.send(send)`` wraps a SecureGather ``send`` so that tasks reach the parties one at a time and
    each recorded vector is attributed to its (round, party); ``rec.take()`` returns and clears them."""

    def __init__(self) -> None:
        self.clean: dict[tuple[int, str], np.ndarray] = {}
        self.encoded: dict[tuple[int, str], np.ndarray] = {}
        self._who: list[tuple[int, str]] = []
        self._mp = pytest.MonkeyPatch()

    def __enter__(self) -> ShareRecorder:
        real = dn.add_noise_mod

        def add_noise_mod(values, sigma, bits, rng):
            out = real(values, sigma, bits, rng)
            self.clean[self._who[-1]], self.encoded[self._who[-1]] = np.asarray(values).copy(), out.copy()
            return out

        self._mp.setattr(dn, "add_noise_mod", add_noise_mod)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mp.undo()

    def send(self, send: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> Callable[[Mapping[str, Any]], dict]:
        def recording(tasks):
            res = {}
            for n, t in tasks.items():
                self._who.append((int(t.round), n))
                res.update(send({n: t}))
            return res
        return recording

    def take(self) -> tuple[dict[tuple[int, str], np.ndarray], dict[tuple[int, str], np.ndarray]]:
        out = (dict(self.clean), dict(self.encoded))
        self.clean.clear()
        self.encoded.clear()
        return out
