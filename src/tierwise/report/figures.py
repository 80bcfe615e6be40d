"""Figures of a plan, saved as PNG and SVG (matplotlib, Agg; pyplot is never touched).

Which figures a plan gets depends on the task:

* ``breakdown`` — always: one stacked horizontal bar of stage totals per site
  on a shared time axis, with the deadline (figures 12-28 to 12-30, §12.5);
* ``uplink`` — when a remote site uploads: whole-task time against that site's
  uplink, with the deadline, the other sites and the thresholds (figure 12-31,
  §12.5.2);
* ``playout`` and ``buffer`` — stream tasks: per-chunk arrival and playback
  against the planned schedule, and the buffered audio over time (figures
  12-5 to 12-7, §12.1.2).

Figures are built on :class:`matplotlib.figure.Figure` with an Agg canvas of
their own, so saving them neither selects a global backend nor leaves figures
registered with pyplot.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter

from tierwise.model.loop import harmonic_mean_rate
from tierwise.plan.options import Option
from tierwise.units import format_quantity, format_seconds

__all__ = ["buffer_curve", "plan_figures", "stall_intervals", "uplink_sites"]

FORMATS = ("png", "svg")
DPI = 150  # PNG resolution; SVG is resolution-free
UPLINK_SPAN = 30.0  # the uplink sweep runs from 1/30× to 30× the current uplink
UPLINK_POINTS = 200
MBIT_PER_S = 1e6 / 8  # bytes/s in one Mbit/s
TINY_S = 1e-9  # stage totals and gaps below this are rounding, not time

# Stage → (legend label, colour), in stacking order; compute is green and
# upload blue as in figures 12-28 to 12-30.
STAGES: dict[str, tuple[str, str]] = {
    "prepare": ("prepare (set-up, prefill)", "#9467bd"),
    "client": ("client work", "#8c8c8c"),
    "compress": ("compress", "#8c564b"),
    "model": ("model compute", "#2ca02c"),
    "propagation": ("propagation", "#ff7f0e"),
    "upload": ("upload", "#1f77b4"),
    "download": ("download", "#17becf"),
    "recovery": ("disconnect recovery", "#d62728"),
    "overlap": ("waiting", "#c7c7c7"),
    "first_play": ("until first play", "#bcbd22"),
    "playback": ("playback", "#2ca02c"),
    "stall": ("stall", "#d62728"),
}
OTHER_STAGE_COLOURS = ("#e377c2", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a")
SITE_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b")
INFEASIBLE_ALPHA = 0.25


# ----------------------------------------------------------------------------- entry


def plan_figures(plan: Any, folder: Path) -> list[Path]:
    """Draw every figure that fits ``plan``'s task into ``folder``; the paths written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[str, Callable[[Any], Figure]]] = [("breakdown", breakdown_figure)]
    if uplink_sites(plan):
        figures.append(("uplink", uplink_figure))
    if plan.scenario.task.kind == "stream" and _stream_options(plan):
        figures += [("playout", playout_figure), ("buffer", buffer_figure)]
    saved: list[Path] = []
    for name, draw in figures:
        saved += _save(draw(plan), folder, name)
    return saved


def _save(fig: Figure, folder: Path, name: str) -> list[Path]:
    paths = [folder / f"{name}.{fmt}" for fmt in FORMATS]
    for path in paths:
        fig.savefig(path, dpi=DPI, metadata=_metadata(path.suffix))
    return paths


def _metadata(suffix: str) -> dict[str, Any]:
    # No creation date: the same plan gives the same SVG bytes.
    return {"Date": None} if suffix == ".svg" else {}


def _figure(width_in: float, height_in: float) -> Figure:
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _time_scale(max_s: float) -> tuple[float, str]:
    """(factor, unit) to show times up to ``max_s``: milliseconds below one second."""
    return (1e3, "ms") if max_s < 1.0 else (1.0, "s")


def _site_colour(plan: Any, site: str) -> str:
    names = [o.site for o in plan.options]
    return SITE_COLOURS[names.index(site) % len(SITE_COLOURS)]


def _deadline_text(deadline_s: float) -> str:
    return f"deadline {format_seconds(deadline_s)}"


# ------------------------------------------------------------------------- breakdown


def _stage_colour(stage: str, extra: list[str]) -> tuple[str, str]:
    if stage in STAGES:
        return STAGES[stage]
    if stage not in extra:
        extra.append(stage)
    return stage, OTHER_STAGE_COLOURS[extra.index(stage) % len(OTHER_STAGE_COLOURS)]


def _ordered_stages(options: Sequence[Option]) -> list[str]:
    seen = {k for o in options for k in o.breakdown_s}
    return [k for k in STAGES if k in seen] + sorted(seen - STAGES.keys())


def breakdown_figure(plan: Any) -> Figure:
    """Stage totals per site as stacked bars on one time axis (figures 12-28 to 12-30).

    Each bar stacks the option's ``breakdown_s`` in a fixed stage order with one
    colour per stage. A negative ``overlap`` (chunked requests, where later
    uploads run while earlier chunks compute and download) cannot be a
    segment: the stages are stacked at full length and the last ``|overlap|``
    of the bar is hatched over, so the solid part ends at the task's time.
    """
    options, task = plan.options, plan.scenario.task
    ends = [max(o.time_s, _positive_sum(o)) for o in options]
    top = max([*ends, task.deadline or 0.0])
    scale, unit = _time_scale(top)
    fig = _figure(10.0, 1.9 + 0.75 * len(options))
    ax = fig.add_subplot()
    stages, extra = _ordered_stages(options), []
    used: dict[str, str] = {}
    for row, option in enumerate(options):
        used |= _draw_bar(ax, row, option, stages, extra, scale, option.site == plan.choice)
    _bar_axes(ax, plan, scale, unit, top)
    _bar_legend(ax, used, options, task.deadline)
    return fig


def _positive_sum(option: Option) -> float:
    return sum(v for v in option.breakdown_s.values() if v > TINY_S)


def _draw_bar(
    ax: Axes,
    row: int,
    option: Option,
    stages: list[str],
    extra: list[str],
    scale: float,
    chosen: bool,
) -> dict[str, str]:
    """Stack ``option``'s stages on ``row``; the stages drawn, as label → colour."""
    alpha = 1.0 if option.feasible else INFEASIBLE_ALPHA
    edge = {"edgecolor": "black", "linewidth": 1.6} if chosen else {"edgecolor": "white"}
    left, used = 0.0, {}
    for stage in stages:
        width = option.breakdown_s.get(stage, 0.0)
        if width <= TINY_S:
            continue
        label, colour = _stage_colour(stage, extra)
        ax.barh(row, width * scale, left=left * scale, height=0.6, color=colour, alpha=alpha, **edge)
        left += width
        used[label] = colour
    overlap = option.breakdown_s.get("overlap", 0.0)
    if overlap < -TINY_S:
        ax.barh(row, -overlap * scale, left=option.time_s * scale, height=0.6, color="white",
                alpha=0.75, hatch="///", edgecolor="#555555", linewidth=0)
    _bar_label(ax, row, option, max(left, option.time_s) * scale)
    return used


def _bar_label(ax: Axes, row: int, option: Option, end: float) -> None:
    text = format_seconds(option.time_s)
    if option.meets_deadline is False:
        text += "  misses the deadline"
    if not option.feasible:
        reason = textwrap.shorten("; ".join(option.reasons), 70, placeholder="…")
        text += f"\ninfeasible: {reason}"
    colour = "black" if option.feasible else "#777777"
    ax.annotate(text, (end, row), xytext=(5, 0), textcoords="offset points",
                va="center", ha="left", fontsize=9, color=colour)


def _bar_axes(ax: Axes, plan: Any, scale: float, unit: str, top_s: float) -> None:
    labels = []
    for o in plan.options:
        mark = "\n(chosen)" if o.site == plan.choice else ""
        labels.append(f"{o.site} · {o.tier}{mark}")
    ax.set_yticks(range(len(labels)), labels)
    for tick, o in zip(ax.get_yticklabels(), plan.options, strict=True):
        tick.set_fontweight("bold" if o.site == plan.choice else "normal")
        tick.set_color("black" if o.feasible else "#777777")
    ax.invert_yaxis()
    ax.set_xlim(0, top_s * scale * 1.3)
    ax.set_xlabel(f"whole-task time ({unit})")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    deadline = plan.scenario.task.deadline
    if deadline is not None:
        ax.axvline(deadline * scale, color="black", linestyle="--", linewidth=1.2)
    ax.set_title(f"{plan.scenario.task.name}: where the time goes, by site ({unit})")


def _bar_legend(ax: Axes, used: dict[str, str], options: list[Option], deadline: float | None):
    handles: list[Any] = [Patch(color=c, label=label) for label, c in used.items()]
    if any(o.breakdown_s.get("overlap", 0.0) < -TINY_S for o in options):
        handles.append(Patch(facecolor="white", edgecolor="#555555", hatch="///",
                             label="overlapped (runs concurrently, not added)"))
    if deadline is not None:
        handles.append(Line2D([], [], color="black", linestyle="--",
                              label=_deadline_text(deadline)))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18 - 0.02),
              ncol=min(4, len(handles)), fontsize=9, frameon=False)
