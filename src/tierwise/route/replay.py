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

from tierwise.errors import ScenarioError, clip, shown

__all__ = ["STRATEGIES", "read_log", "replay"]

EWMA_ALPHA = 0.3


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The records of a decisions log; a bad line is one ScenarioError naming the file,
    the line number and the key (a wrong type, a missing field, a chosen site that was
    not predicted), so neither ``route decisions`` nor ``route replay`` trips over it."""
    from tierwise.tomlfile import read_text

    lines = read_text(path).splitlines()
    records = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            raise ScenarioError("not a decisions-log record: not JSON", source=where) from None
        records.append(_checked(rec, where))
    return records


def _as_json(value: Any) -> str:
    """``value`` as the log spells it (true, "1s", NaN), cut like any echoed value."""
    try:
        return clip(json.dumps(value))
    except (TypeError, ValueError):
        return shown(value)


def _is_seconds(value: Any) -> bool:
    """A time in seconds: a number (not a boolean), not NaN, not negative (inf: never)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def _checked(rec: Any, where: str) -> dict[str, Any]:
    """``rec`` if it has what decisions and replay read, with the right types."""

    def bad(key: str, expected: str, value: Any) -> ScenarioError:
        got = "nothing" if value is None else _as_json(value)
        return ScenarioError(f"expected {expected}, got {got}", source=where, path=key)

    if not isinstance(rec, dict):
        raise ScenarioError(f"expected a JSON object, got {shown(rec)}", source=where)
    predicted = rec.get("predicted")
    if not isinstance(predicted, dict):
        raise bad("predicted", "an object of predictions by site", predicted)
    for site, p in predicted.items():
        if not isinstance(p, dict):
            raise bad(f"predicted.{site}", "an object", p)
        if not _is_seconds(p.get("time_s")):
            raise bad(f"predicted.{site}.time_s", "seconds (a number ≥ 0)", p.get("time_s"))
        if not isinstance(p.get("feasible"), bool):
            raise bad(f"predicted.{site}.feasible", "true or false", p.get("feasible"))
    for key in ("ts", "actual_s"):
        if key in rec and rec[key] is not None and not _is_seconds(rec[key]):
            raise bad(key, "seconds (a number ≥ 0)", rec[key])
    for key in ("chosen", "outcome"):
        if rec.get(key) is not None and not isinstance(rec[key], str):
            raise bad(key, "a string", rec[key])
    chosen = rec.get("chosen")
    if chosen is not None and chosen not in predicted:
        raise bad("chosen", f"a predicted site ({', '.join(map(str, predicted))})", chosen)
    if rec.get("outcome") == "ok" and chosen and rec.get("actual_s") is None:
        raise bad("actual_s", "the measured time of an answered request", None)
    stages = rec.get("stages")
    if stages is not None and not isinstance(stages, dict):
        raise bad("stages", "an object", stages)
    for key, value in (stages or {}).items():
        if value is None or not key.endswith("_s"):
            continue
        if key == "server_s":  # the server's own stages (Server-Timing): seconds by name
            if not isinstance(value, dict) or not all(map(_is_seconds, value.values())):
                raise bad(f"stages.{key}", "an object of seconds by server stage", value)
        elif not _is_seconds(value):
            raise bad(f"stages.{key}", "seconds (a number ≥ 0)", value)
    return rec


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
