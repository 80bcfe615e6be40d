"""Every ``--via`` request's time per transport, beside the floor and the goal lines.

Draws :func:`tierwise.lab.experiments.via.run_via_requests`'s record; made and saved
through :mod:`tierwise.figsave` (PNG and SVG).
"""

from __future__ import annotations

from pathlib import Path

from tierwise.figsave import new_figure, save_figure

__all__ = ["plot_vias"]


def plot_vias(result: dict, folder: Path) -> list[Path]:
    """Every request's time per transport, with the floor and the goal lines (1.1, 1.25 × it)."""
    from matplotlib.ticker import FormatStrFormatter

    p = result["parameters"]
    floor = next(iter(result["summary"].values()))["floor_s"]
    fig = new_figure(8, 4.5)
    ax = fig.add_subplot()
    for i, via in enumerate(p["vias"]):
        times = [s["time_s"] for s in result["samples"] if s["via"] == via and s["time_s"]]
        ax.scatter([i + 0.08 * ((k % 5) - 2) for k in range(len(times))], times, s=14, alpha=0.7)
        if times:
            ax.hlines(result["summary"][via]["median_s"], i - 0.3, i + 0.3, color="black")
    for factor, style in ((1.0, "-"), (1.10, "--"), (1.25, ":")):
        ax.axhline(floor * factor, color="#d62728", ls=style, lw=1, label=f"{factor:g} × floor")
    ax.set_xticks(range(len(p["vias"])), p["vias"])
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    ax.set_ylabel("request time (s), log scale")
    ax.set_title(
        f"{p['size_bytes']:,} B up · RTT {p['rtt_s'] * 1e3:g} ms · "
        f"{p['rate_bytes_per_s'] * 8e-6:g} Mbit/s · loss up {p['loss_up']:g}, "
        f"down {p['loss_down']:g} · bar: median"
    )
    ax.legend(loc="upper right", fontsize=8)
    name = f"via-{'-'.join(p['vias'])}-loss{p['loss_up']:g}-{p['loss_down']:g}"
    return save_figure(fig, folder, name)
