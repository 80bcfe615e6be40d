"""Domain checks shared by the model functions (arrays accepted)."""

from __future__ import annotations

import math

import numpy as np

from tierwise.errors import ModelError

ArrayLike = float | np.ndarray


def nonneg(name: str, value: ArrayLike) -> ArrayLike:
    """Refuse negative or non-finite ``value``; return it unchanged."""
    if isinstance(value, float) or type(value) is int:  # scalars (numpy's float64 too)
        if not (math.isfinite(value) and value >= 0):
            raise ModelError(f"{name} must be a finite value ≥ 0, got {_show(value)}")
        return value
    arr = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ModelError(f"{name} must be a finite value ≥ 0, got {_show(value)}")
    return value


def positive(name: str, value: ArrayLike) -> ArrayLike:
    """Refuse zero, negative or NaN ``value`` (+inf is allowed: infinitely fast)."""
    if isinstance(value, float) or type(value) is int:  # scalar fast path
        if not value > 0:  # NaN fails this too
            raise ModelError(f"{name} must be > 0, got {_show(value)}")
        return value
    arr = np.asarray(value, dtype=float)
    if np.any(np.isnan(arr)) or np.any(arr <= 0):
        raise ModelError(f"{name} must be > 0, got {_show(value)}")
    return value


def probability(name: str, value: ArrayLike, *, open_upper: bool = False) -> ArrayLike:
    """Refuse values outside [0, 1] (or [0, 1) with ``open_upper``)."""
    arr = np.asarray(value, dtype=float)
    bad = np.any(arr < 0) or (np.any(arr >= 1) if open_upper else np.any(arr > 1))
    if not np.all(np.isfinite(arr)) or bad:
        upper = "1)" if open_upper else "1]"
        raise ModelError(f"{name} must lie in [0, {upper}, got {_show(value)}")
    return value


def _show(value: ArrayLike) -> str:
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        return repr(float(arr))
    bad = arr[~np.isfinite(arr) | (arr <= 0)] if arr.size else arr
    return f"array containing {float(bad.flat[0]) if bad.size else float(arr.flat[0])!r}"
