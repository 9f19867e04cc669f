"""What a mechanism returns (:class:`Release`: output and spend), and the input checks and public
grid every mechanism of :mod:`dpfed.core.mechanisms` and :mod:`dpfed.core.categorical` shares.

Floating-point safety (Mironov 2012): real values are rounded to a public grid 2^-k (:func:`to_grid`)
before exact integer noise is added; epsilon is made a rational with a bounded denominator, rounded
down (:func:`eps_fraction`), so exact samplers can use it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from dp_accounting import dp_event

__all__ = ["Release", "positive", "real_array", "int_array", "to_grid", "float_down", "eps_fraction",
           "MAX_GRID_INT", "EPS_DEN"]

MAX_GRID_INT = 2.0**61       # |value| / 2^-k must stay below this (int64 headroom for noise)
EPS_DEN = 2**20              # epsilon as a rational with this denominator (rounded down)


@dataclass(frozen=True)
class Release:
    """A mechanism's output ``value`` and the ``event`` (dp-accounting) describing its spend.

    ``details`` holds the calibration actually used (grid bits, sensitivity on the grid, noise
    scale, provable zCDP rho, ...) for audit logs; it never contains data values.
    """

    value: Any
    event: dp_event.DpEvent
    details: Mapping[str, Any] = field(default_factory=dict)


# -- validation ---------------------------------------------------------------------------------
def positive(x: Any, name: str) -> float:
    """``x`` as a positive finite float (ValueError naming ``name`` otherwise)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive finite number")
    return v


def real_array(value: Any) -> np.ndarray:
    """``value`` as a finite float64 array (ValueError on NaN or infinity)."""
    try:
        x = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("value must be a real number or array of real numbers") from None
    if not np.all(np.isfinite(x)):
        raise ValueError("value contains NaN or infinity; clamp to public bounds first")
    return x


def int_array(value: Any) -> np.ndarray:
    """``value`` as an int64 array (integer-valued floats accepted; ValueError otherwise)."""
    x = np.asarray(value)
    if x.dtype.kind in "iub":
        return x.astype(np.int64)
    if x.dtype.kind == "f":
        if not np.all(np.isfinite(x)):
            raise ValueError("value contains NaN or infinity")
        if np.all(x == np.round(x)) and np.all(np.abs(x) < 2.0**62):
            return x.astype(np.int64)
    raise ValueError("discrete mechanisms need integer-valued input (counts); "
                     "use laplace()/gaussian() for real values")


def to_grid(x: np.ndarray, k: int) -> np.ndarray:
    """round(x * 2^k) as int64; x * 2^k is exact in binary floating point."""
    scaled = np.ldexp(x, k)
    if scaled.size and (scaled.max() >= MAX_GRID_INT or scaled.min() <= -MAX_GRID_INT):
        raise ValueError(f"values too large for the public grid 2^-{k}: clamp them to public bounds "
                         "or pass a smaller grid_bits")
    grid: np.ndarray = np.rint(scaled).astype(np.int64)
    return grid


def float_down(x: float) -> float:
    """The largest float below ``x`` (a conservative side of a rounded parameter)."""
    return float(np.nextafter(x, 0.0))


def eps_fraction(epsilon: float) -> Fraction:
    """epsilon as a rational with denominator <= 2^20, rounded down (never more privacy loss)."""
    f = Fraction(epsilon)
    if f.denominator > EPS_DEN:
        f = Fraction(math.floor(f * EPS_DEN), EPS_DEN)
    if f <= 0:
        raise ValueError("epsilon below 2^-20 is not supported")
    return f
