"""Human formatting of result keys by their unit suffix."""

from __future__ import annotations

from typing import Any

from tierwise.units import format_quantity

__all__ = ["format_value", "kind_of_key"]

_SUFFIXES = (
    ("_bytes_per_s", "rate"),
    ("_flop_per_s", "flop_rate"),
    ("_bytes", "size"),
    ("_flop", "flops"),
    ("_s", "time"),
    ("_j", "energy"),
    ("_w", "power"),
    ("_m", "length"),
    ("_hz", "frequency"),
)


def kind_of_key(key: str) -> str | None:
    """The unit kind a result key's suffix names (``time_s`` → ``time``), or None."""
    for suffix, kind in _SUFFIXES:
        if key.endswith(suffix):
            return kind
    return None


def format_value(key: str, value: Any, kind: str | None = None) -> str:
    """Format ``value`` for people, using the kind its key implies."""
    kind = kind or kind_of_key(key)
    if isinstance(value, dict):
        return ", ".join(f"{k} {format_value(k, v, kind)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_value(key, v, kind) for v in value) + "]"
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return str(value)
    value = float(value)
    if kind:
        return format_quantity(value, kind, digits=4)
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"
