"""What a reference case is, and the public-API runners the case tables use.

The case tables in :mod:`tierwise.reproduce.cases` are the chapter's reference tests
turned outward: ``tests/*/test_reference_*.py`` import them, and ``tierwise
reproduce`` runs them, so what the book is checked against cannot drift from what
the tests check.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

__all__ = [
    "Case",
    "Result",
    "Row",
    "Unreproducible",
    "calc_json",
    "plan_example",
    "plan_text",
]


@dataclass(frozen=True)
class Case:
    """One printed number: where, what, as printed, how to compute it, how close is agreement."""

    section: str
    quantity: str
    printed: Any
    compute: Callable[[], Any]
    tol: float = 0.0  # absolute, in the printed unit; 0: exact equality
    op: str = "≈"  # "≈" within tol, "=" exact (relative 1e-12), ">" printed is a lower bound

    def agrees(self, value: Any) -> bool:
        """Whether ``value`` reproduces the printed number within its rounding."""
        if isinstance(self.printed, bool | str | tuple | list) or (
            self.tol == 0 and self.op == "≈"
        ):
            return value == self.printed
        got, want = float(value), float(self.printed)
        if self.op == ">":
            return got > want
        if self.op == "=":
            return math.isclose(got, want, rel_tol=1e-12, abs_tol=0)
        return abs(got - want) <= self.tol * (1 + 1e-9) + 1e-12 * abs(want)


@dataclass(frozen=True)
class Row:
    """A row of the tolerance tables (§12.1.2, §12.3, §12.4): printed value ± rounding."""

    section: str
    what: str
    compute: Callable[[], float]
    expected: float
    tolerance: float


@dataclass(frozen=True)
class Unreproducible:
    """A printed number that does not follow from the chapter's inputs, and why."""

    section: str
    quantity: str
    printed: Any
    reason: str


@dataclass(frozen=True)
class Result:
    """A case run: the computed value and whether it agrees (or the error it raised)."""

    case: Case
    computed: Any
    agrees: bool
    error: str | None = None


@cache
def calc_json(name: str, *args: str) -> dict[str, Any]:
    """``tierwise calc NAME ARGS --json`` through the registry, as the JSON a user gets."""
    from tierwise.calc import REGISTRY
    from tierwise.report.jsonout import dumps

    if len(args) % 2:
        raise ValueError(f"calc {name}: expected --flag value pairs, got {args}")
    raw = {
        args[i].removeprefix("--").replace("-", "_"): args[i + 1] for i in range(0, len(args), 2)
    }
    entry = REGISTRY[name]
    return json.loads(dumps({"model": entry.name, "section": entry.section, **entry.run(raw)}))


@cache
def _plan_source(name: str, text: str | None, overrides: tuple[str, ...], thresholds: bool) -> Any:
    from tierwise.plan.planner import plan
    from tierwise.scenario.loader import bundled_example, parse_scenario

    if text is None:
        path = str(bundled_example(name))
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        source = path
    else:
        source = "test.toml"
    scn = parse_scenario(text, source=source, overrides=overrides)
    return plan(scn, source=source, thresholds=thresholds)


def plan_example(name: str = "deployment", *overrides: str, thresholds: bool = True) -> Any:
    """Plan a bundled example with ``--set``-style overrides (cached: plans are not mutated)."""
    return _plan_source(name, None, tuple(overrides), thresholds)


def plan_text(text: str, *overrides: str) -> Any:
    """Plan a scenario given as TOML text."""
    return _plan_source("", text, tuple(overrides), True)
