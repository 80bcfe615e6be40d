"""What would flip the choice: uplink thresholds per remote site (§12.5.2).

For each remote site S, with every other parameter fixed:

* ``meets_deadline`` — the smallest uplink at which S meets the deadline, or
  never, with S's floor (its time with an infinitely fast uplink);
* ``faster_than`` — the smallest uplink at which S beats the current choice (or,
  for the choice itself, the fastest other option) in time, or never, with the
  floor that prevents it (the §12.5.2 cloud: 11.6 s against 11.0 s);
* ``choice_flip`` — uplinks of S at which the planner's choice changes.

Times fall monotonically with the uplink, so each threshold is found by
bisection in log space; this holds for chunked overlap too, where no closed form
exists.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tierwise.model.loop import harmonic_mean_rate
from tierwise.plan.options import evaluate_option
from tierwise.plan.resolve import SiteCosts
from tierwise.scenario.schema import Scenario

__all__ = ["find_thresholds", "min_uplink"]

_SCAN_DECADES = 2.0  # choice flips are searched within ×/÷ 100 of the current uplink
_SCAN_POINTS = 81
_MAX_DOUBLINGS = 60  # 2^60 × the current uplink: beyond any real link


def min_uplink(
    time_at: Callable[[float], float], target_s: float, start: float, *, strict: bool = False
) -> float | None:
    """Smallest uplink b with ``time_at(b) ≤ target`` (``<`` if strict); None if even ∞ fails.

    Returns 0.0 when any uplink at all meets the target.
    """

    def ok(b: float) -> bool:
        t = time_at(b)
        return t < target_s if strict else t <= target_s + 1e-12

    if not ok(math.inf):
        return None
    hi = start
    for _ in range(_MAX_DOUBLINGS):
        if ok(hi):
            break
        hi *= 2.0
    else:
        return None  # only an infinite uplink would do
    lo = hi
    while ok(lo):
        lo /= 2.0
        if lo < 1e-3:  # below a milli-byte per second: any uplink will do
            return 0.0
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
        if hi / lo - 1 < 1e-12:
            break
    return hi


def _current_uplink(costs: SiteCosts) -> float | None:
    up = costs.site.uplink
    if up is None:
        return None
    return harmonic_mean_rate(up) if isinstance(up, list) else float(up)


def find_thresholds(scn: Scenario, costs: list[SiteCosts], plan: Any, source: str) -> list[dict]:
    """Thresholds for every remote site that uploads something."""
    out: list[dict] = []
    by_name = {o.site: o for o in plan.options}
    for c in costs:
        b0 = _current_uplink(c)
        opt = by_name[c.site.name]
        if b0 is None or not c.site.remote or not opt.feasible or c.site.evaluate == "sim":
            continue  # a simulated site's time is not the closed form the search varies
        time_at = _time_at(scn, c, source)
        floor = time_at(math.inf)
        if floor >= opt.time_s - 1e-12:
            continue  # the uplink does not matter to this option
        if scn.task.deadline is not None:
            out.append(_meets(c.site.name, time_at, scn.task.deadline, b0, floor))
        rival = _rival(plan, c.site.name)
        if rival is not None:
            out.append(_faster(c.site.name, time_at, rival, b0, floor))
        out += _flips(scn, plan.options, c, b0, source)
    return out


def _time_at(scn: Scenario, c: SiteCosts, source: str) -> Callable[[float], float]:
    return lambda b: evaluate_option(scn, c, source, uplink=b).time_s


def _meets(name: str, time_at, deadline: float, b0: float, floor: float) -> dict:
    b = min_uplink(time_at, deadline, b0)
    return {
        "site": name,
        "kind": "meets_deadline",
        "deadline_s": deadline,
        "uplink_bytes_per_s": b,
        "never": b is None,
        "floor_s": floor,
    }


def _rival(plan: Any, name: str):
    if plan.choice is not None and plan.choice != name:
        return plan.option(plan.choice)
    others = [o for o in plan.options if o.site != name and o.feasible]
    return min(others, key=lambda o: o.time_s) if others else None


def _faster(name: str, time_at, rival, b0: float, floor: float) -> dict:
    b = min_uplink(time_at, rival.time_s, b0, strict=True)
    return {
        "site": name,
        "kind": "faster_than",
        "other": rival.site,
        "other_time_s": rival.time_s,
        "uplink_bytes_per_s": b,
        "never": b is None,
        "floor_s": floor,
    }


def _flips(scn: Scenario, current: list[Any], c: SiteCosts, b0: float, source: str) -> list[dict]:
    """Uplinks of ``c`` where the choice changes, every other option as already evaluated."""
    from tierwise.plan.planner import _battery, choose

    others = [o for o in current if o.site != c.site.name]

    def choice_at(b: float) -> str | None:
        varied = evaluate_option(scn, c, source, uplink=b)
        _battery(varied, c)
        return choose([*others, varied], scn.decision.objective)[0]

    grid = b0 * np.logspace(-_SCAN_DECADES, _SCAN_DECADES, _SCAN_POINTS)
    choices = [choice_at(b) for b in grid]
    flips = []
    for i in range(len(grid) - 1):
        if choices[i] != choices[i + 1]:
            lo, hi = grid[i], grid[i + 1]
            for _ in range(60):
                mid = math.sqrt(lo * hi)
                lo, hi = (mid, hi) if choice_at(mid) == choices[i] else (lo, mid)
            flips.append(
                {
                    "site": c.site.name,
                    "kind": "choice_flip",
                    "uplink_bytes_per_s": hi,
                    "below": choices[i],
                    "above": choices[i + 1],
                }
            )
    return flips
