"""The reproduce report: a rich table, JSON, and a self-contained HTML page with figures."""

from __future__ import annotations

import base64
import html
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tierwise.reproduce._case import Result, Unreproducible

__all__ = ["chapter_figures", "render_html", "render_table", "to_dict"]


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _rows(results: Sequence[Result]) -> Iterable[tuple[str, str, str, str, str]]:
    for r in results:
        computed = r.error if r.error else _show(r.computed)
        yield r.case.section, r.case.quantity, _show(r.case.printed), computed, r.agrees


def render_table(
    console: Console, results: Sequence[Result], skipped: Sequence[Unreproducible]
) -> None:
    """Section, quantity, printed, computed, agreement; then what cannot be reproduced."""
    agree = sum(r.agrees for r in results)
    table = Table(title=f"chapter 12 reproduced: {agree} of {len(results)} numbers agree")
    for col in ("section", "quantity", "printed", "computed", "agrees"):
        table.add_column(col, justify="right" if col in ("printed", "computed") else "left")
    for section, quantity, printed, computed, ok in _rows(results):
        table.add_row(section, quantity, printed, computed, "yes" if ok else "[red]NO[/]")
    console.print(table)
    if skipped:
        rest = Table(title="printed numbers that do not follow from the chapter's inputs")
        for col in ("section", "quantity", "printed", "reason"):
            rest.add_column(col)
        for u in skipped:
            rest.add_row(u.section, u.quantity, u.printed, u.reason)
        console.print(rest)


def to_dict(results: Sequence[Result], skipped: Sequence[Unreproducible]) -> dict[str, Any]:
    """The report as JSON-ready data (computed values as the API returned them)."""
    return {
        "summary": {"cases": len(results), "agree": sum(r.agrees for r in results)},
        "cases": [
            {
                "section": r.case.section,
                "quantity": r.case.quantity,
                "printed": r.case.printed,
                "computed": r.computed,
                "agrees": r.agrees,
                **({"error": r.error} if r.error else {}),
            }
            for r in results
        ],
        "unreproducible": [u.__dict__ for u in skipped],
    }


# Computed figures of the chapter, by the bundled example the planner redraws them from.
FIGURES = {
    "fig-12-05-12-07-voice-stream": "voice-stream",  # §12.1.2 playout and buffer
    "fig-12-28-12-31-deployment": "deployment",  # §12.5.2 breakdown and uplink
}


def chapter_figures(folder: Path) -> list[Path]:
    """The chapter's computed figures redrawn from the planner (PNG and SVG), one folder each."""
    from tierwise.report.figures import plan_figures
    from tierwise.reproduce._case import plan_example

    saved: list[Path] = []
    for name, example in FIGURES.items():
        saved += plan_figures(plan_example(example), Path(folder) / name)
    return saved


def _figure_html(paths: Sequence[Path]) -> str:
    parts = []
    for p in paths:
        if p.suffix == ".png":
            data = base64.b64encode(p.read_bytes()).decode("ascii")
            label = html.escape(f"{p.parent.name}: {p.stem}")
            parts.append(
                f'<figure><img alt="{label}" src="data:image/png;base64,{data}">'
                f"<figcaption>{label}</figcaption></figure>"
            )
    return "\n".join(parts)


def render_html(results: Sequence[Result], skipped: Sequence[Unreproducible]) -> str:
    """A self-contained page: the table, the unreproducible list and the redrawn figures."""
    agree = sum(r.agrees for r in results)
    rows = "\n".join(
        f"<tr class={'ok' if ok else 'bad'}><td>{html.escape(s)}</td><td>{html.escape(q)}</td>"
        f"<td>{html.escape(p)}</td><td>{html.escape(c)}</td><td>{'yes' if ok else 'NO'}</td></tr>"
        for s, q, p, c, ok in _rows(results)
    )
    rest = "\n".join(
        f"<tr><td>{html.escape(u.section)}</td><td>{html.escape(u.quantity)}</td>"
        f"<td>{html.escape(u.printed)}</td><td>{html.escape(u.reason)}</td></tr>"
        for u in skipped
    )
    with tempfile.TemporaryDirectory() as tmp:
        figures = _figure_html(chapter_figures(Path(tmp)))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tierwise reproduce</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px}}tr.bad{{background:#fdd}}
img{{max-width:48em}}</style></head><body>
<h1>Chapter 12 reproduced: {agree} of {len(results)} numbers agree</h1>
<table><tr><th>section</th><th>quantity</th><th>printed</th><th>computed</th><th>agrees</th></tr>
{rows}</table>
<h2>Printed numbers that do not follow from the chapter's inputs</h2>
<table><tr><th>section</th><th>quantity</th><th>printed</th><th>reason</th></tr>
{rest}</table>
<h2>The chapter's computed figures, redrawn</h2>
{figures}
</body></html>
"""
