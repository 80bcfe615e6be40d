"""Tables for ``tierwise route decisions`` and ``replay`` (rich)."""

from __future__ import annotations

import re
from typing import Any

from rich.table import Table

from tierwise.console import WholeConsole
from tierwise.errors import ScenarioError, UnitError
from tierwise.units import parse_quantity

__all__ = ["render_decisions", "render_replay", "since_seconds"]

_SHORT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_SHORT_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def since_seconds(text: str) -> float:
    """``10m``, ``2h``, ``30s`` (shorthand) or any time quantity (``10 min``) in seconds."""
    m = _SHORT.match(text)
    if m:
        return float(m.group(1)) * _SHORT_UNITS[m.group(2)]
    try:
        seconds = parse_quantity(text, "time")
    except UnitError:
        raise ScenarioError(
            f"expected a time such as 10m or '2 h', got {text!r}", source="--since"
        ) from None
    if seconds < 0:  # a cutoff in the future: every record silently left out
        raise ScenarioError(f"expected a time back from now, got {text!r}", source="--since")
    return seconds


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000:.0f}"


def render_decisions(records: list[dict[str, Any]]) -> None:
    """One row per request: predictions per site, the choice, actual time, stages."""
    sites = sorted({s for r in records for s in r.get("predicted", {})})
    fleet = len({r.get("replica") for r in records}) > 1  # several replicas' logs together
    table = Table(title=f"{len(records)} requests", title_justify="left")
    cols = ("when", *(["replica"] if fleet else []), *[f"{s} ms" for s in sites], "chosen",
            "actual ms", "ttft ms", "outcome")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="right" if "ms" in col else "left")
    import time

    for r in records:
        pred = r.get("predicted", {})
        stages = r.get("stages") or {}
        table.add_row(
            time.strftime("%H:%M:%S", time.localtime(r.get("ts", 0))),
            *([str(r.get("replica") or "—")] if fleet else []),
            *[_ms(pred.get(s, {}).get("time_s")) for s in sites],
            r.get("chosen") or "—",
            _ms(r.get("actual_s")),
            _ms(stages.get("first_token_s") or stages.get("headers_s")),
            r.get("outcome", "?"),
        )
    WholeConsole().print(table)


def render_replay(result: dict[str, Any]) -> None:
    """Total and median time per strategy."""
    table = Table(title=f"replay of {result['requests']} answered requests", title_justify="left")
    for col in ("strategy", "total s", "median ms", "counterfactual"):
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for name, s in result["strategies"].items():
        table.add_row(name, f"{s['total_s']:.2f}", _ms(s["median_s"]), str(s["counterfactual"]))
    WholeConsole().print(table)
    WholeConsole().print(
        "counterfactual: requests costed at another site's prediction, not a measurement"
    )
