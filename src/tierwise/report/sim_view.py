"""Rendering of ``tierwise sim`` results."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from tierwise.units import format_quantity, format_seconds

__all__ = ["render_sim"]


def _render_generic(console: Console, result: dict[str, Any]) -> None:
    from tierwise.report.human import format_value

    title = f"simulated {result['kind']} — {result['runs']} run(s) from seed {result['seed']}"
    table = Table(title=title)
    table.add_column("quantity", style="bold")
    table.add_column("value", justify="right")
    table.add_row("time (mean)", _s(result["time_s"]))
    for key in ("p50_s", "p99_s", "min_s", "max_s"):
        if key in result:
            table.add_row(key.removesuffix("_s"), _s(result[key]))
    for key, value in result["first_run"].items():
        if key != "time_s":
            table.add_row(f"{key} (first run)", format_value(key, value))
    console.print(table)


def _s(x: float) -> str:
    """Simulated times to the microsecond: they are exact, not estimates."""
    return f"{x:.6f} s" if x >= 1 else format_seconds(x)


def _render_flows(console: Console, result: dict[str, Any]) -> None:
    """One row per competing flow, then Jain's index over their goodputs."""
    run = result["first_run"]
    title = (
        f"{len(run['flows'])} competing flows — {result['runs']} run(s) from seed "
        f"{result['seed']} (rows: first run)"
    )
    table = Table(title=title)
    for col in ("flow", "cc", "start", "goodput", "share", "queue p50", "p99", "done in", "retx"):
        table.add_column(col, justify="left" if col in ("flow", "cc") else "right")
    for i, f in enumerate(run["flows"]):
        done = _s(f["completion_s"]) if f["completion_s"] is not None else "—"
        table.add_row(
            str(i),
            f["cc"] if f["transport"] == "tcp" else "relay",
            format_seconds(f["start_s"]),
            format_quantity(f["goodput_bytes_per_s"], "rate"),
            f"{f['share']:.1%}",
            format_seconds(f["queue_p50_s"]),
            format_seconds(f["queue_p99_s"]),
            done,
            f"{f['retransmissions']:,}",
        )
    console.print(table)
    jain = f"Jain's fairness index: {run['jain_index']:.4f}"
    if result["runs"] > 1:
        jain += f" (mean over {result['runs']} runs: {result['jain_index']:.4f})"
    console.print(f"{jain}; {run['data_packets']:,} data packets, {run['events']:,} events")


def render_sim(console: Console, result: dict[str, Any], trace: str | None) -> None:
    first = result["first_run"]
    if result.get("kind") == "flows":
        _render_flows(console, result)
        return
    if result.get("kind", "request") != "request" or result.get("transport") == "relay":
        _render_generic(console, result)
        return
    title = f"simulated request — {result['runs']} run(s) from seed {result['seed']}"
    table = Table(title=title)
    table.add_column("quantity", style="bold")
    table.add_column("value", justify="right")
    table.add_row("completion (mean)", _s(result["time_s"]))
    for key in ("p50_s", "p99_s", "min_s", "max_s"):
        if key in result:
            table.add_row(key.removesuffix("_s"), _s(result[key]))
    if first.get("upload_done_s") is not None:
        table.add_row("upload received (first run)", _s(first["upload_done_s"]))
    table.add_row("goodput", format_quantity(result["goodput_bytes_per_s"], "rate"))
    table.add_row("events (first run)", f"{first['events']:,}")
    console.print(table)
    per = Table(title="per direction (first run)")
    for col in (
        "direction",
        "segments",
        "retransmissions",
        "RTOs",
        "ACKs",
        "data on wire",
        "ACKs on wire",
        "lost",
        "dropped",
    ):
        per.add_column(col, justify="right" if col != "direction" else "left")
    for name in ("upload", "download"):
        d = first[name]
        per.add_row(
            name,
            f"{d['segments']:,}",
            f"{d['retransmissions']:,}",
            f"{d['rtos']:,}",
            f"{d['acks']:,}",
            f"{d['data_wire_bytes']:,} B",
            f"{d['ack_wire_bytes']:,} B",
            f"{d['link_lost']:,}",
            f"{d['link_dropped']:,}",
        )
    console.print(per)
    total = sum(
        first[n]["data_wire_bytes"] + first[n]["ack_wire_bytes"] for n in ("upload", "download")
    )
    console.print(f"bytes on the wire, both directions: {total:,}")
    if trace:
        console.print(f"[dim]trace: {trace}[/]")
