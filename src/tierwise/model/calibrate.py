"""Calibration: a measured decode step against its bandwidth bound (§12.1.5, §12.5.2).

The read bound ``t = (W + KV) / B_mem`` is a floor; a runtime adds fixed costs per
step. The ratio ``k = t_measured / t_bound`` is the distance from the floor (§12.1.5:
"实测耗时与下界的倍数"). Experiment 8-1 measured 25.83 ms per batch-1 8K BF16 step on
an RTX PRO 6000 whose bound is 9.12 ms: ``k = 2.832``, which §12.5.2 applies to both GPUs.
"""

from __future__ import annotations

import re

from tierwise.errors import ModelError, UnitError, shown
from tierwise.units import parse_quantity

__all__ = ["parse_measured_step_s", "slowdown_factor"]

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(?:tokens?|tok)\s*/\s*s\s*$")


def parse_measured_step_s(text: str) -> float:
    """A measured decode step: a time ("25.83 ms") or a rate ("38.7 tokens/s") → seconds."""
    match = _RATE.match(text) if isinstance(text, str) else None
    if match:
        rate = float(match.group(1))
        if rate <= 0:
            raise UnitError(f"{shown(text)}: a decode rate must be > 0 tokens/s")
        return 1.0 / rate
    try:
        step_s = parse_quantity(text, "time")
    except UnitError as exc:
        raise UnitError(
            f"{shown(text)} is neither a step time (25.83 ms) nor a rate (38.7 tokens/s)"
        ) from exc
    if step_s <= 0:
        raise UnitError(f"{shown(text)}: a measured step must be > 0 s")
    return step_s


def slowdown_factor(measured_step_s: float, bound_step_s: float) -> float:
    """``k = t_measured / t_bound`` (§12.5.2: 25.83 ms / 9.12 ms = 2.832).

    A measurement below the bound means the bound's inputs (bandwidth, bytes per step,
    format, context) do not describe what was measured: that is refused, not used.
    """
    if bound_step_s <= 0 or measured_step_s <= 0:
        raise ModelError(f"steps must be > 0 s, got {measured_step_s} and {bound_step_s}")
    if measured_step_s < bound_step_s * (1 - 1e-9):
        raise ModelError(
            f"measured step {measured_step_s * 1e3:.4g} ms is faster than the bandwidth bound "
            f"{bound_step_s * 1e3:.4g} ms: check the format, context and bandwidth it was "
            "measured at"
        )
    return measured_step_s / bound_step_s
