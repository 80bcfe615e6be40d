"""The terminal summary of a sweep: where each site wins, and what was written."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tierwise.units import format_seconds

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SweepTally", "render_sweep"]


class SweepTally:
    """Running per-site counts over a sweep's tables (the tables themselves are not kept)."""

    def __init__(self) -> None:
        self.points = 0
        self.sites: dict[str, dict[str, float]] = {}
        self.no_choice = 0

    def add(self, table: pa.Table) -> None:
        """Count ``table``'s rows into the tally (numpy over the columns, no filtering)."""
        import numpy as np

        site = table.column("site").combine_chunks()
        names = site.dictionary.to_pylist()
        code = site.indices.to_numpy()
        n_sites = max(1, len(names))
        col = lambda name: table.column(name).to_numpy()  # noqa: E731
        chosen, feasible, time_s = col("chosen"), col("feasible"), col("time_s")
        meets = table.column("meets_deadline").fill_null(True).to_numpy()
        wins = np.bincount(code, weights=chosen, minlength=n_sites)
        usable = np.bincount(code, weights=feasible & meets, minlength=n_sites)
        self.points += table.num_rows // n_sites
        for k, name in enumerate(names):
            s = self.sites.setdefault(name, {"wins": 0, "ok": 0, "min": np.inf, "max": 0.0})
            t = time_s[code == k]
            s["wins"] += wins[k]
            s["ok"] += usable[k]
            s["min"], s["max"] = min(s["min"], t.min()), max(s["max"], t.max())
        self.no_choice += table.num_rows // n_sites - int(chosen.sum())


def render_sweep(out: Console, tally: SweepTally, notes: list[str], written: list[str]) -> None:
    """Per site: the share of points where it is chosen, is usable, and its time range."""
    table = Table(title=f"sweep of {tally.points:,} points")
    for col in ("site", "chosen at", "feasible and on time at", "time range"):
        table.add_column(col, justify="left" if col == "site" else "right")
    for name, s in tally.sites.items():
        share = lambda k, s=s: f"{s[k] / max(1, tally.points):.1%}"  # noqa: E731
        span = f"{format_seconds(s['min'])} – {format_seconds(s['max'])}"
        table.add_row(name, share("wins"), share("ok"), span)
    out.print(table)
    if tally.no_choice:
        out.print(f"no site chosen at {tally.no_choice:,} points (none feasible and on time)")
    for note in notes:
        out.print(f"[dim]{escape(note)}[/]")
    if written:
        out.print(f"[dim]wrote {escape(', '.join(written))}[/]")
