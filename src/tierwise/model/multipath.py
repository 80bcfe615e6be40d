"""Two access paths: split one payload, or replicate it (§12.4.3, exercise 12-6).

Splitting sends different bytes on each path and finishes when both parts have
arrived; replication sends the same bytes on both and finishes with the first
complete copy. Paths are independent constant-rate links; arrays broadcast.
"""

from __future__ import annotations

import numpy as np

from tierwise.errors import ModelError
from tierwise.model._check import ArrayLike, nonneg, positive, probability

__all__ = [
    "duplicate_bytes",
    "replicated_bytes",
    "replication_failure",
    "shared_exit_time_s",
    "split_fraction",
    "split_time_s",
]


def split_fraction(b1_bytes_per_s: ArrayLike, b2_bytes_per_s: ArrayLike) -> ArrayLike:
    """Share on path 1 that makes both parts finish together: ``x = B1/(B1 + B2)`` (§12.4.3).

    20 and 10 Mbit/s → 2/3 (20 MB of 30 MB on the fast path).
    """
    nonneg("rate of path 1", b1_bytes_per_s)
    nonneg("rate of path 2", b2_bytes_per_s)
    total = np.add(b1_bytes_per_s, b2_bytes_per_s)
    if np.any(total <= 0):
        raise ModelError("at least one path needs a rate > 0")
    return np.divide(b1_bytes_per_s, total)


def split_time_s(
    size_bytes: ArrayLike,
    b1_bytes_per_s: ArrayLike,
    b2_bytes_per_s: ArrayLike,
    fraction: ArrayLike | None = None,
) -> ArrayLike:
    """Both parts arrived: ``T = max(xS/B1, (1 − x)S/B2)`` (§12.4.3).

    ``fraction`` defaults to the optimum :func:`split_fraction`, where
    ``T = S/(B1 + B2)``: 30 MB over 20 + 10 Mbit/s → 8 s (12 s on the fast path alone).
    A part of zero bytes takes zero time even on a dead path.
    """
    nonneg("size", size_bytes)
    if fraction is None:  # both shares from the rates: 1 − x loses digits when x ≈ 1
        x = split_fraction(b1_bytes_per_s, b2_bytes_per_s)
        rest = split_fraction(b2_bytes_per_s, b1_bytes_per_s)
    else:
        x = probability("split fraction", fraction)
        rest = np.subtract(1.0, x)
    first = _send_s(np.multiply(x, size_bytes), b1_bytes_per_s)
    second = _send_s(np.multiply(rest, size_bytes), b2_bytes_per_s)
    return np.maximum(first, second)


def shared_exit_time_s(
    size_bytes: ArrayLike,
    b1_bytes_per_s: ArrayLike,
    b2_bytes_per_s: ArrayLike,
    exit_bytes_per_s: ArrayLike,
    fraction: ArrayLike | None = None,
) -> ArrayLike:
    """Two access paths into one exit: ``T ≥ max(T_split, S/B_exit)`` (§12.4.3, ex. 12-6(b)).

    30 MB through a 24 Mbit/s exit needs 10 s even though each access path needs
    8 s: the exit is the bottleneck, and only a faster exit lowers the bound.
    """
    positive("exit rate", exit_bytes_per_s)
    split = split_time_s(size_bytes, b1_bytes_per_s, b2_bytes_per_s, fraction)
    return np.maximum(split, np.divide(size_bytes, exit_bytes_per_s))


def replication_failure(q: ArrayLike, p1: ArrayLike, p2: ArrayLike) -> ArrayLike:
    """Both copies lost: ``p_fail = q + (1 − q)·p1·p2`` (§12.4.3, exercise 12-6(c)).

    ``q`` is the shared endpoint's failure; given a working endpoint the access
    paths fail independently with ``p1``, ``p2``. 0.02, 0.1, 0.05 → 0.0249
    (≈ 2.5 %); perfectly reliable access paths still leave ``q`` = 2 %.
    """
    for name, value in (("endpoint failure q", q), ("path 1 failure", p1), ("path 2 failure", p2)):
        probability(name, value)
    return np.add(q, np.multiply(np.subtract(1.0, q), np.multiply(p1, p2)))


def replicated_bytes(chunks: ArrayLike, chunk_bytes: ArrayLike, copies: ArrayLike = 2) -> ArrayLike:
    """Bytes sent when every chunk goes ``copies`` times: ``c·n·b`` (8 × 640 B × 2 = 10,240)."""
    nonneg("chunks", chunks)
    nonneg("chunk size", chunk_bytes)
    if np.any(np.asarray(copies, dtype=float) < 1):
        raise ModelError(f"copies must be ≥ 1, got {copies!r}")
    return np.multiply(copies, np.multiply(chunks, chunk_bytes))


def duplicate_bytes(chunks: ArrayLike, chunk_bytes: ArrayLike, copies: ArrayLike = 2) -> ArrayLike:
    """Extra bytes of replication ``(c − 1)·n·b`` (§12.4.3, ex. 12-6(d): 5,120 B for 8 × 640 B).

    The receiver drops later copies by chunk number, so none of these is played.
    """
    total = replicated_bytes(chunks, chunk_bytes, copies)
    return np.subtract(total, np.multiply(chunks, chunk_bytes))


def _send_s(size_bytes: ArrayLike, rate_bytes_per_s: ArrayLike) -> ArrayLike:
    """``S/B`` with ``0/0 = 0`` (nothing to send on a path that carries nothing)."""
    size = np.asarray(size_bytes, dtype=float)
    rate = np.asarray(rate_bytes_per_s, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(size == 0, 0.0, size / np.where(rate > 0, rate, 0.0))
    return out[()] if out.ndim == 0 else out
