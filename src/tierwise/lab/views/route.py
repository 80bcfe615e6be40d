"""The route world's runs as figures: each request's time per strategy, the changes marked.

``stem`` is ``--plot``'s path without a suffix: the figure is written as
``<stem>.png`` and ``.svg`` (a suffix of ``stem`` is replaced) through
:mod:`tierwise.figsave`, on a figure of its own (pyplot is never touched).
"""

from __future__ import annotations

from pathlib import Path

from tierwise.figsave import new_figure, save_figure
from tierwise.lab.world.loopback import SITES, true_time_s, world
from tierwise.lab.world.namespaces import CHANGES

__all__ = ["plot_loopback", "plot_namespaces"]

DPI = 120


def plot_loopback(runs: dict[str, list[dict]], bodies: list[bytes], stem: Path) -> list[Path]:
    """Per-request time of each strategy and the oracle, the world changes shaded."""
    n = len(bodies)
    fig = new_figure(9, 4.2, layout=None)
    ax = fig.add_subplot()
    spans = [
        (0.25, 1.0, "cloud uplink 3 Mbit/s", 0.06),
        (0.45, 0.6, "edge down", 0.12),
        (0.7, 1.0, "device 3× slower", 0.06),
    ]
    for lo, hi, label, alpha in spans:
        ax.axvspan(n * lo, n * hi, alpha=alpha, color="grey", lw=0)
        ax.text(n * lo + 0.5, 0.98, label, fontsize=7, va="top", transform=ax.get_xaxis_transform())
    oracle = [min(true_time_s(s, world(i, n), len(b)) for s in SITES) for i, b in enumerate(bodies)]
    ax.plot(oracle, "k:", lw=1, label="oracle (model time, no overhead)")
    for name, recs in runs.items():
        ax.plot([r.get("total_s", float("nan")) for r in recs], marker=".", lw=0.8, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("request")
    ax.set_ylabel("time seen by the client (s)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, 0.9))
    fig.tight_layout()
    return save_figure(fig, stem.parent, stem.stem, dpi=DPI)


def plot_namespaces(runs: dict[str, list[dict]], stem: Path) -> list[Path]:
    """Per-request time of each strategy and the measured oracle; world changes shaded."""
    fig = new_figure(9, 4.2, layout=None)
    ax = fig.add_subplot()
    ref = runs["oracle"]
    n = len(ref)
    for label, share in CHANGES.items():
        ax.axvline(n * share, color="grey", lw=0.8, ls="--")
        ax.text(n * share + 0.3, 0.98, label, fontsize=7, va="top",
                transform=ax.get_xaxis_transform())  # fmt: skip
    down = [i for i, r in enumerate(ref) if not r["world"]["edge_up"]]
    if down:
        ax.axvspan(down[0], down[-1] + 1, alpha=0.1, color="grey", lw=0)
    for name, recs in runs.items():
        style = {"color": "k", "ls": ":", "lw": 1.2} if name == "oracle" else {"lw": 0.8}
        ax.plot([r.get("total_s", float("nan")) for r in recs], marker=".", label=name, **style)
    ax.set_yscale("log")
    ax.set_xlabel("request")
    ax.set_ylabel("time seen by the client (s)")
    ax.set_title("kernel TCP through emulated paths (namespaces)", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, 0.9))
    fig.tight_layout()
    return save_figure(fig, stem.parent, stem.stem, dpi=DPI)
