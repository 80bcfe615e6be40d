"""Rendering of a plan: a rich table, the choice, thresholds in words."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from tierwise.units import format_quantity, format_seconds

__all__ = ["comparison_lines", "render_plan", "threshold_text"]

_T = "time"


_t = format_seconds


def _energy(e: Any) -> str:
    if e is None:
        return "—"
    if isinstance(e, list):
        lo, hi = e
        low, unit = format_quantity(lo, "energy").split()
        high, unit_hi = format_quantity(hi, "energy").split()
        return f"{low}–{high} {unit}" if unit == unit_hi else f"{low} {unit}–{high} {unit_hi}"
    return format_quantity(e, "energy")


def _breakdown(parts: dict[str, float]) -> str:
    shown = [f"{k} {_t(v)}" for k, v in parts.items() if abs(v) > 5e-7]
    return "\n".join(shown) or "—"


def _has_tail(plan: Any) -> bool:
    return any("time_p99_s" in o.extra for o in plan.options)


def render_plan(console: Console, plan: Any) -> None:
    task = plan.scenario.task
    deadline = f", deadline {_t(task.deadline)}" if task.deadline is not None else ""
    title = f"{task.name} — {task.kind}{deadline}, objective {plan.scenario.decision.objective}"
    table = Table(title=title, show_lines=True)
    for col, justify in (
        ("site", "left"),
        ("tier", "left"),
        ("feasible", "center"),
        ("time (mean)" if _has_tail(plan) else "time", "right"),
        ("meets deadline", "center"),
        ("energy", "right"),
        ("breakdown", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    shown = _shown(plan)
    for o in (o for o in plan.options if o.site in shown):
        feasible = "yes" if o.feasible else "[red]no[/]\n" + "\n".join(o.reasons)
        meets = {None: "—", True: "[green]yes[/]", False: "[red]no[/]"}[o.meets_deadline]
        detail = _breakdown(o.breakdown_s)
        if "battery_share" in o.extra:
            lo, hi = o.extra["battery_share"]
            detail += f"\nbattery {lo:.1%}–{hi:.1%} of a charge"
        if "cost" in o.extra:  # priced sites (plan.cost)
            detail += f"\ncost {o.extra['cost']:.4g}"
        if o.extra.get("pareto"):
            detail += "\non the time–energy–cost Pareto front"
        for note in o.notes:
            detail += f"\n[dim]{note}[/]"
        style = "bold" if o.site == plan.choice else None
        time = _t(o.time_s)
        if "time_p99_s" in o.extra:
            time += f"\n[dim]p99 {_t(o.extra['time_p99_s'])}[/]"
        table.add_row(
            o.site, o.tier, feasible, time, meets, _energy(o.energy_j), detail, style=style
        )
    if len(shown) < len(plan.options):
        table.caption = (
            f"the {len(shown)} fastest of {len(plan.options):,} sites "
            "(with the choice); every site is in --json"
        )
    console.print(table)
    head = f"[bold green]choice: {plan.choice}[/]" if plan.choice else "[bold red]no choice[/]"
    console.print(f"{head} — {plan.reason}", highlight=False)
    listed = [th for th in plan.thresholds if th["site"] in shown]
    for th in listed:
        console.print(f"  • {threshold_text(th)}", highlight=False)
    if len(listed) < len(plan.thresholds):
        console.print(
            f"  • … {len(plan.thresholds) - len(listed):,} more thresholds of the other "
            "sites in --json",
            highlight=False,
        )
    for line in comparison_lines(plan):
        console.print(line, highlight=False)
    if plan.monte_carlo:
        _render_mc(console, plan.monte_carlo)


MAX_ROWS = 12  # a plan of more sites shows the fastest ones and the choice


def _shown(plan: Any) -> set[str]:
    """Names of the sites the table shows: all of them, or the fastest and the choice."""
    if len(plan.options) <= MAX_ROWS:
        return {o.site for o in plan.options}
    ranked = sorted(plan.options, key=lambda o: (not o.feasible, o.time_s))
    return {o.site for o in ranked[: MAX_ROWS - 1]} | {plan.choice, plan.fastest} - {None}


def _rate(b: float | None) -> str:
    return "any uplink" if not b else format_quantity(b, "rate", digits=3)


def threshold_text(th: dict[str, Any]) -> str:
    """One sentence per threshold."""
    site, floor = th["site"], _t(th["floor_s"]) if "floor_s" in th else ""
    if th["kind"] == "meets_deadline":
        if th["never"]:
            return (
                f"{site} never meets the {_t(th['deadline_s'])} deadline: "
                f"even an infinite uplink leaves {floor}"
            )
        rate = _rate(th["uplink_bytes_per_s"])
        return f"{site} meets the {_t(th['deadline_s'])} deadline from {rate} (floor {floor})"
    if th["kind"] == "faster_than":
        other = f"{th['other']} ({_t(th['other_time_s'])})"
        if th["never"]:
            return f"{site} never beats {other}: its floor is {floor}"
        beats = f"{site} beats {th['other']} ({_t4(th['other_time_s'])})"
        gap = th["other_time_s"] - th["floor_s"]  # §12.5.2's 16.04 s against 14.29 s: 1.75 s
        return (
            f"{beats} from {_rate(th['uplink_bytes_per_s'])} "
            f"(its floor {_t4(th['floor_s'])} is {_t(gap)} under)"
        )
    return (
        f"choice flips at {site} uplink {_rate(th['uplink_bytes_per_s'])}: "
        f"{th['below'] or 'none'} below, {th['above'] or 'none'} above"
    )


def _render_mc(console: Console, mc: dict[str, Any]) -> None:
    table = Table(title=f"Monte Carlo: {mc['trials']:,} trials, seed {mc['seed']}")
    for col in ("site", "P(T ≤ deadline)", "p50", "p99", "mean"):
        table.add_column(col, justify="right" if col != "site" else "left")
    for name, r in mc["sites"].items():
        p = "—" if r.get("p_meet") is None else f"{r['p_meet']:.4f}"
        table.add_row(name, p, _t(r["p50_s"]), _t(r["p99_s"]), _t(r["mean_s"]))
    console.print(table)


def _t4(x: float) -> str:
    """Seconds to four figures, as the chapter prints its calibrated times (16.04 s)."""
    return f"{x:.4g} s" if 1 <= abs(x) < 1000 else _t(x)


def _signed_t(x: float) -> str:
    return ("+" if x >= 0 else "−") + _t(abs(x))


def _signed_e(e: Any) -> str:
    if e is None:
        return "energy unknown"
    if isinstance(e, list):
        lo, hi = e
        return f"{_signed_e(lo)} to {_signed_e(hi)}"
    return ("+" if e >= 0 else "−") + format_quantity(abs(e), "energy")


def _saving(x: Any, fmt: Any, more: str) -> str:
    """'saves 53.0 s' or 'uses 442–604 J more'; a range straddling zero stays signed."""
    if x is None:
        return "unknown"
    lo, hi = (x[0], x[1]) if isinstance(x, list) else (x, x)
    if lo >= 0:
        return f"saves {fmt(x)}"
    if hi <= 0:
        return more.format(fmt([-hi, -lo] if isinstance(x, list) else -x))
    return f"saves between {fmt(lo)} and {fmt(hi)}"


def comparison_lines(plan: Any) -> list[str]:
    """Margins to the deadline, differences to the choice, savings against the baseline."""
    shown = _shown(plan)  # with many sites, the rows of the table only (all in --json)
    base = plan.scenario.decision.baseline
    rows = [r for r in getattr(plan, "comparison", []) if r["site"] in shown | {base}]
    lines: list[str] = []
    margins = [
        f"{r['site']} {_t(r['margin_s'])} to spare"
        if r["margin_s"] >= 0
        else f"{r['site']} late by {_t(-r['margin_s'])}"
        for r in rows
        if r.get("margin_s") is not None
    ]
    if margins:
        lines.append("margin to the deadline: " + " · ".join(margins))
    others = [r for r in rows if r["site"] != plan.choice and "vs_choice_time_s" in r]
    if others:
        diffs = [
            f"{r['site']} {_signed_t(r['vs_choice_time_s'])}, {_signed_e(r['vs_choice_energy_j'])}"
            for r in others
        ]
        lines.append(f"against the choice ({plan.choice}): " + " · ".join(diffs))
    if base is not None:
        saves = [
            f"{r['site']} {_saving(r['saving_time_s'], _t, 'takes {} longer')}, "
            f"{_saving(r['saving_energy_j'], _energy, 'uses {} more energy')}"
            for r in rows
            if r["site"] != base
        ]
        lines.append(f"saving against {base}: " + " · ".join(saves))
    return lines
