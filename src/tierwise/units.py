"""Human quantities at the edges, SI floats inside.

A quantity is ``<number> <unit>`` and nothing more: an optional sign, digits, an
optional fraction and an optional exponent of at most four digits, then one unit
from a table (a prefix times a base unit, or a size, compute or energy per unit of
time). There is no arithmetic, no ``**`` and no parentheses, so reading a value
takes microseconds whatever the user types, and a unit is never guessed:

- MB, GB and Mbit are decimal; MiB and GiB are binary; ``b`` is a bit, ``B`` a byte;
  the network spellings Mbps, Mb/s, Gbps, kbps, bps are bit rates.
- Milli-bits and milli-bytes ("50 mbps", "mB") are never meant: refused with the
  fix ("did you mean '50 Mbit/s'?").
- ``KB``, ``Kb`` and ``Kbps`` are ambiguous (1000 or 1024?): refused with both fixes.
- Other spellings a user never means, each 10^6 to 10^9 off what was meant
  (``_NEVER_MEANT``: millihertz, megametres, milli-FLOP), are refused with the fix.
- A percentage ("14 %") is not a quantity, and a comma or space inside the number
  ("1,000 MB", "1 000 MB") is never guessed to be a thousands separator or a decimal.

Internal units per kind: seconds, bytes, bytes/s, FLOP, FLOP/s, joules, watts,
metres, hertz.
"""

from __future__ import annotations

import math
import re
import sys
from functools import cache
from typing import Any

from tierwise.errors import UnitError, shown

__all__ = ["KINDS", "LIMITS", "format_quantity", "format_seconds", "in_range", "parse_quantity"]

# kind -> (SI unit the float is expressed in, example shown in errors)
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

MAX_TEXT = 100  # characters in a quantity; longer text is refused before it is read
_MAX_EXPONENT_DIGITS = 4

_NUMBER = re.compile(
    r"\s*(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE](?P<exp>[+-]?\d+))?)\s*(?P<unit>.*?)\s*"
)

_ARITHMETIC = re.compile(r"[-+*^()\d]")

_DECIMAL = {
    "Y": 1e24, "Z": 1e21, "E": 1e18, "P": 1e15, "T": 1e12, "G": 1e9, "M": 1e6, "k": 1e3,
    "m": 1e-3, "µ": 1e-6, "μ": 1e-6, "u": 1e-6, "n": 1e-9, "p": 1e-12, "f": 1e-15,
}  # fmt: skip
_HUGE_SECOND_PREFIXES = {
    "M": "mega", "G": "giga", "T": "tera", "P": "peta", "E": "exa", "Z": "zetta", "Y": "yotta",
}  # fmt: skip
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_LONG_DECIMAL = {
    "yotta": 1e24, "exa": 1e18, "peta": 1e15, "tera": 1e12, "giga": 1e9, "mega": 1e6,
    "kilo": 1e3, "milli": 1e-3, "micro": 1e-6, "nano": 1e-9, "pico": 1e-12, "femto": 1e-15,
}  # fmt: skip
_LONG_BINARY = {"kibi": 2.0**10, "mebi": 2.0**20, "gibi": 2.0**30, "tebi": 2.0**40}

# symbol -> (SI factor, kind, information?); information takes binary prefixes, never milli
_SYMBOLS: dict[str, tuple[float, str, bool]] = {
    "s": (1.0, "time", False),
    "sec": (1.0, "time", False),
    "m": (1.0, "length", False),
    "B": (1.0, "size", True),
    "b": (0.125, "size", True),
    "bit": (0.125, "size", True),
    "bps": (0.125, "rate", True),
    "FLOP": (1.0, "flops", False),
    "FLOPs": (1.0, "flops", False),
    "J": (1.0, "energy", False),
    "Wh": (3600.0, "energy", False),
    "W": (1.0, "power", False),
    "Hz": (1.0, "frequency", False),
}
_LONG_NAMES: dict[str, tuple[float, str, bool]] = {
    "second": (1.0, "time", False),
    "meter": (1.0, "length", False),
    "metre": (1.0, "length", False),
    "byte": (1.0, "size", True),
    "bit": (0.125, "size", True),
    "flop": (1.0, "flops", False),
    "joule": (1.0, "energy", False),
    "watt": (1.0, "power", False),
    "watt_hour": (3600.0, "energy", False),
    "hertz": (1.0, "frequency", False),
}
_UNPREFIXED: dict[str, tuple[float, str]] = {
    "min": (60.0, "time"),
    "minute": (60.0, "time"),
    "minutes": (60.0, "time"),
    "h": (3600.0, "time"),
    "hr": (3600.0, "time"),
    "hour": (3600.0, "time"),
    "hours": (3600.0, "time"),
}
_PER_TIME = {"size": "rate", "flops": "flop_rate", "energy": "power"}

# Spellings that parse but are never meant, each 10^6 to 10^9 off what was: unit ->
# (what it would read as, the fix). Refused with the fix, before any lookup.
_NEVER_MEANT: dict[str, tuple[str, str]] = {
    "mHz": ("millihertz", "MHz"),
    "Mm": ("megametres", "mm"),
    "Gm": ("gigametres", "km"),
    "mFLOP": ("milli-FLOP", "MFLOP"),
    "mFLOPs": ("milli-FLOP", "MFLOP"),
    "mflop": ("milli-FLOP", "MFLOP"),
    "mflops": ("milli-FLOP", "MFLOP"),
    "mFlop": ("milli-FLOP", "MFLOP"),
    "mFlops": ("milli-FLOP", "MFLOP"),
}

# kind -> (smallest non-zero, largest) SI magnitude the schema accepts, and their text
LIMITS: dict[str, tuple[float, float, str]] = {
    "time": (1e-12, 1e9, "1 ps to 1e9 s (32 years)"),
    "size": (1e-3, 1e18, "0.001 B to 1e18 B (1 EB)"),
    "rate": (0.125, 1e15, "1 bit/s to 8 Pbit/s"),
    "flops": (1.0, 1e30, "1 FLOP to 1e30 FLOP"),
    "flop_rate": (1.0, 1e24, "1 FLOP/s to 1e24 FLOP/s"),
    "energy": (1e-15, 1e15, "1 fJ to 1e15 J"),
    "power": (1e-9, 1e9, "1 nW to 1 GW"),
    "length": (1e-9, 1e12, "1 nm to 1e9 km"),
    "frequency": (1e-6, 1e12, "1 µHz to 1 THz"),
}
_SI_SYMBOL = {
    "time": "s", "size": "B", "rate": "B/s", "flops": "FLOP", "flop_rate": "FLOP/s",
    "energy": "J", "power": "W", "length": "m", "frequency": "Hz",
}  # fmt: skip


@cache
def _units() -> dict[str, tuple[float, str]]:
    """Every accepted single-unit spelling -> (SI factor, kind)."""
    table: dict[str, tuple[float, str]] = {}
    for table_names, decimal, binary in (
        (_SYMBOLS, _DECIMAL, _BINARY),
        (_LONG_NAMES, _LONG_DECIMAL, _LONG_BINARY),
    ):
        plurals = ("", "s") if table_names is _LONG_NAMES else ("",)
        for name, (factor, kind, information) in table_names.items():
            prefixes = {"": 1.0, **decimal, **(binary if information else {})}
            for prefix, scale in prefixes.items():
                if information and 0 < scale < 1:
                    continue  # milli- or micro-bits are never meant
                if kind == "time" and table_names is _SYMBOLS and scale >= 1e6:
                    continue  # nor mega-seconds: '10 Ms' is '10 ms' mistyped, 1e9 times off
                for plural in plurals:
                    table.setdefault(prefix + name + plural, (factor * scale, kind))
    for name, (factor, kind) in _UNPREFIXED.items():
        table.setdefault(name, (factor, kind))
    for name in _NEVER_MEANT:
        table.pop(name, None)
    return table


def _lookup(unit: str) -> tuple[float, str] | None:
    """(SI factor, kind) of a unit such as 'MB', 'Mbit/s', 'Gbps' or 'TFLOP/s', else None."""
    if "/" not in unit:
        return _units().get(unit)
    top, _, bottom = unit.partition("/")
    numerator, denominator = _units().get(top.strip()), _units().get(bottom.strip())
    if numerator is None or denominator is None or denominator[1] != "time":
        return None
    kind = _PER_TIME.get(numerator[1])
    return None if kind is None else (numerator[0] / denominator[0], kind)


def _a(kind: str) -> str:
    """'a time', 'an energy'."""
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def parse_quantity(value: Any, kind: str) -> float:
    """Parse ``value`` (for example "20 Mbit/s") as a quantity of ``kind`` in SI units.

    Bare numbers are refused for every kind: a unit is never guessed.
    """
    if kind not in KINDS:
        raise UnitError(f"unknown quantity kind {kind!r}; known: {', '.join(KINDS)}")
    example = KINDS[kind][1]
    if isinstance(value, bool) or not isinstance(value, str):
        raise UnitError(f"expected {_a(kind)} with a unit such as {example}, got {shown(value)}")
    if len(value) > MAX_TEXT:
        raise UnitError(
            f"{shown(value)} is {len(value):,} characters long; {_a(kind)} such as {example} "
            f"takes at most {MAX_TEXT}"
        )
    match = _NUMBER.fullmatch(value)
    _refuse_slips(value, match, kind)
    if match is not None and not match["unit"]:
        raise UnitError(f"{shown(value)} has no unit: expected {_a(kind)} such as {example}")
    if match is None or _ARITHMETIC.search(match["unit"]):
        raise UnitError(
            f"cannot read {shown(value)} as {_a(kind)}: expected <number> <unit> such as "
            f"{example} (no arithmetic)"
        )
    if len((match["exp"] or "").lstrip("+-")) > _MAX_EXPONENT_DIGITS:
        raise UnitError(f"{shown(value)}: the exponent is too long for {_a(kind)}")
    found = _lookup(match["unit"])
    if found is None:
        raise UnitError(_unknown_unit(value, match["number"], match["unit"], kind))
    factor, found_kind = found
    if found_kind != kind:
        raise UnitError(f"{shown(value)} is not {_a(kind)} (expected something like {example})")
    return _finite(float(match["number"]) * factor, match["number"], value, kind)


_SPLIT_NUMBER = re.compile(r"\s*[+-]?\d[\d,.]*[\s,]+\d[\d,.\s]*")  # '1,000 MB', '1 000 MB'


def _refuse_slips(value: str, match: re.Match[str] | None, kind: str) -> None:
    """A percentage, or a comma or space inside the number: refused with what to write."""
    if match is not None and match["unit"] == "%":
        raise UnitError(f"{shown(value)} is a percentage, not {_a(kind)} such as {KINDS[kind][1]}")
    split = _SPLIT_NUMBER.match(value)
    unit = value[split.end() :].strip() if split is not None else ""
    if split is None or not unit or (match is not None and not _ARITHMETIC.search(match["unit"])):
        return
    digits = re.sub(r"\s", "", split.group())
    readings = [digits.replace(",", "")]
    if digits.count(",") == 1 and "." not in digits:
        readings.append(digits.replace(",", "."))
    what = "a comma" if "," in digits else "a space"
    written = " or ".join(f"'{r} {unit}'" for r in readings)
    raise UnitError(
        f"{shown(value)} has {what} inside its number: a number takes no thousands "
        f"separator and a decimal point (write {written})"
    )


def _finite(number: float, digits: str, value: str, kind: str) -> float:
    """``number`` if it is a normal float; overflow and underflow are the user's to fix."""
    if not math.isfinite(number):
        raise UnitError(f"{shown(value)} is too large for {_a(kind)}")
    mantissa = digits.lower().partition("e")[0]
    if (number == 0 and mantissa.strip("+-0.")) or 0 < abs(number) < sys.float_info.min:
        raise UnitError(f"{shown(value)} is too small for {_a(kind)} (below 1e-307 in SI units)")
    return number


# ------------------------------------------------------------- unknown units: the fix


def _canonical(unit: str) -> str:
    """'bps' -> 'bit/s', 'b' -> 'bit', 'b/s' -> 'bit/s'; bytes stay 'B'."""
    top, _, bottom = unit.partition("/")
    top = {"b": "bit", "bps": "bit", "bits": "bit", "bytes": "B", "byte": "B"}.get(top, top)
    bottom = bottom or ("s" if unit == "bps" else "")
    return f"{top}/{bottom}" if bottom else top


def _is_information(unit: str) -> bool:
    found = _lookup(unit)
    return found is not None and found[1] in ("size", "rate")


def _unknown_unit(value: str, number: str, unit: str, kind: str) -> str:
    example = KINDS[kind][1]
    base = f"unknown unit {shown(unit)} in {shown(value)}"
    top, slash, per = unit.partition("/")
    if top.strip() in _NEVER_MEANT:
        name, fix = _NEVER_MEANT[top.strip()]
        meant = f"'{number} {fix}{slash}{per}'"
        also = f" (megametres: write '{number}000 km')" if top.strip() == "Mm" else ""
        return f"{base}: {name} are never meant; did you mean {meant}?{also}"
    rest = unit[1:]
    if unit.startswith("m") and _is_information(rest):
        noun = "bytes" if rest.startswith("B") else "bits"
        return f"{base}: milli-{noun} are never meant; did you mean '{number} M{_canonical(rest)}'?"
    if unit[:1] in _HUGE_SECOND_PREFIXES and unit[1:] in ("s", "sec"):
        name = _HUGE_SECOND_PREFIXES[unit[0]]
        hint = f"; did you mean '{number} ms'?" if unit[0] == "M" else " (write s, min or h)"
        return f"{base}: {name}seconds are never meant{hint}"
    if unit.startswith("K") and not unit.startswith("Ki") and _lookup("k" + rest) is not None:
        if _is_information("k" + rest):
            one = _canonical(rest)
            binary = "Ki" + (one if rest == "bps" else rest)
            return (
                f"{base}: {unit!r} is ambiguous: write 'k{rest}' (1000 {one}) "
                f"or {binary!r} (1024 {one})"
            )
        return f"{base}: did you mean 'k{rest}'?"
    import difflib  # only on the error path: it costs start-up time

    close = difflib.get_close_matches(unit, _suggestions(kind), n=1, cutoff=0.6)
    hint = f"; did you mean '{number} {close[0]}'?" if close else ""
    return f"{base} (expected {_a(kind)} such as {example}{hint})"


@cache
def _suggestions(kind: str) -> tuple[str, ...]:
    extra = {"rate": ("Mbps", "Gbps", "kbps", "Mb/s", "Gb/s"), "size": ("MiB", "GiB", "KiB")}
    symbols = [s for _, s in _SCALES[kind]]
    if kind == "rate":
        symbols += [s for _, s in _SCALES["byte_rate"]]
    return (*symbols, *extra.get(kind, ()), *(("min", "h") if kind == "time" else ()))


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

from pydantic import AfterValidator, BeforeValidator, Field  # noqa: E402


def _parser(kind: str) -> BeforeValidator:
    def parse(value: Any) -> float:
        return parse_quantity(value, kind)

    parse.quantity_kind = kind  # type: ignore[attr-defined]  # read by the key reference's generator
    return BeforeValidator(parse)


def in_range(value: float, kind: str) -> float:
    """``value`` if it is 0 or within ``LIMITS[kind]``; absurd magnitudes are a UnitError."""
    low, high, text = LIMITS[kind]
    if value != 0 and not low <= abs(value) <= high:
        raise UnitError(f"expected 0 or {_a(kind)} from {text}, got {value:.3g} {_SI_SYMBOL[kind]}")
    return value


def _bounded(kind: str) -> AfterValidator:
    """Refuse magnitudes no physical input has (a 1e-308 Mbit/s rate, a 5e-324 B MSS)."""
    return AfterValidator(lambda value: in_range(value, kind))


Time = Annotated[float, _parser("time"), Field(ge=0), _bounded("time")]
PositiveTime = Annotated[float, _parser("time"), Field(gt=0), _bounded("time")]
Size = Annotated[float, _parser("size"), Field(ge=0), _bounded("size")]
Rate = Annotated[float, _parser("rate"), Field(gt=0), _bounded("rate")]
Flops = Annotated[float, _parser("flops"), Field(ge=0), _bounded("flops")]
FlopRate = Annotated[float, _parser("flop_rate"), Field(gt=0), _bounded("flop_rate")]
Energy = Annotated[float, _parser("energy"), Field(ge=0), _bounded("energy")]
Power = Annotated[float, _parser("power"), Field(gt=0), _bounded("power")]
