"""Errors raised by tierwise.

Every error a user can cause derives from one root, and also from the builtin
that fits it best, so callers may catch either::

    TierwiseError
    ├── ScenarioError(ValueError)     the user's scenario, override or CLI input
    ├── CatalogError(ValueError)      a catalog file or an unknown catalog id
    ├── UnitError(ValueError)         a quantity that does not parse or has the wrong dimension
    ├── ModelError(ValueError)        a value outside a model's domain
    ├── SimulationError(RuntimeError)
    ├── ProtocolError
    │   ├── LocalProtocolError        we misused a protocol object
    │   └── RemoteProtocolError       the peer misbehaved
    └── LabError(RuntimeError)        missing privilege or kernel feature, with the fix

The CLI turns any ``TierwiseError`` into one line on stderr and exit status 2.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

__all__ = [
    "CatalogError",
    "LabError",
    "LocalProtocolError",
    "ModelError",
    "ProtocolError",
    "RemoteProtocolError",
    "ScenarioError",
    "SimulationError",
    "TierwiseError",
    "UnitError",
    "clip",
    "did_you_mean",
    "first_line",
    "number_slip",
    "shown",
]

SHOWN_CHARS = 40  # characters of a user's value echoed in an error


class TierwiseError(Exception):
    """Root of every error tierwise raises on purpose."""


class ScenarioError(TierwiseError, ValueError):
    """The user's scenario, an override or a command-line value is wrong.

    ``source`` names the file (or "--set", "command line"), ``path`` the key path.
    """

    def __init__(self, message: str, *, source: str | None = None, path: str | None = None):
        self.source = source
        self.path = path
        self.detail = message
        where = ": ".join(p for p in (source, path and clip(path, 100)) if p)
        super().__init__(f"{where}: {message}" if where else message)


class CatalogError(TierwiseError, ValueError):
    """A catalog file is malformed or an id is unknown."""


class UnitError(TierwiseError, ValueError):
    """A quantity does not parse, has an unknown unit or the wrong dimension."""


class ModelError(TierwiseError, ValueError):
    """A value lies outside a model's domain (negative size, zero rate, ...)."""


class SimulationError(TierwiseError, RuntimeError):
    """The simulator was asked something it cannot do."""


class ProtocolError(TierwiseError):
    """A transport protocol rule was broken."""


class LocalProtocolError(ProtocolError):
    """We misused a protocol object."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids."""


class LabError(TierwiseError, RuntimeError):
    """A lab experiment cannot run here; the message says what is missing and the fix."""


def shown(value: Any) -> str:
    """``value`` as an error may echo it: its repr, cut to about 40 characters."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        digits = int(value.bit_length() * math.log10(2)) + 1
        return f"an integer of about {digits:,} digits"
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's 4,300-digit str() limit, nested somewhere
        return "<a value too large to show>"
    return clip(text)


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters (a key or flag as the user typed it)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def first_line(exc: BaseException, limit: int = 160) -> str:
    """An exception's message as one short line (a library's text can span several, or be
    empty: then the exception's class name)."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    return clip(lines[0], limit)


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the nearest of ``choices`` to ``word``, or ``""``."""
    import difflib  # only on the error path: it costs start-up time

    if not isinstance(word, str) or len(word) > 100:
        return ""
    near = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


_DIGITS = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,4})?"
_PERCENT = re.compile(rf"\s*(?P<number>{_DIGITS})\s*%\s*")
_COMMA = re.compile(r"\s*[+-]?\d[\d,]*,\d[\d,.]*\s*")  # 1,000 · 1,000.5 · 1,5


def number_slip(text: object) -> str | None:
    """Why ``text`` (a number as a user typed it) is refused rather than misread, or None.

    A percentage ("14%", "3.6 %") where a fraction goes would be read 100 times too
    large, or not at all; a comma is a thousands separator ("1,000") or a decimal comma
    ("1,5") and nothing tells which. Both are refused with the spelling that is meant.
    """
    if not isinstance(text, str) or len(text) > 100:
        return None
    percent = _PERCENT.fullmatch(text)
    if percent is not None:
        from decimal import Decimal, InvalidOperation

        try:
            fraction = f"{Decimal(percent['number']).scaleb(-2).normalize():f}"
        except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
            return None
        return (
            f"{shown(text)} is a percentage; this takes a fraction: "
            f"write {fraction} for {percent['number']} %"
        )
    if _COMMA.fullmatch(text) is not None:
        number = text.strip()
        readings = [number.replace(",", "")]
        if number.count(",") == 1 and "." not in number:
            readings.append(number.replace(",", "."))
        written = " or ".join(readings)
        return (
            f"{shown(text)} has a comma: a number takes no thousands separator and a "
            f"decimal point (write {written})"
        )
    return None
