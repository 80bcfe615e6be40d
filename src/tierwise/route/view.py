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


# the six terms of tierwise.route.stages, as short column heads
_TERM_HEADS = {
    "network": "net",
    "serialization": "ser",
    "scheduling": "sched",
    "compute": "comp",
    "deserialization": "deser",
    "io_wait": "io",
}


def render_decisions(records: list[dict[str, Any]]) -> None:
    """One row per request: predictions per site, the choice, actual time, and the
    client-visible time split into six terms and the residual (:mod:`.stages`; ``~``
    marks a term split by the estimates, not a clock)."""
    sites = sorted({s for r in records for s in r.get("predicted", {})})
    fleet = len({r.get("replica") for r in records}) > 1  # several replicas' logs together
    table = Table(title=f"{len(records)} requests", title_justify="left")
    heads = [f"{h} ms" for h in _TERM_HEADS.values()]
    cols = ("when", *(["replica"] if fleet else []), *[f"{s} ms" for s in sites], "chosen",
            "actual ms", "ttft ms", "client ms", *heads, "resid ms", "outcome")  # fmt: skip
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
            *_terms(r.get("decomposition")),
            r.get("outcome", "?"),
        )
    WholeConsole().print(table)


def _terms(d: dict[str, Any] | None) -> list[str]:
    """Client time, the six terms and the residual of a record's decomposition, in ms."""
    if not d:
        return ["—"] * (len(_TERM_HEADS) + 2)
    rough = {key.split(".")[0] for key in d.get("estimated", ())}
    terms = d.get("terms_s", {})
    cells = [("~" if t in rough else "") + _ms(terms.get(t)) for t in _TERM_HEADS]
    return [_ms(d.get("client_s")), *cells, _ms(d.get("residual_s"))]


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
