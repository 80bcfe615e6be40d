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

import dataclasses
import math
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from tierwise.figsave import new_figure, save_figure
from tierwise.model.loop import harmonic_mean_rate
from tierwise.model.stream import STALL_RESOLUTION_S
from tierwise.plan.options import Option
from tierwise.plan.planner import Plan
from tierwise.units import format_quantity, format_seconds

__all__ = ["buffer_curve", "plan_figures", "stall_intervals", "uplink_sites"]

UPLINK_SPAN = 30.0  # the uplink sweep runs from 1/30× to 30× the current uplink
UPLINK_POINTS = 200
MBIT_PER_S = 1e6 / 8  # bytes/s in one Mbit/s
TINY_S = 1e-9  # stage totals and gaps below this are rounding, not time
MAX_DRAWN_S = 1e30  # beyond this (an overflowed model) an axis cannot be scaled: not drawn

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
    "handshake": ("handshake", "#e377c2"),
    "window_wait": ("window wait", "#ffbb78"),
    "recovery": ("loss recovery", "#aec7e8"),
    "disconnect": ("disconnect recovery", "#d62728"),
    "overlap": ("waiting", "#c7c7c7"),
    "first_play": ("until first play", "#bcbd22"),
    "playback": ("playback", "#2ca02c"),
    "stall": ("stall", "#d62728"),
}
OTHER_STAGE_COLOURS = ("#e377c2", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a")
# Red is kept for stalls, late chunks and missed deadlines.
SITE_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
INFEASIBLE_ALPHA = 0.25
GREY_TEXT = "#777777"
LATE = "#d62728"  # stalls, late chunks
OVERLAP_COLOUR = "#333333"
BAR_HEIGHT = 0.6  # of one row


# ----------------------------------------------------------------------------- entry


def plan_figures(plan: Plan, folder: Path) -> list[Path]:
    """Draw every figure that fits ``plan``'s task into ``folder``; the paths written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    plan = dataclasses.replace(plan, options=[o for o in plan.options if _drawable(o)])
    if not plan.options:
        return []
    figures: list[tuple[str, Callable[[Plan], Figure]]] = [("breakdown", breakdown_figure)]
    if uplink_sites(plan):
        figures.append(("uplink", uplink_figure))
    if plan.scenario.task.kind == "stream" and _stream_options(plan):
        figures += [("playout", playout_figure), ("buffer", buffer_figure)]
    saved: list[Path] = []
    for name, draw in figures:
        saved += save_figure(draw(plan), folder, name)
    return saved


def _drawable(option: Option) -> bool:
    """Whether matplotlib can scale an axis to ``option`` (an overflowed time cannot be drawn)."""
    values = [option.time_s, *option.breakdown_s.values()]
    return all(math.isfinite(v) and abs(v) < MAX_DRAWN_S for v in values)


def _time_scale(max_s: float) -> tuple[float, str]:
    """(factor, unit) to show times up to ``max_s``: milliseconds below one second."""
    return (1e3, "ms") if max_s < 1.0 else (1.0, "s")


def _site_colour(plan: Plan, site: str) -> str:
    names = [o.site for o in plan.options]
    return SITE_COLOURS[names.index(site) % len(SITE_COLOURS)]


def _deadline_text(deadline_s: float) -> str:
    return f"deadline {format_quantity(deadline_s, 'time')}"


# ------------------------------------------------------------------------- breakdown


def _stage_style(stage: str, stages: list[str]) -> tuple[str, str]:
    """(legend label, colour) of a stage; stages we do not know get spare colours."""
    if stage in STAGES:
        return STAGES[stage]
    unknown = [k for k in stages if k not in STAGES]
    return stage, OTHER_STAGE_COLOURS[unknown.index(stage) % len(OTHER_STAGE_COLOURS)]


def _ordered_stages(options: Sequence[Option]) -> list[str]:
    seen = {k for o in options for k in o.breakdown_s}
    return [k for k in STAGES if k in seen] + sorted(seen - STAGES.keys())


def breakdown_figure(plan: Plan) -> Figure:
    """Stage totals per site as stacked bars on one time axis (figures 12-28 to 12-30).

    Each bar stacks the option's ``breakdown_s`` in a fixed stage order with one
    colour per stage. A negative ``overlap`` (chunked requests: later uploads
    run while earlier chunks compute and download) is not a stage: the stages
    are stacked at full length, their last ``|overlap|`` is hatched over and a
    bold tick marks where the task really ends, so every stage stays visible
    and the bar's solid part ends at the task's time.
    """
    options, task = plan.options, plan.scenario.task
    top_s = max([*(max(o.time_s, _positive_sum(o)) for o in options), task.deadline or 0.0])
    scale, unit = _time_scale(top_s)
    fig = new_figure(10.0, 1.9 + 0.75 * len(options))
    ax = fig.add_subplot()
    stages = _ordered_stages(options)
    for row, option in enumerate(options):
        _draw_bar(ax, row, option, stages, scale, option.site == plan.choice)
    _bar_axes(ax, plan, scale, unit, top_s)
    _bar_legend(fig, stages, options, task.deadline)
    return fig


def _positive_sum(option: Option) -> float:
    return sum(v for v in option.breakdown_s.values() if v > TINY_S)


def _stage_widths(option: Option, stages: list[str]) -> list[tuple[str, float]]:
    return [(k, option.breakdown_s[k]) for k in stages if option.breakdown_s.get(k, 0.0) > TINY_S]


def _draw_bar(
    ax: Axes, row: int, option: Option, stages: list[str], scale: float, chosen: bool
) -> None:
    """Stack ``option``'s stages on ``row``, mark any overlap, and label the bar's end."""
    alpha = 1.0 if option.feasible else INFEASIBLE_ALPHA
    edge = {"edgecolor": "black", "linewidth": 1.6} if chosen else {"edgecolor": "white"}
    left = 0.0
    for stage, width in _stage_widths(option, stages):
        colour = _stage_style(stage, stages)[1]
        ax.barh(
            row,
            width * scale,
            left=left * scale,
            height=BAR_HEIGHT,
            color=colour,
            alpha=alpha,
            **edge,
        )
        left += width
    overlap = option.breakdown_s.get("overlap", 0.0)
    if overlap < -TINY_S:
        ax.barh(
            row,
            -overlap * scale,
            left=option.time_s * scale,
            height=BAR_HEIGHT,
            facecolor="none",
            hatch="///",
            edgecolor=OVERLAP_COLOUR,
            linewidth=0,
        )
        half = BAR_HEIGHT / 2 + 0.06
        ax.plot(
            [option.time_s * scale] * 2,
            [row - half, row + half],
            color="black",
            linewidth=2.5,
            solid_capstyle="butt",
        )
    _bar_label(ax, row, option, max(left, option.time_s) * scale, left)


def _bar_label(ax: Axes, row: int, option: Option, end: float, stages_s: float) -> None:
    text = format_seconds(option.time_s)
    if option.time_s < stages_s - TINY_S:
        text += (
            f"\n(stages sum to {format_seconds(stages_s)}, "
            f"{format_seconds(stages_s - option.time_s)} overlapped)"
        )
    if option.meets_deadline is False:
        text += "  misses the deadline"
    if not option.feasible:
        reason = textwrap.shorten("; ".join(option.reasons), 60, placeholder="…")
        text += f"\ninfeasible: {reason}"
    colour = "#b22222" if option.meets_deadline is False else "black"
    ax.annotate(
        text,
        (end, row),
        xytext=(5, 0),
        textcoords="offset points",
        va="center",
        ha="left",
        fontsize=9,
        color=colour if option.feasible else GREY_TEXT,
    )


def _site_label(option: Option) -> str:
    return option.site if option.site == option.tier else f"{option.site} ({option.tier})"


def _bar_axes(ax: Axes, plan: Plan, scale: float, unit: str, top_s: float) -> None:
    chosen = [o.site == plan.choice for o in plan.options]
    labels = [
        _site_label(o) + ("\nchosen" if c else "")
        for o, c in zip(plan.options, chosen, strict=True)
    ]
    ax.set_yticks(range(len(labels)), labels)
    for tick, o, c in zip(ax.get_yticklabels(), plan.options, chosen, strict=True):
        tick.set_fontweight("bold" if c else "normal")
        tick.set_color("black" if o.feasible else GREY_TEXT)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    overlapped = any(o.breakdown_s.get("overlap", 0.0) < -TINY_S for o in plan.options)
    ax.set_xlim(0, top_s * scale * (1.45 if overlapped else 1.3))  # room for the end labels
    ax.set_xlabel(f"whole-task time ({unit})")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    deadline = plan.scenario.task.deadline
    if deadline is not None:
        ax.axvline(deadline * scale, color="black", linestyle="--", linewidth=1.2)
    ax.set_title(f"{plan.scenario.task.name}: where the time goes, by site ({unit})")


def _bar_legend(
    fig: Figure, stages: list[str], options: list[Option], deadline: float | None
) -> None:
    drawn = {k for o in options for k, _ in _stage_widths(o, stages)}
    handles: list[Any] = [
        Patch(color=colour, label=label)
        for label, colour in (_stage_style(k, stages) for k in stages if k in drawn)
    ]
    if any(o.breakdown_s.get("overlap", 0.0) < -TINY_S for o in options):
        handles.append(
            Patch(
                facecolor="white",
                edgecolor=OVERLAP_COLOUR,
                hatch="///",
                label="overlapped: runs concurrently, not added",
            )
        )
    if deadline is not None:
        handles.append(
            Line2D([], [], color="black", linestyle="--", label=_deadline_text(deadline))
        )
    if not handles:  # every stage 0 s (rounds = 0) and no deadline: nothing to name
        return
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncol=min(4, len(handles)),
        fontsize=9,
        frameon=False,
    )


# ---------------------------------------------------------------------------- uplink


def uplink_sites(plan: Plan) -> list[Option]:
    """Feasible remote options whose time depends on their uplink (they upload something)."""
    with_thresholds = {th["site"] for th in plan.thresholds}
    sites = {s.name: s for s in plan.scenario.site}
    chosen = []
    for o in plan.options:
        site = sites[o.site]
        uploads = o.breakdown_s.get("upload", 0.0) > TINY_S or o.site in with_thresholds
        if o.feasible and site.remote and site.uplink is not None and uploads:
            chosen.append(o)
    return chosen


def _current_uplink(plan: Plan, site_name: str) -> float:
    """The site's uplink (bytes/s); per-round rates become their harmonic mean (§12.5.2)."""
    site = next(s for s in plan.scenario.site if s.name == site_name)
    up = site.uplink
    return harmonic_mean_rate(up) if isinstance(up, list) else float(up)


def uplink_figure(plan: Plan) -> Figure:
    """Whole-task time against each remote site's uplink, all else fixed (figure 12-31).

    One panel per remote site that uploads, because each threshold varies one
    site's uplink alone: the site's time over 1/30× to 30× its current uplink
    (widened to show every threshold found), its floor — the time with an
    infinitely fast uplink — dotted, every other feasible site as a horizontal
    line (this uplink does not change their time), the deadline dashed, and
    the thresholds of ``plan.thresholds`` marked and named in the legend.
    """
    options = uplink_sites(plan)
    fig = new_figure(11.0, 0.5 + 3.9 * len(options))
    axes = fig.subplots(len(options), 1, squeeze=False)[:, 0]
    for ax, option in zip(axes, options, strict=True):
        _uplink_panel(ax, plan, option)
    fig.suptitle(f"{plan.scenario.task.name}: whole-task time vs uplink")
    return fig


def _sweep(b0: float, thresholds: list[dict[str, Any]]) -> np.ndarray:
    """Uplinks (bytes/s) from b0/30 to 30·b0, widened to include the thresholds."""
    found = [th["uplink_bytes_per_s"] for th in thresholds if th["uplink_bytes_per_s"]]
    lo = min([b0 / UPLINK_SPAN, *(0.7 * b for b in found)])
    hi = max([b0 * UPLINK_SPAN, *(1.4 * b for b in found)])
    return np.geomspace(lo, hi, UPLINK_POINTS)


def _uplink_panel(ax: Axes, plan: Plan, option: Option) -> None:
    name, colour = option.site, _site_colour(plan, option.site)
    b0 = _current_uplink(plan, name)
    ths = [th for th in plan.thresholds if th["site"] == name]
    rates = _sweep(b0, ths)
    times = np.array([plan.time_at_uplink(name, b) for b in rates])
    floor_s = plan.time_at_uplink(name, math.inf)
    refs = [option.time_s, *(o.time_s for o in _others(plan, name))]
    deadline = plan.scenario.task.deadline
    top_s = max(1.15 * max([*refs, deadline or 0.0]), min(2.5 * option.time_s, times.max()))
    scale, unit = _time_scale(top_s)
    x = rates / MBIT_PER_S
    ax.plot(x, times * scale, color=colour, linewidth=2.2, label=_site_label(option))
    ax.axhline(
        floor_s * scale,
        color=colour,
        linestyle=":",
        linewidth=1.5,
        label=f"{name} floor {format_seconds(floor_s)} (instant upload)",
    )
    ax.plot(
        b0 / MBIT_PER_S,
        option.time_s * scale,
        "o",
        color=colour,
        markersize=8,
        markeredgecolor="black",
        label=f"now: {_rate(b0)} → {format_seconds(option.time_s)}",
    )
    _reference_lines(ax, plan, name, scale)
    for th in ths:
        _threshold_mark(ax, th, colour, scale)
    _uplink_axes(ax, option, x, top_s * scale, unit)


def _others(plan: Plan, name: str) -> list[Option]:
    return [o for o in plan.options if o.site != name and o.feasible]


def _rate(bytes_per_s: float) -> str:
    return format_quantity(bytes_per_s, "rate", digits=3)


def _reference_lines(ax: Axes, plan: Plan, name: str, scale: float) -> None:
    """The other feasible sites and the deadline, which this site's uplink leaves unchanged."""
    for o in _others(plan, name):
        own = "no uplink" if o.tier == "device" else "its own uplink"
        ax.axhline(
            o.time_s * scale,
            color=_site_colour(plan, o.site),
            linewidth=1.3,
            alpha=0.8,
            label=f"{_site_label(o)}: {format_seconds(o.time_s)}, {own}",
        )
    deadline = plan.scenario.task.deadline
    if deadline is not None:
        ax.axhline(
            deadline * scale,
            color="black",
            linestyle="--",
            linewidth=1.2,
            label=_deadline_text(deadline),
        )


def _threshold_mark(ax: Axes, th: dict[str, Any], colour: str, scale: float) -> None:
    """One threshold: a marker where it lies on the plot, its sentence in the legend."""
    b = th["uplink_bytes_per_s"]
    x = b / MBIT_PER_S if b else None
    kind = th["kind"]
    if kind == "choice_flip":
        below, above = th["below"] or "no site", th["above"] or "no site"
        ax.axvline(
            x,
            color="#555555",
            linestyle="-.",
            linewidth=1.1,
            label=f"choice: {below} below, {above} above {_rate(b)}",
        )
        return
    target_s, what = _threshold_target(th)
    if th["never"]:
        text = f"never {what}: floor {format_seconds(th['floor_s'])}"
        ax.plot([], [], " ", label=text)
    elif not b:
        ax.plot([], [], " ", label=f"{what} at any uplink")
    else:
        marker = "s" if kind == "meets_deadline" else "^"
        ax.plot(
            x,
            target_s * scale,
            marker,
            markersize=9,
            markerfacecolor="white",
            markeredgecolor=colour,
            markeredgewidth=2,
            label=f"{what} from {_rate(b)}",
        )


def _threshold_target(th: dict[str, Any]) -> tuple[float, str]:
    if th["kind"] == "meets_deadline":
        return th["deadline_s"], f"meets the {format_quantity(th['deadline_s'], 'time')} deadline"
    other = f"{th['other']} ({format_seconds(th['other_time_s'])})"
    return th["other_time_s"], f"faster than {other}"


def _uplink_axes(ax: Axes, option: Option, x: np.ndarray, top: float, unit: str) -> None:
    ax.set_xscale("log")
    ax.set_xlim(x[0], x[-1])
    ax.set_ylim(0, top)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel(f"{option.site} uplink (Mbit/s, log scale)")
    ax.set_ylabel(f"whole-task time ({unit})")
    ax.grid(which="major", alpha=0.3)
    ax.set_title(f"{_site_label(option)}: its uplink varies, everything else fixed", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8.5, frameon=False)


# ---------------------------------------------------------------------------- stream


def _stream_options(plan: Plan) -> list[Option]:
    return [o for o in plan.options if "arrive_s" in o.extra and "play_s" in o.extra]


def stall_intervals(play_s: Sequence[float], period_s: float) -> list[tuple[int, float, float]]:
    """(chunk, start, end) of each wait before a chunk plays: ``p_i > p_{i−1} + τ`` (§12.1.2)."""
    play = np.asarray(play_s, dtype=float)
    ends = play[:-1] + period_s
    gaps = play[1:] - ends
    return [
        (i + 1, float(ends[i]), float(play[i + 1]))
        for i in np.flatnonzero(gaps > STALL_RESOLUTION_S)
    ]


def buffer_curve(
    arrive_s: Sequence[float], play_s: Sequence[float], period_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Buffered audio (seconds of audio) over time, exact at every breakpoint (figure 12-7).

    ``B(t) = τ·#{r_i ≤ t} − Σ_i clip(t − p_i, 0, τ)``: a step of τ at each
    arrival, a drain of 1 s/s while a chunk plays, flat while playback stalls.
    Returns times with each breakpoint twice (left and right limit), so the
    steps are vertical when drawn as a line.
    """
    arrive = np.sort(np.asarray(arrive_s, dtype=float))
    play = np.asarray(play_s, dtype=float)
    ts = np.unique(np.concatenate([[0.0], arrive, play, play + period_s]))
    started = np.searchsorted(play, ts, side="right")
    finished = np.searchsorted(play + period_s, ts, side="right")
    # Rounding can leave two chunks both "playing" for an instant at a boundary.
    partial = sum(
        np.where(started > finished + k, _clip_play(ts, play, finished + k, period_s), 0.0)
        for k in (0, 1)
    )
    played = period_s * finished + partial
    before = period_s * np.searchsorted(arrive, ts, side="left") - played
    after = period_s * np.searchsorted(arrive, ts, side="right") - played
    return np.repeat(ts, 2), np.column_stack([before, after]).ravel()


def _clip_play(ts: np.ndarray, play: np.ndarray, index: np.ndarray, period_s: float):
    return np.clip(ts - play[np.minimum(index, play.size - 1)], 0.0, period_s)


def playout_figure(plan: Plan) -> Figure:
    """Per chunk: arrival, actual and planned playback, stalls (figures 12-5 and 12-6).

    The planned schedule is ``p_0 + iτ``: every chunk on time after the first.
    Chunks are numbered from 0, as in ``propagation_overrides``.
    """
    options, task = _stream_options(plan), plan.scenario.task
    period = float(task.period)
    scale, unit = _time_scale(max(o.time_s for o in options))
    n = len(options[0].extra["arrive_s"])
    panel_in = 1.3 + min(0.3 * n, 5.0)
    fig = new_figure(10.5, 0.6 + panel_in * len(options))
    axes = fig.subplots(len(options), 1, squeeze=False, sharex=True)[:, 0]
    for ax, option in zip(axes, options, strict=True):
        _playout_panel(ax, option, period, scale, _site_colour(plan, option.site))
    axes[-1].set_xlabel(f"time since capture of the first chunk began ({unit})")
    axes[-1].set_xlim(0, max(o.time_s for o in options) * scale * 1.02)
    _panels_legend(axes, PLAYOUT_LEGEND)
    fig.suptitle(
        f"{task.name}: chunk arrival and playback ({unit}), {n} chunks of {format_seconds(period)}"
    )
    return fig


PLAYOUT_LEGEND = (
    "planned playback p₀ + iτ",
    "actual playback",
    "stall: playback waits for a late chunk",
    "arrival",
    "arrival after its planned start",
    "waiting in the buffer",
)


def _playout_panel(ax: Axes, option: Option, period: float, scale: float, colour: str) -> None:
    """One site's chunks: planned outline, actual segment, stalls, arrivals, buffer waits."""
    arrive = np.asarray(option.extra["arrive_s"], dtype=float)
    play = np.asarray(option.extra["play_s"], dtype=float)
    rows = np.arange(arrive.size)
    planned = play[0] + period * rows
    width = period * scale
    ax.barh(
        rows,
        width,
        left=planned * scale,
        height=0.75,
        facecolor="none",
        edgecolor="#9e9e9e",
        linestyle="--",
        label=PLAYOUT_LEGEND[0],
    )
    ax.barh(rows, width, left=play * scale, height=0.45, color=colour, label=PLAYOUT_LEGEND[1])
    _stall_bars(ax, play, period, scale)
    late = arrive > planned + STALL_RESOLUTION_S
    for mask, dot, text in ((~late, "black", PLAYOUT_LEGEND[3]), (late, LATE, PLAYOUT_LEGEND[4])):
        if mask.any():
            ax.scatter(arrive[mask] * scale, rows[mask], s=26, color=dot, zorder=3, label=text)
    wait = play > arrive
    ax.hlines(
        rows[wait],
        arrive[wait] * scale,
        play[wait] * scale,
        color="#bbbbbb",
        linewidth=1,
        zorder=1,
        label=PLAYOUT_LEGEND[5],
    )
    _playout_axes(ax, option, rows)


def _stall_bars(ax: Axes, play: np.ndarray, period: float, scale: float) -> None:
    stalls = np.array(stall_intervals(play, period)).reshape(-1, 3)
    if stalls.size:
        ax.barh(
            stalls[:, 0],
            (stalls[:, 2] - stalls[:, 1]) * scale,
            left=stalls[:, 1] * scale,
            height=0.45,
            color=LATE,
            hatch="xx",
            edgecolor="white",
            label=PLAYOUT_LEGEND[2],
        )


def _panels_legend(axes: Sequence[Axes], order: Sequence[str]) -> None:
    """One legend beside the first panel for all of them, entries in ``order`` (others last)."""
    found: dict[str, Any] = {}
    for ax in axes:
        for handle, text in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(text, handle)
    rank = {text: i for i, text in enumerate(order)}
    texts = sorted(found, key=lambda t: rank.get(t, len(rank)))
    axes[0].legend(
        [found[t] for t in texts],
        texts,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=8.5,
        frameon=False,
    )


def _playout_axes(ax: Axes, option: Option, rows: np.ndarray) -> None:
    if rows.size <= 24:
        ax.set_yticks(rows)
    ax.set_ylim(rows[-1] + 0.7, -0.7)
    ax.set_ylabel("chunk")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    state = "" if option.feasible else " — infeasible"
    ax.set_title(
        f"{_site_label(option)}{state}: first play "
        f"{format_seconds(option.extra['first_play_s'])}, stalls "
        f"{format_seconds(option.extra['stall_s'])} in total",
        fontsize=10,
    )


def buffer_figure(plan: Plan) -> Figure:
    """Buffered audio over time, one line per site, stalls shaded (figure 12-7).

    Audio that has arrived but not yet played counts as buffered even when an
    earlier chunk is still missing, so a stall can happen with a non-empty buffer.
    """
    options, task = _stream_options(plan), plan.scenario.task
    period = float(task.period)
    scale, unit = _time_scale(max(o.time_s for o in options))
    fig = new_figure(10.5, 4.3)
    ax = fig.add_subplot()
    for option in options:
        _buffer_line(ax, option, period, scale, _site_colour(plan, option.site))
    ax.set_xlim(0, max(o.time_s for o in options) * scale * 1.02)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"time since capture of the first chunk began ({unit})")
    ax.set_ylabel(f"buffered audio ({unit} of audio)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8.5, frameon=False)
    ax.set_title(f"{task.name}: buffered audio over time ({unit})")
    return fig


def _buffer_line(ax: Axes, option: Option, period: float, scale: float, colour: str) -> None:
    arrive, play = option.extra["arrive_s"], option.extra["play_s"]
    t, level = buffer_curve(arrive, play, period)
    ax.plot(t * scale, level * scale, color=colour, linewidth=2, label=f"{option.site}")
    first = option.extra["first_play_s"]
    at_first = level[np.searchsorted(t, first, side="right") - 1]
    ax.plot(
        first * scale,
        at_first * scale,
        "v",
        color=colour,
        markersize=9,
        markeredgecolor="black",
        label=f"{option.site}: playback starts ({format_seconds(first)})",
    )
    for k, (_, start, end) in enumerate(stall_intervals(play, period)):
        ax.axvspan(
            start * scale,
            end * scale,
            color=LATE,
            alpha=0.15,
            linewidth=0,
            label=f"{option.site}: stall" if k == 0 else None,
        )
