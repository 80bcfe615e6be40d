"""calc entry: a slowdown factor from a measured decode step (§12.1.5, §12.5.2)."""

from __future__ import annotations

from tierwise.calc._registry import Param, calc
from tierwise.calc.device import _step
from tierwise.model.calibrate import parse_measured_step_s, slowdown_factor


@calc(
    "calibrate",
    "Slowdown factor k = measured decode step / bandwidth bound (25.83 ms / 9.12 ms = 2.832)",
    "§12.1.5, §12.5.2",
    Param("measured", "str", "measured step (25.83 ms) or rate (38.7 tokens/s)", "25.83 ms"),
    Param("weights_bf16", "size", "BF16 weights read per decode step", "15136819200 B"),
    Param("format", "str", "weight format the measurement used (catalog quant id)", "bf16"),
    Param("kv_per_token", "size", "KV cache bytes per token of context", "147456 B"),
    Param("context", "int", "context length the measurement used", 8192),
    Param("bandwidth", "rate", "memory bandwidth of the measured device", "1792 GB/s"),
)
def calibrate(measured, weights_bf16, format, kv_per_token, context, bandwidth):
    """k = t_measured / ((W_fmt + KV/token × ctx) / B_mem)."""
    measured_s = parse_measured_step_s(measured)
    _, _, bound_s = _step(weights_bf16, format, kv_per_token, context, bandwidth)
    return {
        "measured_step_s": measured_s,
        "bound_step_s": bound_s,
        "slowdown": slowdown_factor(measured_s, bound_s),
        "overhead_per_step_s": measured_s - bound_s,
    }
