"""What the lab's commands share: the console, option types, parsers, progress, records.

Parsers name the option in their error (a :class:`ScenarioError` or ``UnitError``:
one line, exit 2); :func:`build_experiment` and :func:`build_throughput` turn the
``request`` and ``throughput`` options into their experiments (``--via`` uses both).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from tierwise.console import WholeConsole
from tierwise.errors import ScenarioError, number_slip, shown
from tierwise.outfile import write_text

if TYPE_CHECKING:
    from tierwise.lab.experiments.request import RequestExperiment
    from tierwise.lab.experiments.throughput import ThroughputExperiment

__all__ = [
    "JsonRecordOpt",
    "LossDownOpt",
    "LossUpOpt",
    "MtuOpt",
    "RateOpt",
    "RecordOpt",
    "RttOpt",
    "SeedOpt",
    "build_experiment",
    "build_throughput",
    "check_duration",
    "check_loss",
    "out",
    "parse_mtu",
    "parse_option",
    "parse_size",
    "parse_time",
    "progress",
    "write_record",
]

out = WholeConsole()  # a table too wide is drawn leaner or in blocks, never cut

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


def parse_time(value: str, option: str) -> float:
    """A time option in seconds (not negative; an error names ``option``)."""
    return parse_option(value, "time", option)


def parse_option(value: str, kind: str, option: str) -> float:
    """A quantity of ``kind`` ("time", "rate", "size") in SI units, not negative."""
    from tierwise.errors import UnitError
    from tierwise.units import in_range, parse_quantity

    try:
        number = in_range(parse_quantity(value, kind), kind)
    except UnitError as exc:  # name the option: the value alone may not say which it was
        raise UnitError(f"{option}: {exc}") from None
    if number < 0:
        raise ScenarioError(f"{shown(value)} must not be negative", source=option)
    return number


def parse_size(value: str, option: str) -> int:
    """A size: a bare integer is a byte count (as ``--size 354640`` in §12.3.5), else a unit."""
    text = value.strip()
    if text.isdigit():  # the strict parser bounds its length and magnitude
        text += " B"
    return round(parse_option(text, "size", option))


def parse_mtu(value: str, via: str | None) -> int:
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


def check_loss(value: float, option: str) -> float:
    if not 0.0 <= value < 1.0:
        raise ScenarioError(f"loss must be in [0, 1), got {value}", source=option)
    return value


@contextlib.contextmanager
def progress(total: int, what: str) -> Iterator[Callable[[object], None]]:
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


def write_record(result: dict, record: Path | None) -> None:
    if record is None:
        return
    try:
        write_text(record, json.dumps(result, indent=1) + "\n")
    except OSError as exc:
        raise ScenarioError(
            f"cannot write the record: {exc.strerror or exc}", source=str(record)
        ) from exc


def check_duration(exp: Any, levels: int, max_hours: float) -> None:
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


def build_experiment(
    size, proc, response, modes, runs, cc, rtt, rate, loss_up, loss_down, seed
) -> RequestExperiment:
    """The :class:`RequestExperiment` the ``request`` options describe (input errors exit 2)."""
    from tierwise.lab.experiments.request import RequestExperiment

    rate_bps = parse_option(rate, "rate", "--rate")
    if rate_bps <= 0:
        raise ScenarioError("the rate must be positive", source="--rate")
    return RequestExperiment(
        size_bytes=parse_size(size, "--size"),
        processing_s=parse_time(proc, "--proc"),
        response_bytes=parse_size(response, "--response"),
        modes=tuple(m.strip() for m in modes.split(",") if m.strip()),
        runs=runs,
        cc=cc,
        rtt_s=parse_time(rtt, "--rtt"),
        rate_bytes_per_s=rate_bps,
        loss_up=check_loss(loss_up, "--loss-up"),
        loss_down=check_loss(loss_down, "--loss-down"),
        seed=seed,
    )


def build_throughput(loss, cc, duration, rtt, rate, seed) -> ThroughputExperiment:
    """The :class:`ThroughputExperiment` the ``throughput`` options describe."""
    from tierwise.lab.experiments.throughput import ThroughputExperiment

    levels = []
    for item in (x.strip() for x in loss.split(",")):
        try:
            levels.append(check_loss(float(item), "--loss"))
        except ValueError:
            why = number_slip(item) or f"{shown(item)} is not a probability"
            raise ScenarioError(why, source="--loss") from None
    rate_bps = parse_option(rate, "rate", "--rate")
    if rate_bps <= 0:
        raise ScenarioError("the rate must be positive", source="--rate")
    duration_s = parse_time(duration, "--duration")
    if duration_s <= 0:
        raise ScenarioError("the duration must be positive", source="--duration")
    return ThroughputExperiment(
        losses=tuple(levels),
        ccs=tuple(c.strip() for c in cc.split(",") if c.strip()),
        duration_s=duration_s,
        rtt_s=parse_time(rtt, "--rtt"),
        rate_bytes_per_s=rate_bps,
        seed=seed,
    )
