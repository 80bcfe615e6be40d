"""Human quantities at the edges, SI floats inside.

Parsing uses a pint registry built from ``units.txt`` in which information
(bytes) and compute (FLOP) are base dimensions of their own, so "30 MB" can never
be mistaken for a rate and "20 Mb/s" (megabarn?) is rejected instead of guessed.
MB, GB and Mbit are decimal; MiB and GiB are binary.

Internal units per kind: seconds, bytes, bytes/s, FLOP, FLOP/s, joules, watts,
metres, hertz.
"""

from __future__ import annotations

import math
from functools import cache
from importlib import resources
from typing import Any

import pint

from tierwise.errors import UnitError

__all__ = ["KINDS", "format_quantity", "format_seconds", "parse_quantity", "registry"]

# kind -> (pint unit the SI float is expressed in, example shown in errors)
KINDS: dict[str, tuple[str, str]] = {
    "time": ("second", "'100 ms'"),
    "size": ("byte", "'30 MB'"),
    "rate": ("byte / second", "'20 Mbit/s'"),
    "flops": ("flop", "'1.31 TFLOP'"),
    "flop_rate": ("flop / second", "'989.4 TFLOP/s'"),
    "energy": ("joule", "'0.576 J'"),
    "power": ("watt", "'600 W'"),
    "length": ("meter", "'10000 km'"),
    "frequency": ("hertz", "'24 kHz'"),
}


@cache
def registry() -> pint.UnitRegistry:
    """The shared unit registry (built once, about 10 ms)."""
    text = resources.files("tierwise").joinpath("units.txt").read_text(encoding="utf-8")
    reg = pint.UnitRegistry(None, autoconvert_offset_to_baseunit=False)
    reg.load_definitions(text.splitlines())
    return reg


@cache
def _dimensionality(kind: str) -> Any:
    return registry().Unit(KINDS[kind][0]).dimensionality


def parse_quantity(value: Any, kind: str) -> float:
    """Parse ``value`` (for example "20 Mbit/s") as a quantity of ``kind`` in SI units.

    Bare numbers are refused for every kind: a unit is never guessed.
    """
    if kind not in KINDS:
        raise UnitError(f"unknown quantity kind {kind!r}; known: {', '.join(KINDS)}")
    unit, example = KINDS[kind]
    if isinstance(value, bool) or not isinstance(value, str):
        raise UnitError(f"expected a {kind} with a unit such as {example}, got {value!r}")
    text = value.strip()
    try:
        q = registry().Quantity(text)
    except (pint.errors.UndefinedUnitError, pint.errors.DefinitionSyntaxError) as exc:
        raise UnitError(f"unknown unit in {value!r} (expected a {kind} such as {example})") from exc
    except Exception as exc:  # pint's tokenizer raises assorted errors on junk
        raise UnitError(f"cannot read {value!r} as a {kind} such as {example}") from exc
    if not isinstance(q, pint.Quantity) or q.dimensionless:
        raise UnitError(f"{value!r} has no unit (expected a {kind} such as {example})")
    if q.dimensionality != _dimensionality(kind):
        raise UnitError(f"{value!r} is not a {kind} (expected something like {example})")
    number = float(q.to(unit).magnitude)
    if not math.isfinite(number):
        raise UnitError(f"{value!r} is not a finite {kind}")
    return number


def format_seconds(x: float | None) -> str:
    """Seconds as the reference prints them: 64.0 s, 11.0 s, 2.90 s, 137 ms."""
    if x is None or x != x:
        return "—"
    if abs(x) >= 100:
        return f"{x:.0f} s"
    if abs(x) >= 10:
        return f"{x:.1f} s"
    if abs(x) >= 1:
        return f"{x:.2f} s"
    return format_quantity(x, "time", digits=3)


_SCALES: dict[str, list[tuple[float, str]]] = {
    "time": [(1.0, "s"), (1e-3, "ms"), (1e-6, "µs")],
    "size": [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")],
    "rate": [
        (1.25e11, "Tbit/s"),
        (1.25e8, "Gbit/s"),
        (1.25e5, "Mbit/s"),
        (125.0, "kbit/s"),
        (0.125, "bit/s"),
    ],
    "byte_rate": [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"), (1.0, "B/s")],
    "flops": [(1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1.0, "FLOP")],
    "flop_rate": [(1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1.0, "FLOP/s")],
    "energy": [(1e6, "MJ"), (1e3, "kJ"), (1.0, "J"), (1e-3, "mJ")],
    "power": [(1e3, "kW"), (1.0, "W"), (1e-3, "mW")],
    "length": [(1e3, "km"), (1.0, "m")],
    "frequency": [(1e9, "GHz"), (1e6, "MHz"), (1e3, "kHz"), (1.0, "Hz")],
}


def format_quantity(value: float, kind: str, digits: int = 3) -> str:
    """Format an SI float of ``kind`` for people: 2.5e6 bytes/s as a rate → '20 Mbit/s'."""
    if value is None or not math.isfinite(value):
        return "∞" if value == math.inf else "—"
    scales = _SCALES[kind]
    magnitude = abs(value)
    if magnitude == 0:
        base = next((f, s) for f, s in scales if f == 1.0) if kind != "rate" else scales[2]
        return f"0 {base[1]}"
    factor, symbol = next(((f, s) for f, s in scales if magnitude >= f), scales[-1])
    if kind == "time" and magnitude >= 1.0:
        factor, symbol = 1.0, "s"
    scaled = value / factor
    return f"{_significant(scaled, digits)} {symbol}"


def _significant(x: float, digits: int) -> str:
    if x == 0:
        return "0"
    text = f"{x:.{digits}g}" if abs(x) < 10**digits else f"{x:.0f}"
    if "e" in text:
        text = f"{x:.{digits}f}".rstrip("0").rstrip(".")
    return text


# Pydantic field types: a string with a unit in, an SI float out.
from typing import Annotated  # noqa: E402

from pydantic import BeforeValidator, Field  # noqa: E402


def _parser(kind: str) -> BeforeValidator:
    return BeforeValidator(lambda v: parse_quantity(v, kind))


Time = Annotated[float, _parser("time"), Field(ge=0)]
PositiveTime = Annotated[float, _parser("time"), Field(gt=0)]
Size = Annotated[float, _parser("size"), Field(ge=0)]
Rate = Annotated[float, _parser("rate"), Field(gt=0)]
Flops = Annotated[float, _parser("flops"), Field(ge=0)]
FlopRate = Annotated[float, _parser("flop_rate"), Field(gt=0)]
Energy = Annotated[float, _parser("energy"), Field(ge=0)]
Power = Annotated[float, _parser("power"), Field(gt=0)]
