"""A cold request's upload rounds as a figure (PNG and SVG through :mod:`tierwise.figsave`).

The records are :func:`tierwise.lab.experiments.rounds.cold_rounds`'s: upload bytes
arrived at the server against time since ``connect()``, one line per run, with a grid
of round-trip times behind them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tierwise.figsave import new_figure, save_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["rounds_figure", "save_rounds"]


def rounds_figure(results: list[dict], *, rtt_s: float, title: str | None = None) -> Figure:
    """Upload bytes arrived at the server against time since ``connect()``, one line per run.

    ``results`` are :func:`cold_rounds` records. Slow start shows as a staircase of
    bursts one RTT apart; BBR's pacing as sloped stretches.
    """
    fig = new_figure(9, 4.8)
    ax = fig.add_subplot()
    for res in results:
        times = [0.0] + [t for t, _ in res["arrivals_ms"]]
        total = [0.0]
        for _, n in res["arrivals_ms"]:
            total.append(total[-1] + n / 1e3)
        label = res["cc"] + (f", initcwnd {res['initcwnd']}" if res.get("initcwnd") else "")
        ax.step(times, total, where="post", lw=1.4, label=f"{label}: {res['time_s']:.3f} s")
    end = max((r["arrivals_ms"][-1][0] for r in results if r["arrivals_ms"]), default=0.0)
    k = 1
    while k * rtt_s * 1e3 <= end * 1.05:
        ax.axvline(k * rtt_s * 1e3, color="#888888", lw=0.6, ls=":", zorder=0)
        k += 1
    ax.set_xlabel(
        f"time since connect() (ms) · dotted lines: multiples of the RTT ({rtt_s * 1e3:g} ms)"
    )
    ax.set_ylabel("upload bytes arrived at the server (kB)")
    ax.set_xlim(0, end * 1.05 if end else None)
    ax.set_ylim(0, None)
    ax.legend(loc="upper left", fontsize=9, frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(title or "cold request: the upload's rounds on the wire", loc="left", fontsize=10)
    return fig


def save_rounds(
    results: list[dict], folder: Path, name: str, *, rtt_s: float, title: str | None = None
) -> list[Path]:
    """Draw :func:`rounds_figure` into ``folder/<name>.png`` and ``.svg``; the paths."""
    return save_figure(rounds_figure(results, rtt_s=rtt_s, title=title), folder, name)
