"""calc entries for a device as an execution resource (§12.1.5, exercise 12-9).

Weight formats are catalog ids (``bf16``, ``q8_0``, ``q4_0``, ``q4_k``, ``q3_k``,
``q2_k``); the bytes per value they name are passed on to the model as numbers.
"""

from __future__ import annotations

from functools import cache

from tierwise.calc._registry import Param, calc
from tierwise.catalog import load_catalog
from tierwise.model import device as m


@cache
def _bytes_per_value(fmt: str) -> float:
    """Bytes per value of a quantisation format id from the bundled catalog."""
    return load_catalog().get("quant", fmt.strip().lower(), where="--format").bytes_per_value


def _weights(bf16_bytes: float, fmt: str) -> float:
    return float(m.weight_bytes(bf16_bytes, _bytes_per_value(fmt)))


# The §12.1.5 fixed workload: Qwen3-8B, one request, 8K context, on the phone.
_WORKLOAD = (
    Param("weights_bf16", "size", "BF16 weights read per decode step", "15136819200 B"),
    Param("format", "str", "weight format (catalog quant id: bf16, q8_0, q4_0, ...)", "bf16"),
    Param("kv_per_token", "size", "KV cache bytes per token of context", "147456 B"),
    Param("context", "int", "context length in tokens", 8192),
    Param("bandwidth", "rate", "memory bandwidth B_mem", "84.8 GB/s"),
)
_ENERGY_PER_TOKEN = Param(
    "energy_per_token",
    "list:energy",
    "measured energy per token (one value or low, high)",
    "0.576 J, 0.756 J",
)


def _step(weights_bf16, format, kv_per_token, context, bandwidth):
    """Bytes read per step and the step bound of the workload parameters."""
    weights = _weights(weights_bf16, format)
    kv = float(m.kv_bytes(kv_per_token, context))
    step = float(m.decode_step_s(weights, kv, bandwidth))
    return weights, kv, step


@calc(
    "lpddr-bandwidth",
    "DRAM bandwidth channels × width × pin rate (LPDDR5X: 4 × 16 × 10.6 Gbit/s / 8)",
    "§12.1.5, exercise 12-9(a)",
    Param("channels", "int", "number of channels", 4),
    Param("width", "int", "bits per channel (x16 = 16)", 16),
    Param("pin_rate", "rate", "data rate per pin", "10.6 Gbit/s"),
)
def lpddr_bandwidth(channels, width, pin_rate):
    """B = channels × width × r_pin (r_pin in bit/s: ÷ 8 for bytes)."""
    return {
        "rate_bytes_per_s": m.memory_bandwidth_bytes_per_s(channels, width, pin_rate),
        "channel_rate_bytes_per_s": m.memory_bandwidth_bytes_per_s(1, width, pin_rate),
    }


@calc(
    "decode-bound",
    "Decode step lower bound (W + KV) / B_mem, tokens/s ceiling, time for G tokens",
    "§12.1.5, exercise 12-9(a)(b)",
    *_WORKLOAD,
    Param("tokens", "int", "tokens to generate G", 45),
)
def decode_bound(weights_bf16, format, kv_per_token, context, bandwidth, tokens):
    """t_step = (W_fmt + KV/token × ctx) / B_mem; r = 1 / t_step; T = G × t_step."""
    weights, kv, step = _step(weights_bf16, format, kv_per_token, context, bandwidth)
    weights_only = float(m.decode_step_s(weights, 0.0, bandwidth))
    return {
        "weight_bytes": weights,
        "kv_bytes": kv,
        "read_bytes": weights + kv,
        "step_s": step,
        "tokens_per_second": m.decode_tokens_per_s(step),
        "weights_only_step_s": weights_only,
        "weights_only_tokens_per_second": m.decode_tokens_per_s(weights_only),
        "time_s": m.decode_time_s(tokens, step),
    }


@calc(
    "decode-budget",
    "Tokens a round can afford under a deadline: (D/N − t_client) / t_step",
    "§12.1.5",
    *_WORKLOAD,
    Param("deadline", "time", "deadline D for the remaining rounds", "45 s"),
    Param("rounds", "int", "remaining rounds N", 20),
    Param("client", "time", "client work per round", "0.3 s"),
    Param("tokens", "int", "tokens each round needs G", 45),
)
def decode_budget(
    weights_bf16, format, kv_per_token, context, bandwidth, deadline, rounds, client, tokens
):
    """G_max = ⌊(D/N − t_client) / t_step⌋; the loop takes N × (t_client + G × t_step)."""
    _, _, step = _step(weights_bf16, format, kv_per_token, context, bandwidth)
    budget = float(m.model_budget_s(deadline, rounds, client))
    affordable = float(m.affordable_tokens(budget, step))
    model = float(m.decode_time_s(tokens, step))
    total = rounds * (client + model)
    return {
        "budget_s": budget,
        "step_s": step,
        "affordable_tokens": affordable,
        "max_tokens": int(affordable),
        "model_s": model,
        "time_s": total,
        "meets_deadline": total <= deadline,
    }


@calc(
    "memory-capacity",
    "Free memory M − reserve − W_resident, 8K requests that fit, longest context",
    "§12.1.5, exercise 12-9(b)",
    Param("memory", "size", "device memory M", "12 GB"),
    Param("reserve", "size", "system and workspace reserve", "4 GB"),
    Param("resident_bf16", "size", "resident BF16 weights (with embedding table)", "16.38 GB"),
    Param("format", "str", "weight format (catalog quant id: bf16, q8_0, q4_0, ...)", "q4_0"),
    Param("kv_per_token", "size", "KV cache bytes per token of context", "147456 B"),
    Param("context", "int", "context length of one request", 8192),
)
def memory_capacity(memory, reserve, resident_bf16, format, kv_per_token, context):
    """free = M − reserve − W_fmt; n = ⌊free / (KV/token × ctx)⌋; L = ⌊free / (KV/token)⌋."""
    resident = _weights(resident_bf16, format)
    free = float(m.free_memory_bytes(memory, reserve, resident))
    return {
        "resident_bytes": resident,
        "free_bytes": free,
        "fits_weights": free >= 0,
        "request_kv_bytes": float(m.kv_bytes(kv_per_token, context)),
        "requests": int(m.requests_fit(free, kv_per_token, context)),
        "max_context_tokens": int(m.max_context_tokens(free, kv_per_token)),
    }


@calc(
    "token-energy",
    "Energy of G tokens at a measured energy per token: E = G × e",
    "§12.1.5, §12.5.1",
    Param("tokens", "int", "tokens generated G (20 rounds × 45)", 900),
    _ENERGY_PER_TOKEN,
)
def token_energy(tokens, energy_per_token):
    """E = G × e, for each measured e."""
    return {"energy_j": [float(m.token_energy_j(tokens, e)) for e in energy_per_token]}


@calc(
    "token-power",
    "Power while generating r × e, checked against the sustained power",
    "§12.1.5",
    Param("tokens_per_second", "float", "measured generation rate r", 14.8),
    Param("energy_per_token", "list:energy", "energy per token e", "0.576 J"),
    Param("sustained_power", "power", "sustained power ceiling", "13.8 W"),
)
def token_power(tokens_per_second, energy_per_token, sustained_power):
    """P = r × e; within when P ≤ P_sustained."""
    power = [float(m.generation_power_w(tokens_per_second, e)) for e in energy_per_token]
    return {"power_w": power, "within_sustained": [p <= sustained_power for p in power]}


@calc(
    "power-bound",
    "Tokens/s ceiling from sustained power P / e, and whether bandwidth or power binds first",
    "§12.1.5, exercise 12-9(c)",
    *_WORKLOAD,
    Param("sustained_power", "power", "sustained power ceiling", "13.8 W"),
    _ENERGY_PER_TOKEN,
)
def power_bound(
    weights_bf16, format, kv_per_token, context, bandwidth, sustained_power, energy_per_token
):
    """r_power = P / e; r = min(1 / t_step, r_power); binding is the smaller ceiling."""
    _, _, step = _step(weights_bf16, format, kv_per_token, context, bandwidth)
    r_bw = float(m.decode_tokens_per_s(step))
    r_power = sorted(
        float(m.power_limited_tokens_per_s(sustained_power, e)) for e in energy_per_token
    )
    return {
        "power_tokens_per_second": r_power,
        "bandwidth_tokens_per_second": r_bw,
        "tokens_per_second": [min(r_bw, r) for r in r_power],
        "binding": [m.binding_constraint(r_bw, r) for r in r_power],
    }


@calc(
    "battery-share",
    "Share of one battery charge used by N prompts: N / prompts per charge",
    "§12.1.5, §12.5.2",
    Param("prompts", "int", "prompts (rounds) to run", 20),
    Param("prompts_per_charge", "list:float", "prompts one charge runs (low, high)", "490, 590"),
)
def battery_share(prompts, prompts_per_charge):
    """f = N / prompts per charge, as [low, high]."""
    shares = sorted(float(m.battery_fraction(prompts, c)) for c in prompts_per_charge)
    return {"charge_fraction": shares}


@calc(
    "busy-energy",
    "Board energy upper bound P_rated × (prepare + N × model time per round)",
    "§12.5.1",
    Param("power", "power", "rated board power", "600 W"),
    Param("prepare", "time", "one-time preparation (prefill)", "0.27 s"),
    Param("model", "time", "model time per round", "0.137 s"),
    Param("rounds", "int", "rounds N", 20),
)
def busy_energy(power, prepare, model, rounds):
    """E = P × (t_prepare + N × t_model)."""
    busy = prepare + rounds * model
    return {"busy_s": busy, "energy_j": m.busy_energy_j(power, busy)}


@calc(
    "training-memory",
    "Training state: full mixed-precision Adam (16 B/param) vs LoRA on a frozen BF16 base",
    "§12.1.5",
    Param("memory", "size", "accelerator memory", "24 GB"),
    Param("parameters", "float", "base model parameters", 8190735360.0),
    Param("adapter", "size", "LoRA adapter size in BF16", "14.6 MiB"),
    Param("bytes_per_param", "float", "full-training state bytes per parameter", 16.0),
)
def training_memory(memory, parameters, adapter, bytes_per_param):
    """S_full = N × 16; S_LoRA = N × 2 + N_adapter × 16 with N_adapter = adapter bytes / 2."""
    adapter_params = adapter / m.BF16_BYTES_PER_VALUE
    adapter_state = float(m.training_state_bytes(adapter_params))
    full = float(m.training_state_bytes(parameters, bytes_per_param))
    lora = float(m.lora_state_bytes(parameters, adapter_params))
    return {
        "full_state_bytes": full,
        "full_fits": full <= memory,
        "full_max_parameters": m.params_fit(memory, bytes_per_param),
        "adapter_parameters": adapter_params,
        "adapter_state_bytes": adapter_state,
        "lora_state_bytes": lora,
        "lora_fits": lora <= memory,
        "lora_max_parameters": m.params_fit(memory, m.BF16_BYTES_PER_VALUE),
    }
