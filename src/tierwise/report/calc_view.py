"""Rendering for ``tierwise calc``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from tierwise.report.human import format_value
from tierwise.report.jsonout import dumps


def calc_list(console: Console, registry: Mapping[str, Any]) -> None:
    """One line per model."""
    table = Table(title="tierwise calc NAME --param value ... [--json]   (NAME --help: its params)")
    table.add_column("name", style="bold")
    table.add_column("section")
    table.add_column("what it computes")
    for name in sorted(registry):
        entry = registry[name]
        table.add_row(name, entry.section, entry.summary)
    console.print(table)


def calc_help(console: Console, entry: Any) -> None:
    """The parameters of one model, with defaults."""
    console.print(f"[bold]{entry.name}[/] ({entry.section}): {entry.summary}")
    table = Table()
    table.add_column("parameter")
    table.add_column("kind")
    table.add_column("default")
    table.add_column("meaning")
    for p in entry.params:
        default = "(required)" if p.required else str(p.default)
        table.add_row(p.flag, p.kind, default, p.help)
    console.print(table)


def render_calc(console: Console, entry: Any, result: Mapping[str, Any], *, as_json: bool) -> None:
    if as_json:
        console.print_json(dumps({"model": entry.name, "section": entry.section, **result}))
        return
    table = Table(title=f"{entry.name} ({entry.section})")
    table.add_column("quantity", style="bold")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, format_value(key, value))
    console.print(table)
