"""``tierwise lab request``: the §12.3.5 request on its own path, beside the predictions.

Modes alternated run by run, or one factor changed (``--factor``), or transports
compared (``--via``, :mod:`tierwise.lab.cli.via`); tables, a JSON record and the
median requests' timelines.
"""

from __future__ import annotations

import json
from pathlib import Path
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
    build_experiment,
    check_duration,
    check_loss,
    out,
    parse_mtu,
    progress,
    write_record,
)

__all__ = ["plot_medians", "render_factor", "render_request", "request"]


def request(
    size: Annotated[
        str, typer.Option("--size", help="Upload size: bytes (354640) or with a unit ('0.35 MB').")
    ] = "354640",
    proc: Annotated[str, typer.Option("--proc", help="Processing time at the service.")] = "30ms",
    response: Annotated[
        str, typer.Option("--response", help="Response body size: bytes or with a unit.")
    ] = "1000",
    modes: Annotated[
        str | None,
        typer.Option(
            "--modes",
            help="Comma-separated: cold,warm,warm-tuned (the default). With --factor: one mode "
            "(default: cold for initcwnd and cc, warm for idle).",
        ),
    ] = None,
    runs: Annotated[int, typer.Option("--runs", min=1, help="Requests per mode.")] = 20,
    max_hours: Annotated[
        float,
        typer.Option("--max-hours", min=0, help="Refuse a run whose estimate is longer than this."),
    ] = 2.0,
    cc: Annotated[
        str | None, typer.Option("--cc", help="reno, cubic or bbr (default: the namespace's).")
    ] = None,
    rtt: RttOpt = "200ms",
    rate: RateOpt = "100Mbit/s",
    loss_up: Annotated[
        float | None, typer.Option("--loss-up", help="Random loss client→server (0–1).")
    ] = None,
    loss_down: Annotated[
        float | None, typer.Option("--loss-down", help="Random loss server→client (0–1).")
    ] = None,
    loss: Annotated[
        float | None,
        typer.Option("--loss", help="Random loss each way (0–1); --loss-up/--loss-down override."),
    ] = None,
    via: Annotated[
        str | None,
        typer.Option(
            "--via",
            help="Compare transports instead of modes: direct,relay,kcptun (comma-separated; "
            "new application connection per request, relay and kcptun over a warm session).",
        ),
    ] = None,
    seed: SeedOpt = 0,
    mtu: MtuOpt = "1500",
    as_json: JsonRecordOpt = False,
    record: RecordOpt = None,
    factor: Annotated[
        str | None,
        typer.Option(
            "--factor",
            help="Single-factor run: initcwnd=10,40,300 | cc=cubic,bbr | idle=0s,3s "
            "(one factor changes, levels rotated run by run).",
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Draw the median request of each mode (or level) into DIR."),
    ] = None,
    sessions: Annotated[
        str | None,
        typer.Option(
            "--sessions",
            help="With --via: warm (default: one warmed session per transport), new (each "
            "request on a new session, nothing known of the path) or remembered (each on a "
            "new session that starts from the relay's path memory).",
        ),
    ] = None,
    beside_bulk: Annotated[
        str | None,
        typer.Option(
            "--beside-bulk",
            help="With --via: each request beside a bulk download of this size on the same "
            "session, e.g. 100MB (direct and relay).",
        ),
    ] = None,
) -> None:
    """Run the §12.3.5 request on its own path, modes alternated, beside the predictions."""
    mtu_bytes = parse_mtu(mtu, via)
    for flag, value in (("--sessions", sessions), ("--beside-bulk", beside_bulk)):
        if value is not None and via is None:
            raise ScenarioError("applies with --via only", source=flag)
    loss = check_loss(loss, "--loss") if loss is not None else 0.0
    loss_up = loss_up if loss_up is not None else loss
    loss_down = loss_down if loss_down is not None else loss
    if via is not None:
        from tierwise.lab.cli.via import request_via

        args = (size, proc, response, runs, cc, rtt, rate, loss_up, loss_down, seed)
        request_via(
            via, modes, factor, args, max_hours, as_json, record, plot, mtu_bytes,
            sessions=sessions, beside_bulk=beside_bulk,
        )  # fmt: skip
        return
    if factor is not None:
        from tierwise.lab.experiments.factors import check_factor_modes, parse_factor, resolve_mode

        parsed = parse_factor(factor)
        mode = resolve_mode(parsed, check_factor_modes(modes))
        exp = build_experiment(
            size, proc, response, mode, runs, cc, rtt, rate, loss_up, loss_down, seed
        )
        if parsed.name == "cc" and cc is not None:
            raise ScenarioError("--cc is fixed by --factor cc; drop one of them", source="--cc")
    else:
        exp = build_experiment(
            size,
            proc,
            response,
            modes or "cold,warm,warm-tuned",
            runs,
            cc,
            rtt,
            rate,
            loss_up,
            loss_down,
            seed,
        )
    levels = len(parsed.levels) if factor is not None else len(exp.modes)
    check_duration(exp, levels, max_hours)
    from tierwise.lab.bench.netns import require_lab

    require_lab()
    if factor is not None:
        from tierwise.lab.experiments.factors import run_factor

        with progress(exp.runs * len(parsed.levels), f"{parsed.name} runs") as step:
            result = run_factor(exp, parsed, mode, step)
    else:
        from tierwise.lab.experiments.request import run_experiment

        with progress(exp.runs * len(exp.modes), "requests") as step:
            result = run_experiment(exp, step)
    if plot is not None:
        result["plots"] = [str(p) for p in plot_medians(result, plot)]
    write_record(result, record)
    if as_json:
        print(json.dumps(result))
        return
    if factor is not None:
        render_factor(out, result)
    else:
        render_request(out, result)
    if plot is not None:
        out.print("timelines: " + ", ".join(result["plots"]), soft_wrap=True)


def plot_medians(result: dict, folder: Path) -> list[Path]:
    """The median request of each mode (factor runs: each level) as a timeline, PNG and SVG."""
    from tierwise.lab.experiments.factors import median_sample
    from tierwise.lab.views.timeline import save_timeline

    key = "level" if result["experiment"] == "factor" else "mode"
    groups: dict[str, list[dict]] = {}
    for s in result["samples"]:
        groups.setdefault(str(s[key]), []).append(s)
    rtt = result["parameters"]["rtt_s"]
    paths: list[Path] = []
    try:
        for name, samples in groups.items():
            sample = median_sample(samples)
            if key == "level":
                stem = f"timeline-{result['factor']}-{name}"
                title = f"{result['mode']}, {result['factor']} = {name} · median of {len(samples)}"
            else:
                stem = f"timeline-{name}"
                title = f"{name} · median of {len(samples)} (run {sample['run']})"
            paths += save_timeline(sample, folder, stem, rtt_s=rtt, title=title)
    except OSError as exc:
        raise ScenarioError(
            f"cannot write the plot: {exc.strerror or exc}", source=str(folder)
        ) from exc
    return paths


def render_factor(console: Console, result: dict) -> None:
    """Measured percentiles per level beside the closed-form and simulated predictions."""
    p = result["parameters"]
    title = (
        f"{result['factor']} · {result['mode']} · {p['size_bytes']:,} B up, "
        f"{p['response_bytes']:,} B back, {p['processing_s'] * 1e3:g} ms processing · "
        f"RTT {p['rtt_s'] * 1e3:g} ms · {p['rate_bytes_per_s'] * 8e-6:g} Mbit/s · "
        f"kernel {result['kernel']}"
    )
    table, paced = _summary_table(title, result["factor"], result["summary"])
    console.print(table)
    console.print("times in seconds; model: the closed form; sim: the packet-level simulator.")
    _sim_notes(console, result["summary"])
    console.print("fixed: " + "; ".join(result["fixed"]), soft_wrap=True)
    if paced:
        _pacing_note(console, result["summary"])
    console.print(
        "order of levels per run rotated: "
        + " | ".join(",".join(o) for o in result["order"][:3])
        + (" …" if len(result["order"]) > 3 else ""),
        soft_wrap=True,
    )


SUMMARY_COLUMNS = ("runs", "median", "p90", "p99", "model", "sim", "ratio")
SUMMARY_TIMES = ("median_s", "p90_s", "p99_s", "closed_form_s", "sim_s")


def _summary_table(title: str, first: str, summary: dict) -> tuple[Table, bool]:
    """One row per mode or level: runs, percentiles, predictions, median/model; and
    whether a "paced" column (BBR) was added."""
    restart = any("window_restarts" in s for s in summary.values())
    paced = any("paced_s" in s for s in summary.values())
    table = Table(title=title)
    table.add_column(first, no_wrap=True)
    extra = (("restart",) if restart else ()) + (("paced",) if paced else ())
    for col in SUMMARY_COLUMNS + extra:
        table.add_column(col, justify="right", no_wrap=True)
    for name, s in summary.items():
        row = [
            name,
            str(s["runs"]),
            *("—" if s[k] is None else f"{s[k]:.3f}" for k in SUMMARY_TIMES),
            f"{s['median_s'] / s['closed_form_s']:.2f}",
        ]
        if restart:
            row.append("yes" if s.get("window_restarts") else "no")
        if paced:
            row.append(_paced_cell(s))
        table.add_row(*row)
    return table, paced


def _sim_notes(console: Console, summary: dict) -> None:
    """Say why a sim cell is blank (the prediction was abandoned), once per reason."""
    for note in dict.fromkeys(s["sim_note"] for s in summary.values() if "sim_note" in s):
        console.print(f"sim —: {note}", soft_wrap=True)


def _paced_cell(s: dict) -> str:
    if "paced_s" not in s:
        return "—"
    return f"{s['paced_s']:.3f}"


def _pacing_note(console: Console, summary: dict) -> None:
    rates = ", ".join(
        f"{name} {s['pacing_rate_bytes_per_s'] * 8e-6:.0f} Mbit/s"
        for name, s in summary.items()
        if "paced_s" in s
    )
    console.print(
        "paced: the model with the upload sent at BBR's pacing rate read from TCP_INFO before "
        f"the request (2.89 × its bandwidth estimate while in Startup): {rates}.",
        soft_wrap=True,
    )


def render_request(console: Console, result: dict) -> None:
    """Measured percentiles per mode beside the closed-form and simulated predictions."""
    p = result["parameters"]
    title = (
        f"{p['size_bytes']:,} B up, {p['response_bytes']:,} B back, "
        f"{p['processing_s'] * 1e3:g} ms processing · RTT {p['rtt_s'] * 1e3:g} ms · "
        f"{p['rate_bytes_per_s'] * 8e-6:g} Mbit/s · "
        f"{result['cc']} · kernel {result['kernel']}"
    )
    table, paced = _summary_table(title, "mode", result["summary"])
    console.print(table)
    console.print(
        "times in seconds; model: the closed form; sim: the packet-level simulator; "
        "ratio: median / model."
    )
    _sim_notes(console, result["summary"])
    if paced:
        _pacing_note(console, result["summary"])
    console.print(
        f"serial floor (RTT + size/rate + processing + response/rate): "
        f"{next(iter(result['summary'].values()))['serial_floor_s']:.3f} s; cold adds 1 RTT of "
        "TCP handshake (no TLS) and the slow-start wait (IW 10 × 1448 B).",
        soft_wrap=True,
    )
    if result["warm_tuned_knobs"]:
        console.print("warm-tuned set: " + "; ".join(result["warm_tuned_knobs"]), soft_wrap=True)
    console.print(f"congestion control {result['cc']}: {result['cc_set_by']}", soft_wrap=True)
