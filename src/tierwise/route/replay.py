"""Replay a decisions log under other strategies: what would each have chosen, and cost?

A log holds, per request, every site's prediction and the chosen site's measured
time. A strategy's cost for a request is that measurement when it chooses the site
the gateway chose, and otherwise the site's prediction (a counterfactual — the
report says how many of those it used). Strategies:

- ``predictive`` — this service: the shortest predicted time (as logged);
- ``static`` — the offline plan: the site the first request's predictions chose,
  never revisited;
- ``lowest-latency`` — the common router: the lowest EWMA of each site's past
  measured latency (sites never measured keep the first prediction).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tierwise.errors import ScenarioError

__all__ = ["STRATEGIES", "read_log", "replay"]

EWMA_ALPHA = 0.3


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The records of a decisions log; a bad line is a ScenarioError naming its number."""
    from tierwise.tomlfile import read_text

    lines = read_text(path).splitlines()
    records = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            assert isinstance(rec, dict) and isinstance(rec.get("predicted"), dict)
        except (ValueError, AssertionError, RecursionError):
            raise ScenarioError("not a decisions-log record", source=f"{path}:{i}") from None
        records.append(rec)
    return records


def _predictive(rec: dict[str, Any], state: dict[str, Any]) -> str:
    feasible = {s: p for s, p in rec["predicted"].items() if p["feasible"]}
    pool = feasible or rec["predicted"]
    return min(pool, key=lambda s: pool[s]["time_s"])


def _static(rec: dict[str, Any], state: dict[str, Any]) -> str:
    state.setdefault("site", _predictive(rec, state))
    return state["site"]


def _lowest_latency(rec: dict[str, Any], state: dict[str, Any]) -> str:
    ewma = state.setdefault("ewma", {s: p["time_s"] for s, p in rec["predicted"].items()})
    return min(ewma, key=ewma.get)


STRATEGIES: dict[str, Callable[[dict[str, Any], dict[str, Any]], str]] = {
    "predictive": _predictive,
    "static": _static,
    "lowest-latency": _lowest_latency,
}


def replay(records: list[dict[str, Any]], strategies: list[str]) -> dict[str, Any]:
    """Total and median time per strategy over the answered requests of a log."""
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise ScenarioError(
            f"unknown strategy {unknown[0]!r}; known: {', '.join(STRATEGIES)}", source="--strategy"
        )
    answered = [r for r in records if r.get("outcome") == "ok" and r.get("chosen")]
    out: dict[str, Any] = {"requests": len(answered), "strategies": {}}
    for name in strategies:
        state: dict[str, Any] = {}
        times, counterfactual = [], 0
        for rec in answered:
            site = STRATEGIES[name](rec, state)
            if site == rec["chosen"]:
                cost = rec["actual_s"]
            else:
                cost, counterfactual = rec["predicted"][site]["time_s"], counterfactual + 1
            times.append(cost)
            ewma = state.get("ewma")
            if ewma is not None:
                chosen = rec["chosen"]
                ewma[chosen] += EWMA_ALPHA * (rec["actual_s"] - ewma[chosen])
        times.sort()
        out["strategies"][name] = {
            "total_s": sum(times),
            "median_s": times[len(times) // 2] if times else None,
            "counterfactual": counterfactual,
        }
    return out
