"""What people compute by hand from a plan: margins, differences and savings (§12.5.2).

Per option: its margin to the deadline (``D − T``; §12.5.2: the cloud finishes
13.4 s early), its difference to the chosen option (the cloud is 20.6 s slower
than the workstation, and uses less energy), and, with ``[decision] baseline``,
what it saves against that site (time and energy; a negative saving is a cost).
Energy ranges ``[low, high]`` subtract as intervals.
"""

from __future__ import annotations

from typing import Any

__all__ = ["compare_options", "energy_difference_j"]

Energy = float | list[float] | None


def _bounds(e: float | list[float]) -> tuple[float, float]:
    return (e[0], e[1]) if isinstance(e, list) else (e, e)


def energy_difference_j(a: Energy, b: Energy) -> Energy:
    """``a − b`` for energies that may be ranges: an interval when either is one."""
    if a is None or b is None:
        return None
    (a_lo, a_hi), (b_lo, b_hi) = _bounds(a), _bounds(b)
    if not isinstance(a, list) and not isinstance(b, list):
        return a_lo - b_lo
    return [a_lo - b_hi, a_hi - b_lo]


def _row(option: Any, deadline_s: float | None, chosen: Any, baseline: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "site": option.site,
        "margin_s": None if deadline_s is None else deadline_s - option.time_s,
    }
    if chosen is not None:
        row["vs_choice_time_s"] = option.time_s - chosen.time_s
        row["vs_choice_energy_j"] = energy_difference_j(option.energy_j, chosen.energy_j)
    if baseline is not None:
        row["saving_time_s"] = baseline.time_s - option.time_s
        row["saving_energy_j"] = energy_difference_j(baseline.energy_j, option.energy_j)
    return row


def compare_options(plan: Any, baseline: str | None = None) -> list[dict[str, Any]]:
    """One row per option: ``margin_s``, ``vs_choice_*`` and, with a baseline, ``saving_*``."""
    chosen = plan.option(plan.choice) if plan.choice else None
    base = plan.option(baseline) if baseline else None
    deadline = plan.scenario.task.deadline
    return [_row(o, deadline, chosen, base) for o in plan.options]
