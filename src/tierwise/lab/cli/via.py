"""``tierwise lab request --via …`` and ``tierwise lab throughput --via …``: transports compared.

Loaded only when ``--via`` is given, so the lab's other commands do not pay for it.
Input errors (a bad ``--via``, ``--via`` with ``--modes`` or ``--factor``, kcptun
missing) exit 2 with one line before any path comes up.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tierwise.errors import ScenarioError, shown
from tierwise.lab.bench.path import MTU_BYTES
from tierwise.lab.cli.common import (
    build_experiment,
    build_throughput,
    check_duration,
    out,
    parse_option,
    parse_size,
    parse_time,
    progress,
    write_record,
)
from tierwise.lab.experiments.tunnels import parse_vias

__all__ = ["parse_police", "render_via_bulk", "render_vias", "request_via", "throughput_via"]

DEFAULT_CC = "cubic"
BULK_DEFAULT_BOUND = "120s"


def request_via(
    via: str,
    modes: str | None,
    factor: str | None,
    args: tuple,
    max_hours: float,
    as_json: bool,
    record: Path | None,
    plot: Path | None,
    mtu_bytes: int = MTU_BYTES,
    *,
    sessions: str | None = None,
    beside_bulk: str | None = None,
) -> None:
    """Run the request over each transport of ``via`` alternately, then print or record it."""
    from tierwise.lab.experiments.via import SESSIONS

    vias = parse_vias(via)
    sessions = sessions or "warm"
    if sessions not in SESSIONS:
        raise ScenarioError(
            f"unknown sessions {sessions!r}; expected one of {', '.join(SESSIONS)}",
            source="--sessions",
        )
    bulk_bytes = parse_size(beside_bulk, "--beside-bulk") if beside_bulk is not None else 0
    if beside_bulk is not None and bulk_bytes <= 0:
        raise ScenarioError("the bulk size must be positive", source="--beside-bulk")
    if bulk_bytes and sessions != "warm":
        raise ScenarioError("a request beside bulk runs on a warm session", source="--sessions")
    if bulk_bytes and "kcptun" in vias:
        raise ScenarioError(
            "kcptun forwards one target per session: beside bulk compares direct and relay",
            source="--via",
        )
    for flag, value in (("--modes", modes), ("--factor", factor)):
        if value is not None:
            raise ScenarioError(f"{flag} does not apply with --via; drop one of them", source=flag)
    size, proc, response, runs, cc, rtt, rate, loss_up, loss_down, seed = args
    req = build_experiment(
        size, proc, response, "cold", runs, cc or DEFAULT_CC, rtt, rate, loss_up, loss_down, seed
    )
    check_duration(req, len(vias), max_hours)
    from tierwise.lab.bench.netns import require_lab
    from tierwise.lab.experiments.via import ViaExperiment, run_via_requests
    from tierwise.lab.views.via import plot_vias

    require_lab()
    with progress(req.runs * len(vias), "requests") as step:
        exp = ViaExperiment(req, vias, mtu_bytes, sessions, bulk_bytes)
        result = run_via_requests(exp, step)
    if plot is not None:
        try:
            result["plots"] = [str(p) for p in plot_vias(result, plot)]
        except OSError as exc:
            raise ScenarioError(f"cannot write the plot: {exc.strerror}", source=str(plot)) from exc
    write_record(result, record)
    if as_json:
        print(json.dumps(result))
        return
    render_vias(out, result)


def _cell(row: dict, key: str, fmt: str = "{:.3f}") -> str:
    value = row.get(key)
    return "—" if value is None else fmt.format(value)


def render_vias(console: Console, result: dict) -> None:
    """Percentiles per transport beside the floor, and their ratios to it."""
    p = result["parameters"]
    table = Table(
        title=(
            f"{p['size_bytes']:,} B up, {p['response_bytes']:,} B back, "
            f"{p['processing_s'] * 1e3:g} ms processing · RTT {p['rtt_s'] * 1e3:g} ms · "
            f"{p['rate_bytes_per_s'] * 8e-6:g} Mbit/s · MTU {p.get('mtu_bytes', 1500)} · "
            f"loss up {p['loss_up']:g}, "
            f"down {p['loss_down']:g} · direct: {p['cc']} · sessions: "
            f"{p.get('sessions', 'warm')}{_beside(p)} · kernel {result['kernel']}"
        )
    )
    columns = ("via", "runs", "fail", "median", "p90", "p99", "floor", "med/floor")
    for col in (*columns, "p99/floor", "med/relay"):
        table.add_column(col, justify="right", no_wrap=True)
    for via, row in result["summary"].items():
        table.add_row(
            via,
            str(row["runs"]),
            str(row["failed"]),
            *(_cell(row, k) for k in ("median_s", "p90_s", "p99_s", "floor_s")),
            *(_cell(row, k, "{:.2f}") for k in ("median_over_floor", "p99_over_floor")),
            _cell(row, "median_over_relay", "{:.2f}"),
        )
    console.print(table)
    console.print(
        "times in seconds, connect() to the last response byte, a new application connection "
        "per request; floor: RTT + size/rate + processing + response/rate (§12.1.1).",
        soft_wrap=True,
    )
    for via, info in result["transports"].items():
        if "settings" in info:
            console.print(f"{via}: {info['settings']}", soft_wrap=True)
    if "plots" in result:
        console.print("plots: " + ", ".join(result["plots"]), soft_wrap=True)


def _beside(p: dict) -> str:
    size = p.get("beside_bulk_bytes") or 0
    return f" · beside a {size:,} B bulk download" if size else ""


def throughput_via(
    via: str,
    loss: str,
    cc: str | None,
    duration: str | None,
    size: str,
    rtt: str,
    rate: str,
    seed: int,
    mtu_bytes: int = MTU_BYTES,
    police: str | None = None,
    police_burst: str | None = None,
) -> dict:
    """Bulk ``size`` server → client over each transport of ``via``; the JSON record."""
    from tierwise.lab.experiments.via import MAX_BULK_S, ViaBulk, run_via_bulk

    vias = parse_vias(via)
    cc = cc or DEFAULT_CC
    if "," in cc:
        raise ScenarioError("with --via, --cc names one control (for direct)", source="--cc")
    base = build_throughput(loss, cc, "1s", rtt, rate, seed)  # validates all but the bound
    bound_s = parse_time(duration or BULK_DEFAULT_BOUND, "--duration")
    if not 0 < bound_s <= MAX_BULK_S:
        raise ScenarioError(f"must lie in (0, {MAX_BULK_S:g}] s", source="--duration")
    size_bytes = parse_size(size, "--size")
    if size_bytes <= 0:
        raise ScenarioError("the size must be positive", source="--size")
    police_bps, burst_bytes = parse_police(police, police_burst, base.rate_bytes_per_s)
    exp = ViaBulk(
        vias,
        base.losses,
        size_bytes,
        bound_s,
        base.rtt_s,
        base.rate_bytes_per_s,
        cc,
        seed,
        mtu_bytes,
        police_bps,
        burst_bytes,
    )
    from tierwise.lab.bench.netns import require_lab

    require_lab()
    with progress(len(exp.losses) * len(vias), "transfers") as step:
        return run_via_bulk(exp, step)


def parse_police(
    police: str | None, police_burst: str | None, rate_bytes_per_s: float
) -> tuple[float | None, int]:
    """``--police`` (a rate below ``--rate``) and ``--police-burst`` (a size, one packet or
    more; only with ``--police``)."""
    from tierwise.lab.bench.emulator import DEFAULT_POLICE_BURST_BYTES, MAX_PACKET_WIRE

    if police is None:
        if police_burst is not None:
            raise ScenarioError("applies with --police only", source="--police-burst")
        return None, DEFAULT_POLICE_BURST_BYTES
    rate = parse_option(police, "rate", "--police")
    if not 0 < rate < rate_bytes_per_s:
        raise ScenarioError(
            f"the policed rate must be positive and below --rate "
            f"({rate_bytes_per_s * 8e-6:g} Mbit/s), got {shown(police)}",
            source="--police",
        )
    if police_burst is None:
        return rate, DEFAULT_POLICE_BURST_BYTES
    burst = parse_size(police_burst, "--police-burst")
    if burst < MAX_PACKET_WIRE:
        raise ScenarioError(
            f"the bucket must hold one full-size packet ({MAX_PACKET_WIRE} B), "
            f"got {shown(police_burst)}",
            source="--police-burst",
        )
    return rate, burst


def render_via_bulk(console: Console, result: dict) -> None:
    """Goodput per (loss, transport) against the path rate, and CPU seconds per GB."""
    p = result["parameters"]
    table = Table(
        title=(
            f"bulk {p['size_bytes']:,} B server → client (bound {p['duration_s']:g} s) · "
            f"RTT {p['rtt_s'] * 1e3:g} ms · {p['rate_bytes_per_s'] * 8e-6:g} Mbit/s · "
            f"MTU {p.get('mtu_bytes', 1500)} · loss on the download · kernel {result['kernel']}"
            + _police_title(p)
        )
    )
    policed = bool(p.get("police_bytes_per_s"))
    cols = ["loss", "via", "done", "s", "Mbit/s", "/ rate"]
    cols += ["/ police", "path loss"] if policed else []
    for col in (*cols, "CPU s/GB client", "server"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in result["rows"]:
        per_gb = r["cpu_s_per_gb"]
        extra = [f"{r['goodput_over_police']:.2f}", f"{r['path_loss']:.1%}"] if policed else []
        table.add_row(
            f"{r['loss']:g}",
            r["via"],
            "yes" if r["complete"] else _short(r, p["size_bytes"]),
            f"{r['elapsed_s']:.1f}",
            f"{r['goodput_bytes_per_s'] * 8e-6:.1f}",
            f"{r['goodput_over_rate']:.2f}",
            *extra,
            *(f"{per_gb[end]:.1f}" if end in per_gb else "—" for end in ("client", "server")),
        )
    console.print(table)
    console.print(
        "done: a short transfer says how it ended (eof: closed early; reset; bound: still "
        "running at --duration). "
        "CPU: user + system seconds of each end's process per GB delivered (/proc); direct "
        "has no such process (kernel TCP's work is not counted).",
        soft_wrap=True,
    )


def _police_title(p: dict) -> str:
    rate = p.get("police_bytes_per_s")
    if not rate:
        return ""
    return f" · policed at {rate * 8e-6:g} Mbit/s, bucket {p['police_burst_bytes']:,} B"


def _short(row: dict, size_bytes: int) -> str:
    """``37% bound``: how much of a short transfer arrived and how it ended."""
    share = f"{row['received_bytes'] / size_bytes:.0%}"
    return f"{share} {row['ended']}" if "ended" in row else share
