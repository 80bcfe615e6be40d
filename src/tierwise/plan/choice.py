"""The planner's choice rule, in one place: which option wins, and why.

Among the options, the feasible ones (memory, residency, battery, a finite time)
that meet the deadline compete; ``objective`` ranks them — energy then time, time
then energy, cost then time and energy, or the least weighted score on the Pareto
front of (time, energy, cost). The planner states its choice with :func:`choose`;
the threshold searches and the live router reuse the very same rule
(:func:`chosen`, :func:`objective_key`, :func:`constrain`), so a flip the searches
report is a flip the planner would make.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tierwise.plan.cost import add_cost, pick
from tierwise.plan.options import Option
from tierwise.plan.resolve import SiteCosts
from tierwise.units import format_seconds

__all__ = ["choose", "choose_by", "chosen", "constrain", "objective_key"]


def constrain(option: Option, costs: SiteCosts) -> None:
    """Add the option's cost and apply its site's battery: every evaluated option passes here,
    the planner's and the threshold searches' alike."""
    add_cost(option, costs)
    battery = costs.site.battery
    if battery is not None and option.energy_key > battery:
        option.feasible = False
        option.reasons.append(
            f"battery: needs up to {option.energy_key:.0f} J, {battery:.0f} J available"
        )


def choose(
    options: list[Option], objective: str, weights: dict[str, float] | None = None
) -> tuple[str | None, str, str | None]:
    """(choice, one-line reason, fastest feasible) among ``options``."""
    if objective in ("cost", "pareto"):
        return choose_by(options, objective, weights)
    feasible = [o for o in options if o.feasible]
    fastest = min(feasible, key=lambda o: o.time_s).site if feasible else None
    if not feasible:
        return (
            None,
            "no site is feasible: "
            + "; ".join(f"{o.site}: {', '.join(o.reasons)}" for o in options),
            None,
        )
    ontime = [o for o in feasible if o.meets_deadline is not False]
    if not ontime:
        best = min(feasible, key=lambda o: o.time_s)
        return (
            None,
            (
                f"no feasible site meets the deadline; the fastest is {best.site} "
                f"at {format_seconds(best.time_s)}"
            ),
            fastest,
        )
    best = min(ontime, key=objective_key(objective))
    return best.site, _reason(best, options, objective), fastest


def chosen(
    options: list[Option], objective: str, weights: dict[str, float] | None = None
) -> str | None:
    """The site :func:`choose` picks, without composing its reason (for searches)."""
    if objective in ("cost", "pareto"):
        best = pick(options, objective, weights)[0]
        return None if best is None else options[best].site
    ontime = [o for o in options if o.feasible and o.meets_deadline is not False]
    return min(ontime, key=objective_key(objective)).site if ontime else None


def objective_key(objective: str) -> Callable[[Option], tuple[float, ...]]:
    """The ranking key of :func:`choose`: energy then time, cost then time and energy, or
    time then energy (``"pareto"`` has no key: its score depends on every option)."""
    if objective == "energy":
        return lambda o: (o.energy_key, o.time_s)
    if objective == "cost":
        return lambda o: (o.extra.get("cost", 0.0), o.time_s, o.energy_key)
    return lambda o: (o.time_s, o.energy_key)


def _reason(best: Option, options: list[Option], objective: str) -> str:
    deadline = "meets the deadline" if best.meets_deadline else "has no deadline to meet"
    if objective == "energy" and math.isfinite(best.energy_key):
        what = f"the least energy ({_energy_text(best)})"
    else:
        what = f"the shortest time ({format_seconds(best.time_s)})"
    others = []
    for o in options:
        if o is best:
            continue
        if not o.feasible:
            others.append(f"{o.site} infeasible ({o.reasons[0]})")
        elif o.meets_deadline is False:
            others.append(f"{o.site} misses the deadline ({format_seconds(o.time_s)})")
    tail = f"; {', '.join(others)}" if others else ""
    return f"{best.site} {deadline} ({format_seconds(best.time_s)}) with {what}{tail}"


def _energy_text(o: Option) -> str:
    e = o.energy_j
    if isinstance(e, list):
        return f"{e[0]:.0f}–{e[1]:.0f} J"
    return f"{e / 1000:.3g} kJ" if e and e >= 1000 else f"{e:.3g} J"


def choose_by(
    options: list[Any], objective: str, weights: dict[str, float] | None
) -> tuple[str | None, str, str | None]:
    """The planner's choice for ``objective = "cost"`` or ``"pareto"``.

    Feasibility and the deadline come first, exactly as for time and energy.
    """
    choice, reason, fastest = choose(options, "time")
    if choice is None:
        return choice, reason, fastest
    best, metrics, front = pick(options, objective, weights)
    assert best is not None  # some option is feasible and on time
    if objective == "cost":
        what = f"the least cost ({metrics[2, best, 0]:.4g})"
    else:
        for o, on in zip(options, front, strict=True):
            o.extra["pareto"] = bool(on)
        names = [o.site for o, on in zip(options, front, strict=True) if on]
        what = f"the best weighted score on the Pareto front ({', '.join(names)})"
    o = options[best]
    deadline = "meets the deadline" if o.meets_deadline else "has no deadline to meet"
    return o.site, f"{o.site} {deadline} with {what}", fastest
