"""The registry behind ``tierwise calc``: one entry per closed-form model.

An entry names its parameters with their kinds (a unit kind from
:data:`tierwise.units.KINDS`, or ``int``/``float``/``bool``, or ``list:<kind>``)
and a function that takes SI floats and returns a mapping of results whose keys
carry the unit as a suffix (``time_s``, ``size_bytes``, ``rate_bytes_per_s``...).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tierwise.errors import ScenarioError, TierwiseError, UnitError, clip, number_slip, shown
from tierwise.units import KINDS, in_range, parse_quantity

__all__ = ["REGISTRY", "Calc", "Param", "calc", "parse_param"]

REQUIRED: Any = object()


@dataclass(frozen=True)
class Param:
    """One ``--name value`` of a calc entry; ``default`` is written as a user would type it."""

    name: str
    kind: str
    help: str
    default: Any = REQUIRED

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class Calc:
    name: str
    summary: str
    section: str
    params: tuple[Param, ...]
    func: Callable[..., Mapping[str, Any]]

    def run(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Parse ``raw`` (strings or typed values by param name) and evaluate."""
        known = {p.name: p for p in self.params}
        for name in raw:
            if name not in known:
                flags = ", ".join(p.flag for p in self.params)
                raise ScenarioError(
                    f"unknown parameter --{clip(name.replace('_', '-'))} for {self.name!r}; "
                    f"it takes {flags}",
                    source="calc",
                )
        args = {}
        for p in self.params:
            value = raw.get(p.name, p.default)
            if value is REQUIRED:
                raise ScenarioError(f"{self.name!r} needs {p.flag} ({p.help})", source="calc")
            args[p.name] = parse_param(p, value)
        try:
            return dict(self.func(**args))
        except TierwiseError:
            raise
        except (ValueError, ZeroDivisionError) as exc:
            raise ScenarioError(f"{self.name}: {clip(str(exc), 200)}", source="calc") from exc


REGISTRY: dict[str, Calc] = {}


def calc(name: str, summary: str, section: str, *params: Param) -> Callable:
    """Register ``func`` as ``tierwise calc NAME``."""

    def register(func: Callable[..., Mapping[str, Any]]) -> Callable[..., Mapping[str, Any]]:
        if name in REGISTRY:
            raise RuntimeError(f"calc {name!r} registered twice")
        REGISTRY[name] = Calc(name, summary, section, params, func)
        return func

    return register


# counts above this are not integers in floating point, where every model computes
MAX_COUNT = 2**53


def _count(value: Any, flag: str) -> int:
    number = int(value)
    if str(value).strip() not in (str(number), f"{number}.0") and not isinstance(value, int):
        raise ValueError
    if abs(number) > MAX_COUNT:
        raise ScenarioError(
            f"{flag}: {shown(value)} is over the largest count the models take "
            f"({MAX_COUNT:,} = 2^53)",
            source="calc",
        )
    return number


def _scalar(kind: str, value: Any, flag: str) -> Any:
    try:
        if kind in KINDS:
            number = parse_quantity(value, kind) if isinstance(value, str) else _typed(value, kind)
            return _physical(number, kind, flag)
        if kind == "int":
            return _count(value, flag)
        if kind == "float":
            number = float(value)
            if not math.isfinite(number):
                raise ValueError
            return number
        if kind == "bool":
            if isinstance(value, bool):
                return value
            return {"true": True, "false": False, "1": True, "0": False}[str(value).lower()]
        if kind == "str":
            return str(value)
    except UnitError as exc:
        raise ScenarioError(f"{flag}: {exc}", source="calc") from exc
    except ScenarioError:
        raise
    except (ValueError, KeyError, TypeError):
        why = number_slip(value) or f"expected {kind}, got {shown(value)}"  # '14%', '1,5'
        raise ScenarioError(f"{flag}: {why}", source="calc") from None
    raise RuntimeError(f"unknown param kind {kind!r}")


def _physical(number: float, kind: str, flag: str) -> float:
    """``number`` if it is a quantity a model takes: not negative, within ``LIMITS``."""
    if number < 0:
        raise ScenarioError(f"{flag}: a {kind} must not be negative, got {number:g}", source="calc")
    return in_range(number, kind)


def _typed(value: Any, kind: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)  # API callers may pass SI floats directly
    raise UnitError(f"expected a {kind} with a unit, got {shown(value)}")


def parse_param(p: Param, value: Any) -> Any:
    """Turn a command-line string (or a Python value) into the SI value ``p`` expects."""
    if p.kind.startswith("list:"):
        kind = p.kind.removeprefix("list:")
        items = _split_list(value, p.flag)
        return [_scalar(kind, item, p.flag) for item in items]
    return _scalar(p.kind, value, p.flag)


def _split_list(value: Any, flag: str) -> list[Any]:
    if isinstance(value, list | tuple):
        return list(value)
    text = str(value).strip()
    if text.startswith("["):
        try:
            return list(tomllib.loads(f"v = {text}")["v"])
        except (tomllib.TOMLDecodeError, RecursionError) as exc:  # RecursionError: [[[[…
            why = clip(str(exc) or "nested too deep", 80)
            raise ScenarioError(
                f"{flag}: cannot read list {shown(text)}: {why}",
                source="calc",
            ) from None
    return [item.strip() for item in text.split(",") if item.strip()]
