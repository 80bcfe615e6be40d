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

The search is linear in the number of sites: varying one site's uplink can only
change the choice between that site and the best of the others, so each probe
chooses among at most three options (:func:`contenders`), not all of them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tierwise.model.loop import harmonic_mean_rate
from tierwise.plan.options import evaluate_option
from tierwise.plan.resolve import SiteCosts
from tierwise.scenario.schema import Scenario

__all__ = ["contenders", "find_thresholds", "flip_between", "min_uplink", "uplink_choice"]

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


def find_thresholds(
    scn: Scenario,
    costs: list[SiteCosts],
    plan: Any,
    source: str,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict]:
    """Thresholds for every remote site that uploads something.

    ``progress(done, total)`` is called before each site's search and once at the end
    (a progress bar for many sites: the search takes seconds at 1,000).
    """
    out: list[dict] = []
    by_name = {o.site: o for o in plan.options}
    rivals = _Rivals(plan, by_name)
    pool = contenders(plan.options, scn.decision.objective)  # pareto: all feasible
    for done, c in enumerate(costs):
        if progress is not None:
            progress(done, len(costs))
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
        rival = rivals.of(c.site.name)
        if rival is not None:
            out.append(_faster(c.site.name, time_at, rival, b0, floor))
        out += _flips(scn, [o for o in pool if o.site != c.site.name], c, b0, source)
    if progress is not None:
        progress(len(costs), len(costs))
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


class _Rivals:
    """The option each site must beat: the choice, or (for the choice itself, or when
    nothing is chosen) the fastest other feasible option; the two fastest are kept so
    that each lookup is O(1)."""

    def __init__(self, plan: Any, by_name: dict[str, Any]) -> None:
        self.choice = by_name.get(plan.choice) if plan.choice is not None else None
        feasible = [(o.time_s, i, o) for i, o in enumerate(plan.options) if o.feasible]
        self.fastest = [o for _, _, o in heapq.nsmallest(2, feasible, key=lambda t: t[:2])]

    def of(self, name: str) -> Any:
        if self.choice is not None and self.choice.site != name:
            return self.choice
        return next((o for o in self.fastest if o.site != name), None)


def contenders(options: list[Any], objective: str) -> list[Any]:
    """The options that can still be chosen when any one option changes, in their order.

    :func:`~tierwise.plan.choice.choose` picks the first minimum of the on-time
    options by the objective's key; whichever single option varies, the first minimum
    of the rest is among the two smallest, so choosing among these two and the varied
    option gives the same choice as choosing among all of them. ``"pareto"`` has no
    such key (the front and each metric's best value depend on every option, on time
    or not), so every feasible option stays.
    """
    from tierwise.plan.choice import objective_key

    if objective == "pareto":
        return [o for o in options if o.feasible]
    key = objective_key(objective)
    ontime = [
        (key(o), i) for i, o in enumerate(options) if o.feasible and o.meets_deadline is not False
    ]
    keep = sorted(i for _, i in heapq.nsmallest(2, ontime))
    return [options[i] for i in keep]


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


def _flips(scn: Scenario, others: list[Any], c: SiteCosts, b0: float, source: str) -> list[dict]:
    """The uplink of ``c`` where the choice changes within ×/÷ 100 of ``b0``, if it does.

    ``others`` are the other options (or their :func:`contenders`) as evaluated. Time
    falls with the uplink and energy does not depend on it, so ``c`` can only gain on
    the others as its uplink grows: the choice changes at most once along the scan
    grid, whose cell is found by bisecting the grid (O(log points) evaluations, not
    one per point), and the uplink inside it by bisection in log space.
    """
    choice_at = uplink_choice(scn, others, c, source)
    grid = b0 * np.logspace(-_SCAN_DECADES, _SCAN_DECADES, _SCAN_POINTS)
    below, above = choice_at(grid[0]), choice_at(grid[-1])
    if below == above:
        return []
    i, j = 0, grid.size - 1
    while j - i > 1:
        mid = (i + j) // 2
        i, j = (mid, j) if choice_at(grid[mid]) == below else (i, mid)
    return [
        {
            "site": c.site.name,
            "kind": "choice_flip",
            "uplink_bytes_per_s": flip_between(choice_at, grid[i], grid[j]),
            "below": below,
            "above": above,
        }
    ]


def uplink_choice(
    scn: Scenario, others: list[Any], c: SiteCosts, source: str
) -> Callable[[float], str | None]:
    """The planner's choice as a function of ``c``'s uplink, ``others`` as evaluated.

    The choice rule is the planner's own, with the scenario's objective and weights.
    """
    from tierwise.plan.choice import chosen, constrain

    decision = scn.decision

    def choice_at(b: float) -> str | None:
        varied = evaluate_option(scn, c, source, uplink=b)
        constrain(varied, c)
        return chosen([*others, varied], decision.objective, decision.weights)

    return choice_at


def flip_between(choice_at: Callable[[float], Any], lo: float, hi: float) -> float:
    """An uplink in (lo, hi] where ``choice_at`` first differs from its value at ``lo``:
    bisection in log space to 60 halvings (lo < hi, both > 0; the choice differs at hi)."""
    below = choice_at(lo)
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if choice_at(mid) == below else (lo, mid)
        if hi / lo - 1 < 1e-12:
            break
    return hi
