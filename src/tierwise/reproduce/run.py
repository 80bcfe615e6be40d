"""Gather the case tables into one list of :class:`Case`, run them, and list what cannot run.

Each table keeps the shape its reference test has always had; the adapters here
turn a row of any of those shapes into a :class:`Case` (section, quantity, printed
value, how to compute it, agreement rule).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from tierwise.errors import TierwiseError
from tierwise.reproduce._case import Case, Result, Unreproducible, plan_example, plan_text

__all__ = ["UNREPRODUCIBLE", "all_cases", "matches_section", "run_cases", "unreproducible"]

# Table modules under tierwise.reproduce.cases, in the chapter's order.
TABLES = (
    "stream",
    "tasks",
    "device",
    "architecture",
    "split_reuse",
    "transport",
    "loss",
    "queqiao",
    "streams_paths",
    "deployment",
)

UNREPRODUCIBLE = [
    Unreproducible(
        "§12.1.5",
        "rank-16 Q/V adapter, 约 765 万 parameters",
        "7.65e6",
        "the architecture gives 7,667,712 (约 767 万); 765 万 is the rounded 14.6 MiB ÷ 2 B",
    ),
    Unreproducible(
        "§12.5.2",
        "one 8K BF16 decode step on the RTX PRO 6000",
        "25.83 ms",
        "a measured input (experiment 8-1); tierwise uses it as measured_decode",
    ),
    Unreproducible(
        "§12.1.5",
        "MELTing Point: 14.8 token/s, 0.16–0.21 mWh per token, 13.8 W sustained",
        "14.8 token/s",
        "measured inputs (iPhone 14 Pro); tierwise checks only what follows from them",
    ),
    Unreproducible(
        "§12.3.5",
        "Queqiao medians 1185.3 / 301.6 / 240.9 / 236.5 ms",
        "1185.3 ms",
        "measured inputs; `tierwise lab request` measures its own on an emulated path (root)",
    ),
]


def _from_row(row: Any) -> Case:
    """A dataclass row of the model tables (three shapes) as a Case."""
    if hasattr(row, "printed"):  # split_reuse: printed text × scale, op
        scale = row.scale
        return Case(
            row.section,
            row.what,
            float(row.printed),
            lambda: float(row.compute()) / scale,
            row.tolerance / scale,
            row.op,
        )
    tol = getattr(row, "tolerance", getattr(row, "tol", 0.0))
    return Case(row.section, row.what, row.expected, row.compute, tol)


def _deployment(module: Any) -> list[Case]:
    def number(overrides: tuple[str, ...], get: Callable) -> Callable[[], Any]:
        return lambda: get(plan_example("deployment", *overrides))

    def choice(overrides: tuple[str, ...]) -> Callable[[], Any]:
        return lambda: plan_example("deployment", *overrides).choice

    cases = [
        Case(sec, what, want, number(over, get), tol)
        for sec, what, over, get, want, tol in module.ROWS
    ]
    for sec, over, want in module.CHOICES:
        label = ", ".join(over) or "as stated"
        cases.append(Case(sec, f"choice ({label})", want, choice(over)))
    return cases


def _queqiao(module: Any) -> list[Case]:
    def number(get: Callable) -> Callable[[], Any]:
        return lambda: get(plan_text(module.SPEECH))

    return [Case(s, what, want, number(get), tol) for s, what, get, want, tol in module.ROWS]


def _tasks(module: Any) -> list[Case]:
    def number(example: str, over: tuple[str, ...], site: str) -> Callable[[], Any]:
        return lambda: plan_example(example, *over).option(site).time_s

    return [
        Case(sec, what, want, number(ex, over, site), tol)
        for sec, what, ex, over, site, want, tol in module.ROWS
    ]


_TUPLE_TABLES = {"deployment": _deployment, "queqiao": _queqiao, "tasks": _tasks}


def all_cases() -> list[Case]:
    """Every case of every table, in the chapter's order."""
    cases: list[Case] = []
    for name in TABLES:
        module = importlib.import_module(f"tierwise.reproduce.cases.{name}")
        if name in _TUPLE_TABLES:
            cases += _TUPLE_TABLES[name](module)
        elif hasattr(module, "CASES"):
            cases += module.CASES
        else:
            cases += [_from_row(r) for r in module.ROWS]
    return cases


def matches_section(section: str, wanted: str | None) -> bool:
    """``--section 12.3`` keeps §12.3, §12.3.x; ``12-10`` keeps exercise 12-10 rows."""
    if not wanted:
        return True
    want = wanted.strip().lstrip("§")
    have = section.strip().lstrip("§").split(" (", 1)[0]
    for prefix in ("exercise ", "ex. ", "fig. ", "figure "):
        have = have.removeprefix(prefix)
    return have == want or have.startswith(want + ".") or have.startswith(want + "(")


def _run(case: Case) -> Result:
    try:
        value = case.compute()
    except (TierwiseError, ValueError, KeyError, AssertionError) as exc:
        return Result(case, None, False, f"{type(exc).__name__}: {exc}")
    try:
        agrees = case.agrees(value)
    except (TypeError, ValueError):
        agrees = False
    return Result(case, value, agrees)


def run_cases(
    section: str | None = None, progress: Callable[[int, int], None] | None = None
) -> list[Result]:
    """Run the cases of ``section`` (all by default); ``progress(done, total)`` after each."""
    cases = [c for c in all_cases() if matches_section(c.section, section)]
    results = []
    for i, case in enumerate(cases, 1):
        results.append(_run(case))
        if progress is not None:
            progress(i, len(cases))
    return results


def unreproducible(section: str | None = None) -> Iterable[Unreproducible]:
    """The listed numbers that do not follow from the inputs, in ``section``."""
    return [u for u in UNREPRODUCIBLE if matches_section(u.section, section)]
