"""A device as an execution resource: bandwidth, capacity, energy (§12.1.5).

Decode is memory-bound: one step reads the weights and the KV cache once, so
``t_step ≥ (W + KV) / B_mem`` and tokens/s ≤ 1 / t_step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tierwise.model._check import ArrayLike, nonneg, positive

__all__ = [
    "MemoryFit",
    "compute_bound_s",
    "decode_step_s",
    "memory_fit",
    "weight_bytes",
]


def weight_bytes(bf16_bytes: ArrayLike, bytes_per_value: ArrayLike) -> ArrayLike:
    """Weights in another format: ``W_fmt = W_bf16 × (bytes per value) / 2`` (§12.1.5).

    q4_0 stores 32 values in 18 bytes instead of 64: 15.14 GB → 4.26 GB.
    """
    nonneg("BF16 weight bytes", bf16_bytes)
    positive("bytes per value", bytes_per_value)
    return np.multiply(bf16_bytes, bytes_per_value) / 2.0


def decode_step_s(
    weight_bytes_read: ArrayLike, kv_bytes_read: ArrayLike, memory_bandwidth_bytes_per_s: ArrayLike
) -> ArrayLike:
    """Lower bound of one decode step: ``t = (W + KV) / B_mem`` (§12.1.5)."""
    nonneg("weight bytes", weight_bytes_read)
    nonneg("KV bytes", kv_bytes_read)
    positive("memory bandwidth", memory_bandwidth_bytes_per_s)
    return np.add(weight_bytes_read, kv_bytes_read) / memory_bandwidth_bytes_per_s


def compute_bound_s(flops: ArrayLike, flop_rate: ArrayLike) -> ArrayLike:
    """Lower bound of matrix work: ``t = FLOP / peak`` (prefill, encoders; §12.2.2, §12.5.1)."""
    nonneg("work", flops)
    positive("peak FLOP rate", flop_rate)
    return np.divide(flops, flop_rate)


@dataclass(frozen=True)
class MemoryFit:
    """What fits in memory after the reserve and the resident weights."""

    free_bytes: float
    fits_weights: bool
    requests: int
    max_context_tokens: int


def memory_fit(
    memory_bytes: float,
    reserve_bytes: float,
    resident_bytes: float,
    kv_bytes_per_token: float,
    context_tokens: int,
) -> MemoryFit:
    """Capacity (§12.1.5): ``free = M − reserve − W_resident``; requests = ⌊free / (KV/token × ctx)⌋.

    A 12 GB phone with a 4 GB reserve and 4.61 GB of q4_0 weights keeps 3.39 GB:
    two 8K requests or one of about 23,000 tokens.
    """
    for name, value in (("memory", memory_bytes), ("reserve", reserve_bytes),
                        ("resident weights", resident_bytes), ("KV per token", kv_bytes_per_token)):
        nonneg(name, value)
    nonneg("context", context_tokens)
    free = memory_bytes - reserve_bytes - resident_bytes
    per_request = kv_bytes_per_token * context_tokens
    if free < 0:
        return MemoryFit(free, False, 0, 0)
    requests = int(free // per_request) if per_request > 0 else 0
    longest = int(free // kv_bytes_per_token) if kv_bytes_per_token > 0 else 0
    return MemoryFit(free, True, requests, longest)
