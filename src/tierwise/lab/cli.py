"""``tierwise lab …``: bring a path up or down, and run the request experiment.

``lab up`` must outlive the command, so it starts a detached holder process (its
own session) that owns the path — namespaces ``tw-<holder pid>-…`` and the
emulator — and writes a state file under :data:`STATE_DIR`. ``lab down`` stops
every holder listed there (SIGTERM: the holder tears its path down) and sweeps
namespaces whose owner is dead, so a crashed holder leaves nothing either.

Every command checks the host first; a :class:`LabError` (no root, no TUN) reaches
the main CLI, which prints it as one line and exits 2.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path as FsPath
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tierwise.errors import LabError, ScenarioError
from tierwise.units import parse_quantity

__all__ = ["STATE_DIR", "hold", "lab_app"]

STATE_DIR = FsPath("/run/tierwise")
HOLDER_READY_TIMEOUT_S = 30.0  # the rate check measures the emulator's ceiling first (~1 s)
HOLDER_STOP_TIMEOUT_S = 10.0
_HOLDER_MAIN = "from tierwise.lab.cli import hold; hold()"

lab_app = typer.Typer(
    help="Real kernel TCP over an emulated path between two network namespaces (needs root).",
    no_args_is_help=True,
)
out = Console()

RttOpt = Annotated[str, typer.Option("--rtt", help="Round-trip time, e.g. '200ms'.")]
RateOpt = Annotated[str, typer.Option("--rate", help="Bottleneck rate each way, e.g. '100Mbit/s'.")]
LossUpOpt = Annotated[float, typer.Option("--loss-up", help="Random loss client→server (0–1).")]
LossDownOpt = Annotated[float, typer.Option("--loss-down", help="Random loss server→client (0–1).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the emulator's loss process.")]


def _time(value: str, option: str) -> float:
    return _parsed(value, "time", option)


def _parsed(value: str, kind: str, option: str) -> float:
    number = parse_quantity(value, kind)
    if number < 0:
        raise ScenarioError(f"{value!r} must not be negative", source=option)
    return number


def _size(value: str, option: str) -> int:
    """A size: a bare integer is a byte count (as ``--size 354640`` in §12.3.5), else a unit."""
    text = value.strip()
    if text.isdigit():
        return int(text)
    return round(_parsed(value, "size", option))


def _loss(value: float, option: str) -> float:
    if not 0.0 <= value < 1.0:
        raise ScenarioError(f"loss must be in [0, 1), got {value}", source=option)
    return value


def _path_config(rtt: str, rate: str, loss_up: float, loss_down: float, seed: int):
    from tierwise.lab.emulator import Direction
    from tierwise.lab.path import PathConfig

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
    from tierwise.lab.netns import require_lab

    config = _path_config(rtt, rate, loss_up, loss_down, seed)
    require_lab()
    STATE_DIR.mkdir(parents=True, exist_ok=True)
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
    payload = json.dumps(
        {"a": config.up.to_dict(), "b": config.down.to_dict(), "seed": config.seed}
    )
    log = open(STATE_DIR / "holder.log", "ab")
    with log:
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER_MAIN],
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


def hold() -> None:
    """Holder entry: bring the path up, report it as JSON, keep it until SIGTERM."""
    from tierwise.lab.emulator import Direction
    from tierwise.lab.path import Path, PathConfig

    spec = json.loads(sys.stdin.readline())
    config = PathConfig(
        Direction.from_dict(spec["a"]), Direction.from_dict(spec["b"]), spec["seed"]
    )
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    state_file = STATE_DIR / f"lab-{os.getpid()}.json"
    try:
        with Path(config) as path:
            state = {
                "pid": os.getpid(),
                "state_file": str(state_file),
                "client_ns": path.client_ns,
                "server_ns": path.server_ns,
                "client_addr": path.client_addr,
                "server_addr": path.server_addr,
                "devices": [path.client_dev, path.server_dev],
                "config": spec,
            }
            state_file.write_text(json.dumps(state))
            _say(json.dumps(state))
            while not stop:
                signal.pause()
    except Exception as exc:  # the parent shows this line and exits 2
        _say(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        state_file.unlink(missing_ok=True)


def _say(line: str) -> None:
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        pass


@lab_app.command()
def down() -> None:
    """Stop every path `tierwise lab up` started and sweep orphaned namespaces."""
    from tierwise.lab.netns import cleanup_stale, require_lab

    require_lab()
    stopped = [_stop_holder(f) for f in sorted(STATE_DIR.glob("lab-*.json"))]
    swept = cleanup_stale()
    if not any(STATE_DIR.glob("lab-*.json")):
        (STATE_DIR / "holder.log").unlink(missing_ok=True)
    if not stopped and not swept:
        out.print("nothing to remove")
    for pid in stopped:
        out.print(f"stopped the path of holder {pid}")
    for name in swept:
        out.print(f"removed orphaned namespace {name}")


def _stop_holder(state_file: FsPath) -> int:
    pid = int(state_file.stem.removeprefix("lab-"))
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        state_file.unlink(missing_ok=True)  # died without cleaning up; cleanup_stale sweeps
        return pid
    deadline = time.monotonic() + HOLDER_STOP_TIMEOUT_S
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    state_file.unlink(missing_ok=True)
    return pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (our child, not yet reaped) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


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
        str, typer.Option("--modes", help="Comma-separated: cold,warm,warm-tuned.")
    ] = "cold,warm,warm-tuned",
    runs: Annotated[int, typer.Option("--runs", min=1, help="Requests per mode.")] = 20,
    cc: Annotated[
        str | None, typer.Option("--cc", help="reno, cubic or bbr (default: the namespace's).")
    ] = None,
    rtt: RttOpt = "200ms",
    rate: RateOpt = "100Mbit/s",
    loss_up: LossUpOpt = 0.0,
    loss_down: LossDownOpt = 0.0,
    seed: SeedOpt = 0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the JSON record instead of a table.")
    ] = False,
    record: Annotated[
        FsPath | None, typer.Option("--record", help="Also write the JSON record here.")
    ] = None,
) -> None:
    """Run the §12.3.5 request on its own path, modes alternated, beside the predictions."""
    exp = build_experiment(
        size, proc, response, modes, runs, cc, rtt, rate, loss_up, loss_down, seed
    )
    from tierwise.lab.experiment import run_experiment
    from tierwise.lab.netns import require_lab

    require_lab()
    result = run_experiment(exp)
    if record is not None:
        try:
            record.write_text(json.dumps(result, indent=1) + "\n")
        except OSError as exc:
            raise ScenarioError(
                f"cannot write the record: {exc.strerror or exc}", source=str(record)
            ) from exc
    if as_json:
        print(json.dumps(result))
        return
    render_request(out, result)


def build_experiment(size, proc, response, modes, runs, cc, rtt, rate, loss_up, loss_down, seed):
    """The :class:`RequestExperiment` the ``request`` options describe (input errors exit 2)."""
    from tierwise.lab.experiment import RequestExperiment

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


def render_request(console: Console, result: dict) -> None:
    """Measured percentiles per mode beside the closed-form and simulated predictions."""
    p = result["parameters"]
    table = Table(
        title=(
            f"{p['size_bytes']:,} B up, {p['response_bytes']:,} B back, "
            f"{p['processing_s'] * 1e3:g} ms processing · RTT {p['rtt_s'] * 1e3:g} ms · "
            f"{p['rate_bytes_per_s'] * 8e-6:g} Mbit/s · "
            f"{result['cc']} · kernel {result['kernel']}"
        )
    )
    table.add_column("mode", no_wrap=True)
    for col in ("runs", "median", "p90", "p99", "model", "sim", "ratio"):
        table.add_column(col, justify="right", no_wrap=True)
    for mode, s in result["summary"].items():
        table.add_row(
            mode,
            str(s["runs"]),
            *(f"{s[k]:.3f} s" for k in ("median_s", "p90_s", "p99_s", "closed_form_s", "sim_s")),
            f"{s['median_s'] / s['closed_form_s']:.2f}",
        )
    console.print(table)
    console.print(
        "model: the closed form; sim: the packet-level simulator; ratio: median / model."
    )
    console.print(
        f"serial floor (RTT + size/rate + processing + response/rate): "
        f"{next(iter(result['summary'].values()))['serial_floor_s']:.3f} s; cold adds 1 RTT of "
        "TCP handshake (no TLS) and the slow-start wait (IW 10 × 1448 B).",
        soft_wrap=True,
    )
    if result["warm_tuned_knobs"]:
        console.print("warm-tuned set: " + "; ".join(result["warm_tuned_knobs"]), soft_wrap=True)
    console.print(f"congestion control {result['cc']}: {result['cc_set_by']}", soft_wrap=True)
