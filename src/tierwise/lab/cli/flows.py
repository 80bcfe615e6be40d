"""``tierwise lab flows``: competing kernel TCP flows on one emulated bottleneck.

Options are parsed here (bad input: one line, exit 2, through :class:`ScenarioError`
or :class:`LabError`); :mod:`tierwise.lab.experiments.flows` runs the experiment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from tierwise.errors import ScenarioError, shown
from tierwise.lab.cli.common import out, parse_option, parse_time, progress, write_record

if TYPE_CHECKING:
    from tierwise.lab.experiments.flows import FlowsExperiment

__all__ = ["build_flows", "flows_command", "render_flows"]


def flows_command(
    cc: Annotated[
        str, typer.Option("--cc", help="One kernel congestion control per flow: reno,cubic,bbr.")
    ] = "cubic,bbr",
    start: Annotated[
        str | None,
        typer.Option("--start", help="Start offset per flow, e.g. '0s,10s' (default: all at 0)."),
    ] = None,
    duration: Annotated[
        str, typer.Option("--duration", help="Length of the run, e.g. '240s'.")
    ] = "60s",
    rtt: Annotated[str, typer.Option("--rtt", help="Round-trip time, e.g. '100ms'.")] = "100ms",
    rate: Annotated[str, typer.Option("--rate", help="Bottleneck rate each way.")] = "20Mbit/s",
    queue_packets: Annotated[
        int,
        typer.Option(
            "--queue-packets",
            min=1,
            help="Drop-tail queue in packets of --packet-bytes (615 = 3 BDP).",
        ),
    ] = 615,
    packet_bytes: Annotated[
        int,
        typer.Option(
            "--packet-bytes",
            min=1,
            help="Wire size the queue is counted in (1,168 B + 54 B headers).",
        ),
    ] = 1222,
    mss: Annotated[int, typer.Option("--mss", help="TCP payload per segment in bytes.")] = 1168,
    windows: Annotated[
        str | None,
        typer.Option("--windows", help="Share windows in seconds, e.g. '0-30,30-60,60-120'."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the emulator.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON record instead.")] = False,
    record: Annotated[
        Path | None, typer.Option("--record", help="Also write the JSON record here.")
    ] = None,
) -> None:
    """Competing kernel TCP flows through one emulated bottleneck: goodput, shares, Jain."""
    from tierwise.lab.bench.netns import require_lab
    from tierwise.lab.experiments.flows import run_kernel_flows

    exp = build_flows(
        cc, start, duration, rtt, rate, queue_packets, packet_bytes, mss, windows, seed
    )
    require_lab()
    with progress(int(exp.duration_s), "seconds") as step:
        result = run_kernel_flows(exp, step)
    write_record(result, record)
    if as_json:
        print(json.dumps(result))
        return
    render_flows(out, result)


def _times(text: str, option: str) -> list[float]:
    return [parse_time(item.strip(), option) for item in text.split(",") if item.strip()]


def _windows(text: str) -> tuple[tuple[float, float], ...]:
    spans = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        parts = item.split("-")
        try:
            a, b = (float(p) for p in parts)
        except ValueError:
            raise ScenarioError(
                f"{shown(item)} is not a window FROM-TO in seconds (e.g. 0-30)", source="--windows"
            ) from None
        spans.append((a, b))
    return tuple(spans)


def build_flows(
    cc: str,
    start: str | None,
    duration: str,
    rtt: str,
    rate: str,
    queue_packets: int,
    packet_bytes: int,
    mss: int,
    windows: str | None,
    seed: int,
) -> FlowsExperiment:
    """The :class:`FlowsExperiment` the ``flows`` options describe (input errors exit 2)."""
    from tierwise.lab.experiments.flows import FlowsExperiment

    ccs = tuple(c.strip() for c in cc.split(",") if c.strip())
    starts = tuple(_times(start, "--start")) if start is not None else (0.0,) * len(ccs)
    rate_bps = parse_option(rate, "rate", "--rate")
    if rate_bps <= 0:
        raise ScenarioError("the rate must be positive", source="--rate")
    duration_s = parse_time(duration, "--duration")
    return FlowsExperiment(
        ccs=ccs,
        starts_s=starts,
        duration_s=duration_s,
        rtt_s=parse_time(rtt, "--rtt"),
        rate_bytes_per_s=rate_bps,
        queue_packets=queue_packets,
        packet_bytes=packet_bytes,
        mss_bytes=mss,
        windows=_windows(windows) if windows else (),
        seed=seed,
    )


def render_flows(console: Console, result: dict) -> None:
    """Per-flow goodput and share, the windows' shares, Jain's index, the emulator's drops."""
    p = result["parameters"]
    table = Table(
        title=(
            f"{len(result['flows'])} flows, {p['duration_s']:g} s · "
            f"{p['rate_bytes_per_s'] * 8e-6:g} Mbit/s · RTT {p['rtt_s'] * 1e3:g} ms · "
            f"queue {p['queue_packets']:,} × "
            f"{p['packet_bytes']:,} B · segment {p['mss_bytes']:,} B · kernel {result['kernel']}"
        )
    )
    columns = ["flow", "cc", "start", "goodput (Mbit/s)", "share", "retransmitted"]
    columns += [f"{w['from_s']:g}–{w['to_s']:g} s" for w in result["windows"]]
    for col in columns:
        table.add_column(col, justify="right", no_wrap=True)
    for i, f in enumerate(result["flows"]):
        table.add_row(
            str(i),
            f["cc"],
            f"{f['start_s']:g} s",
            f"{f['goodput_bytes_per_s'] * 8e-6:.2f}",
            f"{f['share']:.3f}",
            f"{f['retransmitted_segments']:,}",
            *(f"{w['shares'][i]:.3f}" for w in result["windows"]),
        )
    console.print(table)
    up = result["emulator"].get("up", {})
    console.print(
        f"Jain's index {result['jain_index']:.3f} · bottleneck: {up.get('packets', 0):,} packets, "
        f"{up.get('dropped', 0):,} tail drops · window shares are of the bytes delivered in it",
        soft_wrap=True,
    )
