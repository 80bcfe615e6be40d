"""Figures of a ``tierwise sim`` run with competing flows (PNG and SVG, Agg only).

``flows`` — two panels on one time axis: each flow's goodput over time (bytes
delivered in order per sampling interval, one RTT or a multiple of it) and the
bottleneck's queueing delay, the backlog a packet arriving then waits behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from tierwise.figsave import new_figure, save_figure
from tierwise.report.figures import MBIT_PER_S

__all__ = ["flow_figure", "sim_figures"]

_POINTS = 150  # goodput samples drawn per flow
_LEGEND_MAX = 8  # flows named in the legend; beyond this the lines speak for themselves


def sim_figures(result: dict[str, Any], folder: Path) -> list[Path]:
    """Draw the figures that fit a sim result into ``folder``; the paths written."""
    series = result.get("first_run", {}).get("series")
    if result.get("kind") != "flows" or not series or len(series["time_s"]) < 2:
        return []
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return save_figure(flow_figure(result["first_run"]), folder, "flows")


def flow_figure(run: dict[str, Any]) -> Figure:
    """Per-flow goodput over time above the bottleneck's queueing delay."""
    series, rows = run["series"], run["flows"]
    step = max(1, len(series["time_s"]) // _POINTS)  # goodput over a few RTTs, not one
    t = np.asarray(series["time_s"])[::step]
    fig = new_figure(8.0, 5.5)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    mid = (t[1:] + t[:-1]) / 2
    dt = np.diff(t)
    for i, (row, delivered) in enumerate(zip(rows, series["delivered_bytes"], strict=True)):
        rate = np.diff(np.asarray(delivered, dtype=float)[::step]) / dt / MBIT_PER_S
        label = f"flow {i}: {row['cc']}" if len(rows) <= _LEGEND_MAX else None
        top.plot(mid, rate, lw=1.0 if len(rows) <= _LEGEND_MAX else 0.6, label=label)
    top.set_ylabel("goodput (Mbit/s)")
    top.set_ylim(bottom=0)
    jain = run["jain_index"]
    top.set_title(f"{len(rows)} flows over one bottleneck — Jain's index {jain:.3f}")
    if len(rows) <= _LEGEND_MAX:
        top.legend(loc="upper right", fontsize="small")
    top.grid(alpha=0.3)
    queue_ms = np.asarray(series["queue_delay_s"]) * 1e3
    bottom.plot(series["time_s"], queue_ms, color="#444444", lw=1.0)
    bottom.set_ylabel("queueing delay (ms)")
    bottom.set_xlabel("simulated time (s)")
    bottom.set_ylim(bottom=0)
    bottom.grid(alpha=0.3)
    return fig
