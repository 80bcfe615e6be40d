"""Run a sim file: one or many seeds, with a progress bar for long batches."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tierwise.sim.scenario import SimFile
from tierwise.sim.workloads import PathSpec, RequestResult, TcpSpec, run_request

__all__ = ["run_sim_file", "specs"]


def specs(sf: SimFile) -> tuple[PathSpec, TcpSpec]:
    """The simulator's path and transport specs from a validated sim file."""
    p, t = sf.path, sf.tcp

    def loss(v: Any) -> Any:
        return v.model_dump() if hasattr(v, "model_dump") else v

    path = PathSpec(
        p.uplink,
        p.downlink,
        p.rtt,
        loss(p.loss_up),
        loss(p.loss_down),
        queue_bytes=p.queue if p.queue is not None else math.inf,
        queue_packets=p.queue_packets or math.inf,
    )
    tcp = TcpSpec(
        t.cc, int(t.mss), int(t.header), int(t.ack), t.initial_window, t.ack_every, t.ack_delay
    )
    return path, tcp


def run_one(sf: SimFile, seed: int, trace: bool = False) -> RequestResult:
    path, tcp = specs(sf)
    w = sf.workload
    return run_request(
        path,
        tcp,
        int(w.upload),
        int(w.download),
        w.processing,
        seed=seed,
        trace=trace,
        until=sf.run.until,
    )


def run_sim_file(sf: SimFile, *, trace: bool = False, progress: bool = False) -> dict[str, Any]:
    """Summary of ``sf.run.runs`` seeds (seed, seed+1, ...); the first run's trace if asked."""
    runs = sf.run.runs
    results: list[RequestResult] = []
    bar = _bar(runs) if progress and runs > 1 else None
    with bar if bar is not None else _Null() as b:
        task = b.add_task("simulating", total=runs) if bar is not None else None
        for i in range(runs):
            results.append(run_one(sf, sf.run.seed + i, trace=trace and i == 0))
            if bar is not None:
                b.advance(task)
    first = results[0]
    times = np.array([r.time_s for r in results])
    w = sf.workload
    out: dict[str, Any] = {
        "runs": runs,
        "seed": sf.run.seed,
        "time_s": float(times.mean()),
        "goodput_bytes_per_s": (w.upload + w.download) / float(times.mean()),
        "first_run": first.summary(),
    }
    if runs > 1:
        out.update(
            {
                "p50_s": float(np.quantile(times, 0.5)),
                "p99_s": float(np.quantile(times, 0.99)),
                "min_s": float(times.min()),
                "max_s": float(times.max()),
            }
        )
    out["trace"] = first.trace
    return out


def _bar(total: int):
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(),
        transient=True,
    )


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None
