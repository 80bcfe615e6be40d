"""``tierwise lab throughput``: bulk goodput under random loss beside the Mathis bound.

With ``--via`` it moves ``--size`` through each transport instead
(:mod:`tierwise.lab.cli.via`).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tierwise.errors import ScenarioError
from tierwise.lab.cli.common import (
    JsonRecordOpt,
    MtuOpt,
    RateOpt,
    RecordOpt,
    RttOpt,
    SeedOpt,
    build_throughput,
    out,
    parse_mtu,
    progress,
    write_record,
)

__all__ = ["render_throughput", "throughput"]

BULK_DEFAULT_SIZE = "100MB"  # `lab throughput --via`: bytes per transfer


def throughput(
    loss: Annotated[
        str, typer.Option("--loss", help="Comma-separated loss levels on the download (0–1).")
    ] = "0,0.01,0.036,0.14",
    cc: Annotated[
        str | None,
        typer.Option("--cc", help="Comma-separated: reno,cubic,bbr (all three; --via: cubic)."),
    ] = None,
    duration: Annotated[
        str | None,
        typer.Option(
            "--duration",
            help="Length of each bulk transfer, e.g. '5s' (default); with --via the bound "
            "on each transfer of --size (default 120s).",
        ),
    ] = None,
    via: Annotated[
        str | None,
        typer.Option(
            "--via", help="Move --size through each transport: direct,relay,kcptun (comma-sep.)."
        ),
    ] = None,
    size: Annotated[
        str | None,
        typer.Option("--size", help="With --via: bytes per transfer (default 100MB)."),
    ] = None,
    police: Annotated[
        str | None,
        typer.Option(
            "--police",
            help="With --via: a token-bucket policer on the download at this rate (below "
            "--rate), dropping above it without queueing, e.g. '20Mbit/s'.",
        ),
    ] = None,
    police_burst: Annotated[
        str | None,
        typer.Option("--police-burst", help="The policer's bucket, e.g. '96kB' (default)."),
    ] = None,
    rtt: RttOpt = "200ms",
    rate: RateOpt = "100Mbit/s",
    seed: SeedOpt = 0,
    mtu: MtuOpt = "1500",
    as_json: JsonRecordOpt = False,
    record: RecordOpt = None,
) -> None:
    """Sustained goodput under random loss beside the Mathis bound and (1 − p)·B (§12.3.3)."""
    mtu_bytes = parse_mtu(mtu, via)
    if via is not None:
        from tierwise.lab.cli.via import render_via_bulk, throughput_via

        bulk = size if size is not None else BULK_DEFAULT_SIZE
        result = throughput_via(
            via, loss, cc, duration, bulk, rtt, rate, seed, mtu_bytes, police, police_burst
        )
        write_record(result, record)
        if as_json:
            print(json.dumps(result))
        else:
            render_via_bulk(out, result)
        return
    if police is not None or police_burst is not None:
        option = "--police" if police is not None else "--police-burst"
        raise ScenarioError("applies with --via only", source=option)
    if size is not None:  # a transfer of a size is what --via moves; without it, ignored
        raise ScenarioError("applies with --via only (without it each flow runs --duration)",
                            source="--size")  # fmt: skip
    exp = build_throughput(loss, cc or "reno,cubic,bbr", duration or "5s", rtt, rate, seed)
    from tierwise.lab.bench.netns import require_lab
    from tierwise.lab.experiments.throughput import run_throughput

    require_lab()
    with progress(len(exp.losses) * len(exp.ccs), "transfers") as step:
        result = run_throughput(exp, step)
    write_record(result, record)
    if as_json:
        print(json.dumps(result))
        return
    render_throughput(out, result)


def _mbit(value: float | None) -> str:
    return "∞" if value is None else f"{value * 8e-6:.3g}"


def render_throughput(console: Console, result: dict) -> None:
    """Measured goodput per (loss, cc) beside the Mathis bound and (1 − p)·B, in Mbit/s."""
    p = result["parameters"]
    table = Table(
        title=(
            f"bulk server → client, {p['duration_s']:g} s each · RTT {p['rtt_s'] * 1e3:g} ms · "
            f"{p['rate_bytes_per_s'] * 8e-6:g} Mbit/s · loss on the download · "
            f"kernel {result['kernel']} (Mbit/s)"
        )
    )
    for col in ("loss", "cc", "goodput", "2nd half", "Mathis C=1", "Mathis C=1.31", "(1−p)·B"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in result["rows"]:
        table.add_row(
            f"{r['loss']:g}",
            r["cc"],
            _mbit(r["goodput_bytes_per_s"]),
            _mbit(r["second_half_bytes_per_s"]),
            _mbit(r["mathis_c1_bytes_per_s"]),
            _mbit(r["mathis_c131_bytes_per_s"]),
            _mbit(r["ideal_bytes_per_s"]),
        )
    console.print(table)
    console.print(
        "Mathis: (MSS/R)·C/√p with MSS 1,448 B; (1−p)·B: BBR's ideal with B the emulated IP "
        "rate (TCP payload reaches at most 1448/1500 of B).",
        soft_wrap=True,
    )
