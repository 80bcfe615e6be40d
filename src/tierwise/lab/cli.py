"""``tierwise lab …``: bring a path up or down, and run the request experiment.

``lab up`` must outlive the command, so it starts a detached holder process (its
own session) that owns the path — namespaces ``tw-<holder pid>-…`` and the
emulator — and writes a state file under :data:`STATE_DIR` with its identity
(:mod:`tierwise.lab.bench.holders`). ``lab down`` stops the caller's holders (SIGTERM
through a pidfd, after checking the process is that holder: the holder tears its
path down), says which paths of other users it left (``--all`` stops them too),
removes stale state files and sweeps namespaces whose owner is dead.

Every command checks the host first; a :class:`LabError` (no root, no TUN) reaches
the main CLI, which prints it as one line and exits 2.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from tierwise.errors import LabError, ScenarioError, number_slip, shown
from tierwise.lab.bench.holders import HOLDER_MARK, STATE_DIR
from tierwise.lab.flowscli import flows_command
from tierwise.lab.model_server import model_server_command
from tierwise.lab.route_world import lab_route_command
from tierwise.outfile import write_text

if TYPE_CHECKING:
    from tierwise.lab.bench.holders import HolderState

__all__ = ["lab_app"]

HOLDER_READY_TIMEOUT_S = 30.0  # the rate check measures the emulator's ceiling first (~1 s)
HOLDER_STOP_TIMEOUT_S = 10.0
BULK_DEFAULT_SIZE = "100MB"  # `lab throughput --via`: bytes per transfer

lab_app = typer.Typer(
    help="Real kernel TCP over an emulated path between two network namespaces (needs root).",
    no_args_is_help=True,
)
out = Console()
lab_app.command("model-server")(model_server_command)
lab_app.command("route")(lab_route_command)
lab_app.command("flows")(flows_command)

RttOpt = Annotated[str, typer.Option("--rtt", help="Round-trip time, e.g. '200ms'.")]
MtuOpt = Annotated[
    str,
    typer.Option(
        "--mtu",
        help="With --via: the path's MTU in bytes, 1280–65535 (9000: jumbo frames); the relay "
        "discovers it, kcptun's --mtu follows it up to its cap of 1500.",
    ),
]
RateOpt = Annotated[str, typer.Option("--rate", help="Bottleneck rate each way, e.g. '100Mbit/s'.")]
LossUpOpt = Annotated[float, typer.Option("--loss-up", help="Random loss client→server (0–1).")]
LossDownOpt = Annotated[float, typer.Option("--loss-down", help="Random loss server→client (0–1).")]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, help="Seed of the emulator's loss process.")]
JsonRecordOpt = Annotated[
    bool, typer.Option("--json", help="Print the JSON record instead of a table.")
]
RecordOpt = Annotated[
    Path | None, typer.Option("--record", help="Also write the JSON record here.")
]


def _time(value: str, option: str) -> float:
    return _parsed(value, "time", option)


def _parsed(value: str, kind: str, option: str) -> float:
    from tierwise.errors import UnitError
    from tierwise.units import in_range, parse_quantity

    try:
        number = in_range(parse_quantity(value, kind), kind)
    except UnitError as exc:  # name the option: the value alone may not say which it was
        raise UnitError(f"{option}: {exc}") from None
    if number < 0:
        raise ScenarioError(f"{shown(value)} must not be negative", source=option)
    return number


def _size(value: str, option: str) -> int:
    """A size: a bare integer is a byte count (as ``--size 354640`` in §12.3.5), else a unit."""
    text = value.strip()
    if text.isdigit():  # the strict parser bounds its length and magnitude
        text += " B"
    return round(_parsed(text, "size", option))


def _mtu(value: str, via: str | None) -> int:
    """``--mtu``: an integer number of bytes in the path's range, and only with ``--via``."""
    from tierwise.lab.bench.path import MTU_BYTES, MTU_RANGE_BYTES

    low, high = MTU_RANGE_BYTES
    text = value.strip()
    if not text.isdigit() or not low <= int(text) <= high:
        raise ScenarioError(
            f"expected an integer from {low:,} to {high:,} bytes, got {shown(value)}",
            source="--mtu",
        )
    if via is None and int(text) != MTU_BYTES:
        raise ScenarioError("applies with --via only", source="--mtu")
    return int(text)


def _loss(value: float, option: str) -> float:
    if not 0.0 <= value < 1.0:
        raise ScenarioError(f"loss must be in [0, 1), got {value}", source=option)
    return value


def _path_config(rtt: str, rate: str, loss_up: float, loss_down: float, seed: int):
    from tierwise.lab.bench.emulator import Direction
    from tierwise.lab.bench.path import PathConfig

    rtt_s = _time(rtt, "--rtt")
    rate_bps = _parsed(rate, "rate", "--rate")
    if rate_bps <= 0:
        raise ScenarioError("the rate must be positive", source="--rate")

    def direction(loss: float, option: str) -> Direction:
        return Direction(delay_s=rtt_s / 2, rate_bytes_per_s=rate_bps, loss=_loss(loss, option))

    return PathConfig(
        up=direction(loss_up, "--loss-up"), down=direction(loss_down, "--loss-down"), seed=seed
    )


# --- up / down -----------------------------------------------------------------------


@lab_app.command()
def up(
    rtt: RttOpt = "200ms",
    rate: RateOpt = "100Mbit/s",
    loss_up: LossUpOpt = 0.0,
    loss_down: LossDownOpt = 0.0,
    seed: SeedOpt = 0,
) -> None:
    """Bring a path up in the background; `tierwise lab down` removes it."""
    from tierwise.lab.bench.holders import read_states
    from tierwise.lab.bench.netns import require_lab

    config = _path_config(rtt, rate, loss_up, loss_down, seed)
    require_lab()
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    _sweep_stale(*read_states(STATE_DIR))
    state = _start_holder(config)
    out.print(f"path up (holder pid {state['pid']}, state {state['state_file']}):")
    for side in ("client", "server"):
        out.print(
            f"  {side}: {state[side + '_addr']} in namespace {state[side + '_ns']} — "
            f"run a command there with: ip netns exec {state[side + '_ns']} COMMAND",
            soft_wrap=True,
        )
    out.print("remove it with: tierwise lab down")


def _start_holder(config) -> dict:
    from tierwise.lab.bench.holders import caller_uid

    spec = {"a": config.up.to_dict(), "b": config.down.to_dict(), "seed": config.seed}
    payload = json.dumps({**spec, "uid": caller_uid()})
    log = open(STATE_DIR / "holder.log", "ab")
    with log:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER_MARK],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,  # survives this command and its terminal
        )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(payload.encode() + b"\n")
    proc.stdin.close()
    line = _readline(proc, HOLDER_READY_TIMEOUT_S)
    proc.stdout.close()
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        raise LabError(
            f"the path did not come up: {line.decode(errors='replace').strip() or 'no answer'} "
            f"(see {STATE_DIR / 'holder.log'})"
        ) from None


def _readline(proc: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return proc.stdout.readline() if ready else b""


@lab_app.command()
def down(
    every: Annotated[
        bool, typer.Option("--all", help="Also stop the paths other users brought up.")
    ] = False,
) -> None:
    """Stop the paths your `tierwise lab up` started and sweep stale state and namespaces."""
    from tierwise.lab.bench.holders import caller_uid, read_states, stop
    from tierwise.lab.bench.netns import cleanup_stale, require_lab

    require_lab()
    states, broken = read_states(STATE_DIR) if STATE_DIR.is_dir() else ([], [])
    me = caller_uid()
    others = [s for s in states if s.uid != me and not every]
    stopped, stale = [], []
    for state in states:
        if state not in others:
            (stopped if stop(state) else stale).append(state.pid)
    stale += _sweep_stale(others, broken)
    others = [s for s in others if s.pid not in stale]
    swept = cleanup_stale()
    if STATE_DIR.is_dir() and not any(STATE_DIR.glob("lab-*.json")):
        (STATE_DIR / "holder.log").unlink(missing_ok=True)
    if not (stopped or stale or swept or others):
        out.print("nothing to remove")
    for pid in stopped:
        out.print(f"stopped the path of holder {pid}")
    for pid in stale:
        out.print(f"removed the stale state of holder {pid} (that process is gone)")
    for name in swept:
        out.print(f"removed orphaned namespace {name}")
    if others:
        holders = ", ".join(f"holder {s.pid} (uid {s.uid})" for s in others)
        out.print(f"left the paths of other users: {holders}; `tierwise lab down --all` stops them")


def _sweep_stale(states: list[HolderState], broken: list[Path]) -> list[int]:
    """Remove state files whose holder is gone (or is another process now); their pids."""
    from tierwise.lab.bench.holders import is_holder

    for file in broken:
        file.unlink(missing_ok=True)
    gone = [s for s in states if not is_holder(s)]
    for s in gone:
        s.file.unlink(missing_ok=True)
    return [s.pid for s in gone]


# --- request -------------------------------------------------------------------------


@lab_app.command()
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
) -> None:
    """Run the §12.3.5 request on its own path, modes alternated, beside the predictions."""
    mtu_bytes = _mtu(mtu, via)
    loss = _loss(loss, "--loss") if loss is not None else 0.0
    loss_up = loss_up if loss_up is not None else loss
    loss_down = loss_down if loss_down is not None else loss
    if via is not None:
        from tierwise.lab.viacli import request_via

        args = (size, proc, response, runs, cc, rtt, rate, loss_up, loss_down, seed)
        request_via(via, modes, factor, args, max_hours, as_json, record, plot, mtu_bytes)
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
    _check_duration(exp, levels, max_hours)
    from tierwise.lab.bench.netns import require_lab

    require_lab()
    if factor is not None:
        from tierwise.lab.experiments.factors import run_factor

        with _progress(exp.runs * len(parsed.levels), f"{parsed.name} runs") as step:
            result = run_factor(exp, parsed, mode, step)
    else:
        from tierwise.lab.experiments.request import run_experiment

        with _progress(exp.runs * len(exp.modes), "requests") as step:
            result = run_experiment(exp, step)
    if plot is not None:
        result["plots"] = [str(p) for p in plot_medians(result, plot)]
    _write_record(result, record)
    if as_json:
        print(json.dumps(result))
        return
    if factor is not None:
        render_factor(out, result)
    else:
        render_request(out, result)
    if plot is not None:
        out.print("timelines: " + ", ".join(result["plots"]), soft_wrap=True)


@contextlib.contextmanager
def _progress(total: int, what: str) -> Iterator[Callable[[object], None]]:
    """A transient rich progress bar on stderr; yields the per-item callback."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task(what, total=total)
        yield lambda _item: bar.advance(task)


def _write_record(result: dict, record: Path | None) -> None:
    if record is None:
        return
    try:
        write_text(record, json.dumps(result, indent=1) + "\n")
    except OSError as exc:
        raise ScenarioError(
            f"cannot write the record: {exc.strerror or exc}", source=str(record)
        ) from exc


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


# --- throughput ----------------------------------------------------------------------


@lab_app.command()
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
    rtt: RttOpt = "200ms",
    rate: RateOpt = "100Mbit/s",
    seed: SeedOpt = 0,
    mtu: MtuOpt = "1500",
    as_json: JsonRecordOpt = False,
    record: RecordOpt = None,
) -> None:
    """Sustained goodput under random loss beside the Mathis bound and (1 − p)·B (§12.3.3)."""
    mtu_bytes = _mtu(mtu, via)
    if via is not None:
        from tierwise.lab.viacli import render_via_bulk, throughput_via

        bulk = size if size is not None else BULK_DEFAULT_SIZE
        result = throughput_via(via, loss, cc, duration, bulk, rtt, rate, seed, mtu_bytes)
        _write_record(result, record)
        if as_json:
            print(json.dumps(result))
        else:
            render_via_bulk(out, result)
        return
    if size is not None:  # a transfer of a size is what --via moves; without it, ignored
        raise ScenarioError("applies with --via only (without it each flow runs --duration)",
                            source="--size")  # fmt: skip
    exp = build_throughput(loss, cc or "reno,cubic,bbr", duration or "5s", rtt, rate, seed)
    from tierwise.lab.bench.netns import require_lab
    from tierwise.lab.experiments.throughput import run_throughput

    require_lab()
    with _progress(len(exp.losses) * len(exp.ccs), "transfers") as step:
        result = run_throughput(exp, step)
    _write_record(result, record)
    if as_json:
        print(json.dumps(result))
        return
    render_throughput(out, result)


def build_throughput(loss, cc, duration, rtt, rate, seed):
    """The :class:`ThroughputExperiment` the ``throughput`` options describe."""
    from tierwise.lab.experiments.throughput import ThroughputExperiment

    levels = []
    for item in (x.strip() for x in loss.split(",")):
        try:
            levels.append(_loss(float(item), "--loss"))
        except ValueError:
            why = number_slip(item) or f"{shown(item)} is not a probability"
            raise ScenarioError(why, source="--loss") from None
    rate_bps = _parsed(rate, "rate", "--rate")
    if rate_bps <= 0:
        raise ScenarioError("the rate must be positive", source="--rate")
    duration_s = _time(duration, "--duration")
    if duration_s <= 0:
        raise ScenarioError("the duration must be positive", source="--duration")
    return ThroughputExperiment(
        losses=tuple(levels),
        ccs=tuple(c.strip() for c in cc.split(",") if c.strip()),
        duration_s=duration_s,
        rtt_s=_time(rtt, "--rtt"),
        rate_bytes_per_s=rate_bps,
        seed=seed,
    )


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


def _check_duration(exp: Any, levels: int, max_hours: float) -> None:
    """Refuse up front a run longer than ``max_hours``, with the estimate and the flag.

    A request costs at least a handshake and a few round trips of slow start, its bytes
    at the path's rate and the processing time; 4 RTT + bytes/rate + processing is a
    floor for a cold one, so the estimate errs short.
    """
    each_s = (
        4 * exp.rtt_s
        + (exp.size_bytes + exp.response_bytes) / exp.rate_bytes_per_s
        + exp.processing_s
    )
    total_s = exp.runs * levels * each_s
    if total_s > max_hours * 3600:
        raise ScenarioError(
            f"{exp.runs:,} runs × {levels} modes or levels at ≥ {each_s:.3g} s each take at least "
            f"{total_s / 3600:,.0f} h; lower --runs or raise --max-hours (now {max_hours:g})",
            source="--runs",
        )


def build_experiment(size, proc, response, modes, runs, cc, rtt, rate, loss_up, loss_down, seed):
    """The :class:`RequestExperiment` the ``request`` options describe (input errors exit 2)."""
    from tierwise.lab.experiments.request import RequestExperiment

    rate_bps = _parsed(rate, "rate", "--rate")
    if rate_bps <= 0:
        raise ScenarioError("the rate must be positive", source="--rate")
    return RequestExperiment(
        size_bytes=_size(size, "--size"),
        processing_s=_time(proc, "--proc"),
        response_bytes=_size(response, "--response"),
        modes=tuple(m.strip() for m in modes.split(",") if m.strip()),
        runs=runs,
        cc=cc,
        rtt_s=_time(rtt, "--rtt"),
        rate_bytes_per_s=rate_bps,
        loss_up=_loss(loss_up, "--loss-up"),
        loss_down=_loss(loss_down, "--loss-down"),
        seed=seed,
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
