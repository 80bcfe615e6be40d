"""Rendering for ``tierwise catalog``."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from tierwise.catalog import Catalog
from tierwise.report.human import format_value
from tierwise.report.jsonout import dumps

_KINDS = {
    "memory_bandwidth": "byte_rate",
    "memory": "size",
    "memory_options": "size",
    "memory_reserve": "size",
    "power": "power",
    "sustained_power": "power",
    "peak_power": "power",
    "dense_bf16": "flop_rate",
    "energy_per_token": "energy",
    "decode_weight_bytes": "size",
    "resident_bytes": "size",
    "kv_bytes_per_token": "size",
    "prefill_flops": "flops",
    "encode_flops": "flops",
}
_SKIP = {"id", "name", "sources", "origin", "architecture"}


def render_catalog(console: Console, cat: Catalog, *, as_json: bool) -> None:
    if as_json:
        console.print_json(dumps(cat.model_dump()))
        return
    for section in ("hardware", "model", "quant"):
        table = Table(title=section, show_lines=True)
        for col in ("id", "fact", "value", "source"):
            table.add_column(col)
        for key, entry in getattr(cat, section).items():
            first = True
            for field, value in entry.model_dump().items():
                if field in _SKIP or value is None or value == ():
                    continue
                label = f"{key}\n[dim]{entry.name}[/]" if first else ""
                if entry.origin != "bundled" and first:
                    label += f"\n[yellow]from {entry.origin}[/]"
                shown = format_value(field, value, _KINDS.get(field))
                table.add_row(label, field, shown, entry.sources.get(field, ""))
                first = False
        console.print(table)
