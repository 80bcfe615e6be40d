"""A device as an execution resource: bandwidth, capacity, energy (§12.1.5).

Three lower bounds decide whether a device can run a model at all and how fast:

- bandwidth: decode is memory-bound, one step reads the weights and the KV cache
  once, so ``t_step ≥ (W + KV) / B_mem`` and tokens/s ≤ 1 / t_step;
- capacity: ``free = M − reserve − W_resident`` must hold the KV of every request;
- energy: tokens/s × J/token must stay under the sustained power, and a battery
  charge holds a bounded number of prompts.

Training state (§12.1.5 after §10.1.2) is the capacity bound for fine-tuning.
Every function takes SI floats or numpy arrays (broadcast together) and returns
the quantity its name says.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tierwise.model._check import ArrayLike, nonneg, positive

__all__ = [
    "ADAM_MIXED_BYTES_PER_PARAM",
    "BF16_BYTES_PER_VALUE",
    "DDR_TRANSFERS_PER_CLOCK",
    "MemoryFit",
    "affordable_tokens",
    "battery_fraction",
    "binding_constraint",
    "busy_energy_j",
    "compute_bound_s",
    "ddr_pin_rate_bytes_per_s",
    "decode_step_s",
    "decode_time_s",
    "decode_tokens_per_s",
    "free_memory_bytes",
    "generation_power_w",
    "kv_bytes",
    "lora_adapter_params",
    "lora_state_bytes",
    "max_context_tokens",
    "memory_bandwidth_bytes_per_s",
    "memory_fit",
    "model_budget_s",
    "params_fit",
    "power_limited_tokens_per_s",
    "requests_fit",
    "token_energy_j",
    "training_state_bytes",
    "weight_bytes",
]

BF16_BYTES_PER_VALUE = 2.0
DDR_TRANSFERS_PER_CLOCK = 2.0  # double data rate: LPDDR5X moves data on both clock edges
# Mixed-precision Adam (§10.1.2): BF16 weight 2 + BF16 gradient 2 + FP32 master 4
# + FP32 first moment 4 + FP32 second moment 4.
ADAM_MIXED_BYTES_PER_PARAM = 16.0


# --- bandwidth ------------------------------------------------------------------------------


def ddr_pin_rate_bytes_per_s(
    clock_hz: ArrayLike, transfers_per_clock: ArrayLike = DDR_TRANSFERS_PER_CLOCK
) -> ArrayLike:
    """Data rate of one pin: ``r_pin = f × transfers per clock / 8`` bytes/s (§12.1.5).

    LPDDR5X at 5,300 MHz moves 10.6 Gbit/s per pin (1.325 GB/s).
    """
    nonneg("clock", clock_hz)
    positive("transfers per clock", transfers_per_clock)
    return np.multiply(clock_hz, transfers_per_clock) / 8.0


def memory_bandwidth_bytes_per_s(
    channels: ArrayLike, width_bits: ArrayLike, pin_rate_bytes_per_s: ArrayLike
) -> ArrayLike:
    """Peak DRAM bandwidth ``B = channels × width × r_pin`` (§12.1.5).

    With ``r_pin`` in bit/s this is the chapter's ``4 × 16 × 10.6 / 8 = 84.8`` GB/s;
    one x16 channel gives 21.2 GB/s.
    """
    positive("channels", channels)
    positive("channel width", width_bits)
    positive("pin rate", pin_rate_bytes_per_s)
    return np.multiply(np.multiply(channels, width_bits), pin_rate_bytes_per_s)


# --- decode -------------------------------------------------------------------------------


def weight_bytes(bf16_bytes: ArrayLike, bytes_per_value: ArrayLike) -> ArrayLike:
    """Weights in another format: ``W_fmt = W_bf16 × (bytes per value) / 2`` (§12.1.5).

    q4_0 stores 32 values in 18 bytes instead of 64: 15.14 GB → 4.26 GB read per
    step; 16.38 GB → 4.61 GB resident (q8_0: 8.70 GB).
    """
    nonneg("BF16 weight bytes", bf16_bytes)
    positive("bytes per value", bytes_per_value)
    return np.multiply(bf16_bytes, bytes_per_value) / BF16_BYTES_PER_VALUE


def kv_bytes(kv_bytes_per_token: ArrayLike, context_tokens: ArrayLike) -> ArrayLike:
    """KV cache of one request: ``KV = (bytes per token) × context`` (§12.1.5).

    Qwen3-8B: 147,456 B per token × 8,192 tokens = 1.21 GB.
    """
    nonneg("KV per token", kv_bytes_per_token)
    nonneg("context", context_tokens)
    return np.multiply(kv_bytes_per_token, context_tokens)


def decode_step_s(
    weight_bytes_read: ArrayLike, kv_bytes_read: ArrayLike, memory_bandwidth_bytes_per_s: ArrayLike
) -> ArrayLike:
    """Lower bound of one decode step: ``t = (W + KV) / B_mem`` (§12.1.5).

    16.345 GB at 84.8 GB/s: 0.193 s; at 819 GB/s: 19.96 ms; at 1,792 GB/s: 9.12 ms.
    """
    nonneg("weight bytes", weight_bytes_read)
    nonneg("KV bytes", kv_bytes_read)
    positive("memory bandwidth", memory_bandwidth_bytes_per_s)
    return np.add(weight_bytes_read, kv_bytes_read) / memory_bandwidth_bytes_per_s


def decode_tokens_per_s(step_s: ArrayLike) -> ArrayLike:
    """Decode ceiling ``r = 1 / t_step`` tokens per second (§12.1.5)."""
    positive("step time", step_s)
    return np.divide(1.0, step_s)


def decode_time_s(tokens: ArrayLike, step_s: ArrayLike) -> ArrayLike:
    """Time to generate ``G`` tokens: ``T = G × t_step`` (§12.1.5: 45 × 64.4 ms = 2.9 s)."""
    nonneg("tokens", tokens)
    nonneg("step time", step_s)
    return np.multiply(tokens, step_s)


def model_budget_s(deadline_s: ArrayLike, rounds: ArrayLike, client_s: ArrayLike) -> ArrayLike:
    """Model time a round may take: ``b = D / N − t_client`` (§12.1.5).

    45 s over 20 rounds less 0.3 s of client work leaves 1.95 s. A negative
    result means the client work alone misses the deadline.
    """
    nonneg("deadline", deadline_s)
    positive("rounds", rounds)
    nonneg("client work", client_s)
    return np.divide(deadline_s, rounds) - client_s


def affordable_tokens(budget_s: ArrayLike, step_s: ArrayLike) -> ArrayLike:
    """Tokens that fit a time budget: ``G = max(b, 0) / t_step`` (not rounded; §12.1.5).

    1.95 s at q4_0 on the phone (64.4 ms per step): about 30 tokens.
    """
    positive("step time", step_s)
    return np.maximum(budget_s, 0.0) / step_s


def compute_bound_s(flops: ArrayLike, flop_rate: ArrayLike) -> ArrayLike:
    """Lower bound of matrix work: ``t = FLOP / peak`` (prefill, encoders; §12.2.2, §12.5.1)."""
    nonneg("work", flops)
    positive("peak FLOP rate", flop_rate)
    return np.divide(flops, flop_rate)


# --- capacity -----------------------------------------------------------------------------


def free_memory_bytes(
    memory_bytes: ArrayLike, reserve_bytes: ArrayLike, resident_bytes: ArrayLike
) -> ArrayLike:
    """Room left for KV: ``free = M − reserve − W_resident`` (§12.1.5, after §2.6.2).

    Negative when the weights do not fit: a 6 GB phone with 4 GB reserved and
    4.61 GB of q4_0 weights is 2.61 GB short.
    """
    nonneg("memory", memory_bytes)
    nonneg("reserve", reserve_bytes)
    nonneg("resident weights", resident_bytes)
    return np.subtract(np.subtract(memory_bytes, reserve_bytes), resident_bytes)


def requests_fit(
    free_bytes: ArrayLike, kv_bytes_per_token: ArrayLike, context_tokens: ArrayLike
) -> ArrayLike:
    """Requests whose KV fits: ``n = ⌊max(free, 0) / (KV/token × ctx)⌋`` (§12.1.5).

    3.39 GB free holds two 8K requests of 1.21 GB each.
    """
    positive("KV per token", kv_bytes_per_token)
    positive("context", context_tokens)
    per_request = np.multiply(kv_bytes_per_token, context_tokens)
    return np.floor(np.maximum(free_bytes, 0.0) / per_request)


def max_context_tokens(free_bytes: ArrayLike, kv_bytes_per_token: ArrayLike) -> ArrayLike:
    """Longest single context: ``L = ⌊max(free, 0) / (KV/token)⌋`` (§12.1.5).

    3.39 GB / 147,456 B ≈ 23,000 tokens.
    """
    positive("KV per token", kv_bytes_per_token)
    return np.floor(np.maximum(free_bytes, 0.0) / kv_bytes_per_token)


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
    """Capacity ``free = M − reserve − W_resident``, ``n = ⌊free / (KV/token × ctx)⌋`` (§12.1.5).

    A 12 GB phone with a 4 GB reserve and 4.61 GB of q4_0 weights keeps 3.39 GB:
    two 8K requests or one of about 23,000 tokens. Scalars only. When a request
    needs no KV (zero per token or zero context) the counts are reported as 0.
    """
    nonneg("KV per token", kv_bytes_per_token)
    nonneg("context", context_tokens)
    free = float(free_memory_bytes(memory_bytes, reserve_bytes, resident_bytes))
    if free < 0:
        return MemoryFit(free, False, 0, 0)
    requests = 0
    longest = 0
    if kv_bytes_per_token > 0:
        longest = int(max_context_tokens(free, kv_bytes_per_token))
        if context_tokens > 0:
            requests = int(requests_fit(free, kv_bytes_per_token, context_tokens))
    return MemoryFit(free, True, requests, longest)


# --- energy and power ---------------------------------------------------------------------


def token_energy_j(tokens: ArrayLike, energy_per_token_j: ArrayLike) -> ArrayLike:
    """Energy of generation ``E = G × e`` (§12.1.5, §12.5.1: 900 × 0.576–0.756 J = 518–680 J)."""
    nonneg("tokens", tokens)
    nonneg("energy per token", energy_per_token_j)
    return np.multiply(tokens, energy_per_token_j)


def generation_power_w(tokens_per_s: ArrayLike, energy_per_token_j: ArrayLike) -> ArrayLike:
    """Average power while generating: ``P = r × e`` (§12.1.5: 14.8 × 0.576 J ≈ 8.5 W)."""
    nonneg("tokens per second", tokens_per_s)
    nonneg("energy per token", energy_per_token_j)
    return np.multiply(tokens_per_s, energy_per_token_j)


def power_limited_tokens_per_s(power_w: ArrayLike, energy_per_token_j: ArrayLike) -> ArrayLike:
    """Ceiling a power limit sets: ``r = P / e`` (exercise 12-9: 13.8 W → 18.3–24.0 tokens/s)."""
    nonneg("power", power_w)
    positive("energy per token", energy_per_token_j)
    return np.divide(power_w, energy_per_token_j)


def binding_constraint(
    bandwidth_tokens_per_s: ArrayLike, power_tokens_per_s: ArrayLike
) -> str | np.ndarray:
    """Which ceiling binds first: ``"bandwidth"`` if ``r_bw ≤ r_power``, else ``"power"``.

    A tie counts as bandwidth. Scalars give a ``str``, arrays an array of ``str``
    (exercise 12-9(c)).
    """
    nonneg("bandwidth ceiling", bandwidth_tokens_per_s)
    nonneg("power ceiling", power_tokens_per_s)
    which = np.where(
        np.less_equal(bandwidth_tokens_per_s, power_tokens_per_s), "bandwidth", "power"
    )
    return str(which) if which.ndim == 0 else which


def battery_fraction(prompts: ArrayLike, prompts_per_charge: ArrayLike) -> ArrayLike:
    """Share of one charge: ``f = n / prompts per charge`` (§12.5.2: 20 / 590–490 = 3.4–4.1 %)."""
    nonneg("prompts", prompts)
    positive("prompts per charge", prompts_per_charge)
    return np.divide(prompts, prompts_per_charge)


def busy_energy_j(power_w: ArrayLike, busy_s: ArrayLike) -> ArrayLike:
    """Upper bound of board energy: ``E = P_rated × t_busy`` (§12.5.1).

    600 W × (0.27 s + 20 × 0.137 s) ≈ 1.81 kJ.
    """
    nonneg("power", power_w)
    nonneg("busy time", busy_s)
    return np.multiply(power_w, busy_s)


# --- training state -----------------------------------------------------------------------


def training_state_bytes(
    params: ArrayLike, bytes_per_param: ArrayLike = ADAM_MIXED_BYTES_PER_PARAM
) -> ArrayLike:
    """Resident training state ``S = N × bytes/param`` (§12.1.5, §10.1.2; 16 B for mixed Adam).

    Qwen3-8B, 8.19 × 10⁹ parameters: about 131.1 GB. Activations are extra.
    """
    nonneg("parameters", params)
    nonneg("bytes per parameter", bytes_per_param)
    return np.multiply(params, bytes_per_param)


def lora_adapter_params(
    rank: ArrayLike, in_features: ArrayLike, out_features: ArrayLike, layers: ArrayLike = 1
) -> ArrayLike:
    """Parameters of a LoRA adapter on one projection: ``layers × r × (d_in + d_out)``.

    Sum over the adapted projections (Qwen3-8B rank-16 Q and V: 7.67 × 10⁶, 14.6 MiB BF16).
    """
    nonneg("rank", rank)
    nonneg("input features", in_features)
    nonneg("output features", out_features)
    nonneg("layers", layers)
    return np.multiply(np.multiply(layers, rank), np.add(in_features, out_features))


def lora_state_bytes(
    base_params: ArrayLike,
    adapter_params: ArrayLike,
    base_bytes_per_param: ArrayLike = BF16_BYTES_PER_VALUE,
    adapter_bytes_per_param: ArrayLike = ADAM_MIXED_BYTES_PER_PARAM,
) -> ArrayLike:
    """LoRA training state ``S = N_base × 2 + N_adapter × 16`` bytes (§12.1.5).

    The base is frozen (weights only); the adapter carries weights, gradients,
    master weights and two moments: 16.38 GB + 0.12 GB ≈ 16.5 GB for Qwen3-8B.
    """
    nonneg("base parameters", base_params)
    nonneg("adapter parameters", adapter_params)
    return training_state_bytes(base_params, base_bytes_per_param) + training_state_bytes(
        adapter_params, adapter_bytes_per_param
    )


def params_fit(
    memory_bytes: ArrayLike, bytes_per_param: ArrayLike, fixed_bytes: ArrayLike = 0.0
) -> ArrayLike:
    """Largest model whose state fits: ``N = max(M − fixed, 0) / bytes/param`` (§12.1.5).

    24 GB: 1.5 × 10⁹ parameters at 16 B (full Adam), 12 × 10⁹ at 2 B (LoRA base);
    96 GB: 6 × 10⁹ and 48 × 10⁹. ``fixed_bytes`` holds what does not scale with
    the model (an adapter's state, a reserve).
    """
    nonneg("memory", memory_bytes)
    positive("bytes per parameter", bytes_per_param)
    nonneg("fixed bytes", fixed_bytes)
    return np.maximum(np.subtract(memory_bytes, fixed_bytes), 0.0) / bytes_per_param
