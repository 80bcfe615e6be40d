"""One request's recorded events as a horizontal timeline (PNG and SVG).

A sample of :mod:`tierwise.lab.experiments.request` holds, in seconds since the run began,
``connect_start``/``connect_end`` (new connections only), ``first_sent``,
``last_sent`` (the kernel *accepted* the last byte), ``first_response`` and
``last_response``. The figure puts the request's start at zero and draws one lane
per phase — connect, send calls, waiting (upload in flight, processing, the
response's first byte on its way), response — with the events marked and labelled,
and a grid of round-trip times behind them so stalls of whole RTTs are easy to count.

Made and saved through :mod:`tierwise.figsave`: a figure on its own Agg canvas, pyplot
never touched, written as PNG and SVG.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tierwise.figsave import new_figure, save_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["PHASES", "save_timeline", "timeline_figure"]

# (lane label, start event, end event, colour), top to bottom.
PHASES = (
    ("TCP handshake", "connect_start", "connect_end", "#e377c2"),
    ("request: send calls\n(kernel accepts bytes)", "first_sent", "last_sent", "#1f77b4"),
    ("upload in flight,\nprocessing, reply on its way", "last_sent", "first_response", "#c7c7c7"),
    ("response read", "first_response", "last_response", "#17becf"),
)
EVENT_LABELS = {
    "connect_start": "connect()",
    "connect_end": "connected",
    "first_sent": "first byte sent",
    "last_sent": "last byte sent",
    "first_response": "first response byte",
    "last_response": "last response byte",
}
BAR_HEIGHT = 0.55


def _start(events: Mapping[str, float]) -> float:
    return events.get("connect_start", events["first_sent"])


def timeline_figure(
    sample: Mapping, *, rtt_s: float | None = None, title: str | None = None
) -> Figure:
    """The timeline of one request ``sample`` (a :class:`Sample` as a dict)."""
    events: Mapping[str, float] = sample["events_s"]
    t0 = _start(events)
    rel = {k: events[k] - t0 for k in EVENT_LABELS if k in events}
    total = max(rel.values())
    scale, unit = (1e3, "ms") if total < 2.0 else (1.0, "s")
    lanes = [p for p in PHASES if p[1] in rel and p[2] in rel]

    fig = new_figure(10, 1.2 + 0.75 * len(lanes))
    ax = fig.add_subplot()
    n = len(lanes)
    for row, (_label, a, b, colour) in enumerate(lanes):
        y = n - 1 - row
        left, width = rel[a] * scale, (rel[b] - rel[a]) * scale
        ax.barh(y, width, left=left, height=BAR_HEIGHT, color=colour, edgecolor="#333333", lw=0.6)
        text = _duration(rel[b] - rel[a])
        inside = width > 0.12 * total * scale
        ax.text(
            left + width / 2 if inside else left + width + 0.005 * total * scale,
            y,
            text,
            ha="center" if inside else "left",
            va="center",
            fontsize=8.5,
        )
    ax.set_yticks(range(n), [lane[0] for lane in reversed(lanes)], fontsize=8.5)
    ax.set_ylim(-0.6, n - 0.4 + 0.55)

    # Events: a dotted line across all lanes, labelled along the top, staggered if close.
    placed: list[float] = []
    for key, label in EVENT_LABELS.items():
        if key not in rel:
            continue
        x = rel[key] * scale
        ax.axvline(x, color="#555555", lw=0.7, ls=":", zorder=0)
        level = sum(1 for p in placed if abs(p - x) < 0.09 * total * scale)
        placed.append(x)
        ax.annotate(
            f"{label} {_duration(rel[key])}",
            (x, n - 0.4),
            xytext=(2, 2 + 10 * level),
            textcoords="offset points",
            fontsize=7.5,
            rotation=0,
            color="#333333",
            annotation_clip=False,
        )

    xlabel = f"time since the request began ({unit})"
    if rtt_s:
        k = 1
        while k * rtt_s <= total * 1.02:
            ax.axvline(k * rtt_s * scale, color="#ff7f0e", lw=0.6, alpha=0.4, zorder=0)
            k += 1
        xlabel += f" · orange lines: multiples of the RTT ({_duration(rtt_s)})"

    ax.set_xlim(0, total * scale * 1.08)
    ax.set_xlabel(xlabel)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    heading = title or f"{sample.get('mode', 'request')} · run {sample.get('run', '?')}"
    ax.set_title(f"{heading} — {_duration(total)} in all", fontsize=10, loc="left", pad=30)
    return fig


def _duration(seconds: float) -> str:
    if seconds < 0.01:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e3:.0f} ms" if seconds < 2.0 else f"{seconds:.2f} s"


def save_timeline(
    sample: Mapping,
    folder: Path,
    name: str,
    *,
    rtt_s: float | None = None,
    title: str | None = None,
) -> list[Path]:
    """Draw ``sample`` into ``folder/<name>.png`` and ``.svg``; the paths written."""
    return save_figure(timeline_figure(sample, rtt_s=rtt_s, title=title), folder, name)
