"""The quantity grammar: ``<number> <unit>``, a unit table, and the fix for every refusal."""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierwise.errors import UnitError, shown
from tierwise.units import KINDS, MAX_TEXT, format_quantity, parse_quantity

ACCEPTED = [
    ("20 Mbit/s", "rate", 2.5e6),
    ("6.4 Mbit/s", "rate", 8e5),
    ("84.8 GB/s", "rate", 84.8e9),
    ("1.31 TFLOP", "flops", 1.31e12),
    ("989.4 TFLOP/s", "flop_rate", 989.4e12),
    ("0.576 J", "energy", 0.576),
    ("0.16 mWh", "energy", 0.576),
    ("1 Wh", "energy", 3600.0),
    ("600 W", "power", 600.0),
    ("64 MiB", "size", 64 * 2**20),
    ("144 KiB", "size", 144 * 1024.0),
    ("30 MB", "size", 30e6),
    ("100 ms", "time", 0.1),
    ("30ms", "time", 0.03),
    ("3 µs", "time", 3e-6),
    ("2 min", "time", 120.0),
    ("1 h", "time", 3600.0),
    ("24 kHz", "frequency", 24e3),
    ("10000 km", "length", 1e7),
    ("1.5e6 B", "size", 1.5e6),
    ("20 Mbps", "rate", 2.5e6),
    ("20 Mb/s", "rate", 2.5e6),
    ("1 Gbps", "rate", 1.25e8),
    ("1 Gb/s", "rate", 1.25e8),
    ("64 kbps", "rate", 8e3),
    ("64 kb/s", "rate", 8e3),
    ("8 bps", "rate", 1.0),
    ("8 b/s", "rate", 1.0),
    ("5 MB/s", "rate", 5e6),
    ("1 kB/s", "rate", 1e3),
]


@pytest.mark.parametrize(("text", "kind", "si"), ACCEPTED)
def test_spellings_in_use_parse(text: str, kind: str, si: float) -> None:
    """Every spelling the examples, catalog and README use still parses to the same SI value."""
    assert parse_quantity(text, kind) == pytest.approx(si, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "kind", "needles"),
    [
        ("50 mbps", "rate", ["milli-bits", "did you mean '50 Mbit/s'?"]),
        ("50 mb/s", "rate", ["milli-bits", "'50 Mbit/s'"]),
        ("3 mB", "size", ["milli-bytes", "did you mean '3 MB'?"]),
        ("3 mbit", "size", ["milli-bits", "'3 Mbit'"]),
        ("3 KB", "size", ["'KB' is ambiguous: write 'kB' (1000 B) or 'KiB' (1024 B)"]),
        ("3 Kb", "size", ["'Kb' is ambiguous", "'kb'", "'Kib'"]),
        ("3 Kbps", "rate", ["'Kbps' is ambiguous", "'kbps' (1000 bit/s)", "'Kibit/s'"]),
        ("3 KW", "power", ["did you mean 'kW'?"]),
        ("10 Ms", "time", ["megaseconds are never meant", "did you mean '10 ms'?"]),
        ("10 Msec", "time", ["megaseconds are never meant", "'10 ms'"]),
        ("3 Gs", "time", ["gigaseconds are never meant"]),
        ("1 Mbit/Ms", "rate", ["unknown unit", "'1 Mbit/s'"]),
        ("3 TFLOPS", "flop_rate", ["unknown unit", "'3 TFLOP/s'"]),
        ("20 Mbit/q", "rate", ["unknown unit", "Mbit/s"]),
        ("30 MB", "time", ["not a time", "'100 ms'"]),
        ("20", "rate", ["has no unit", "'20 Mbit/s'"]),
        ("9**9**9 MB", "size", ["cannot read", "as a size", "no arithmetic"]),
        ("10**400 ms", "time", ["cannot read", "no arithmetic"]),
        ("(1 + 2) s", "time", ["cannot read"]),
        ("1e400 s", "time", ["too large"]),
        ("1e308 GB", "size", ["too large"]),
        ("1e-400 s", "time", ["too small"]),
        ("5e-324 B", "size", ["too small"]),
        ("1e99999 s", "time", ["exponent"]),
    ],
)
def test_refusals_name_the_fix(text: str, kind: str, needles: list[str]) -> None:
    """A refused quantity says what is wrong and, where one exists, the spelling meant."""
    with pytest.raises(UnitError) as err:
        parse_quantity(text, kind)
    for needle in needles:
        assert needle in str(err.value)


def test_huge_digit_string_is_refused_at_once_and_not_echoed() -> None:
    """30,000 digits answer in well under a millisecond-scale budget with a short message."""
    text = "9" * 30_000 + " MB"
    start = time.perf_counter()
    with pytest.raises(UnitError) as err:
        parse_quantity(text, "size")
    assert time.perf_counter() - start < 0.05
    assert len(str(err.value)) < 200 and str(MAX_TEXT) in str(err.value)


def test_huge_integer_is_shown_by_its_size() -> None:
    """An integer beyond Python's 4,300-digit str() limit is described, not printed."""
    with pytest.raises(UnitError) as err:
        parse_quantity(10**5000, "rate")
    assert "about 5,001 digits" in str(err.value)
    assert shown([10**5000]) == "<a value too large to show>"


def test_units_module_does_not_import_pint() -> None:
    """Reading a quantity needs no expression evaluator (start-up budget)."""
    code = "import sys, tierwise.units; print('pint' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@given(st.floats(min_value=1.0, max_value=1e12), st.sampled_from(sorted(KINDS)))
def test_formatted_quantities_parse_back(value: float, kind: str) -> None:
    """What format_quantity prints, parse_quantity reads back (to the digits printed)."""
    text = format_quantity(value, kind, digits=6)
    assert math.isclose(parse_quantity(text, kind), value, rel_tol=1e-5, abs_tol=1e-9)


@pytest.mark.parametrize(
    ("text", "kind", "fix"),
    [
        ("5 mHz", "frequency", "'5 MHz'"),
        ("2.4 mHz", "frequency", "'2.4 MHz'"),
        ("10 Mm", "length", "'10 mm'"),
        ("3 Gm", "length", "'3 km'"),
        ("1.31 mFLOP", "flops", "'1.31 MFLOP'"),
        ("7 mflop", "flops", "'7 MFLOP'"),
        ("7 mflops", "flops", "'7 MFLOP'"),
        ("4 mFLOPs", "flops", "'4 MFLOP'"),
        ("900 mFLOP/s", "flop_rate", "'900 MFLOP/s'"),
    ],
)
def test_spellings_never_meant_are_refused_with_the_fix(text: str, kind: str, fix: str) -> None:
    """Millihertz, megametres, milli-FLOP: a billion off what was meant, so never read."""
    with pytest.raises(UnitError, match="never meant") as caught:
        parse_quantity(text, kind)
    assert fix in str(caught.value)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("text", ["14%", "3.6 %", "100 %"])
def test_a_percentage_is_no_quantity(text: str, kind: str) -> None:
    """'14 %' where a time, size or rate goes: named a percentage, not an unknown unit."""
    with pytest.raises(UnitError, match="is a percentage"):
        parse_quantity(text, kind)


@given(
    number=st.integers(min_value=1000, max_value=10**12),
    separator=st.sampled_from([",", " ", "\u202f", "\u00a0"]),
    unit=st.sampled_from(["MB", "kB", "B", "GiB"]),
)
def test_thousands_separators_are_refused_not_misread(number: int, separator: str, unit: str):
    """'1,000 MB' or '1 000 MB' is never read as 1 MB, nor 1000 MB: refused, naming both."""
    text = f"{number:,} {unit}".replace(",", separator)
    with pytest.raises(UnitError) as caught:
        parse_quantity(text, "size")
    assert f"'{number} {unit}'" in str(caught.value)


@pytest.mark.parametrize(("text", "readings"), [("1,5 s", ["'15 s'", "'1.5 s'"])])
def test_a_decimal_comma_names_both_readings(text: str, readings: list[str]) -> None:
    """'1,5 s' is 1.5 s in half the world and 15 s to a parser: both are offered."""
    with pytest.raises(UnitError) as caught:
        parse_quantity(text, "time")
    assert all(r in str(caught.value) for r in readings)
