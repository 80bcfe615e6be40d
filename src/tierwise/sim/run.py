"""Run a sim file: one or many seeds, any workload kind, a progress bar for long batches."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tierwise.errors import SimulationError
from tierwise.sim.scenario import SimFile
from tierwise.sim.workloads import PathSpec, TcpSpec, run_request

__all__ = ["MAX_PACKETS", "check_budget", "estimate_packets", "run_sim_file", "specs"]

# the default work budget: data packets over all runs. The simulator moves some
# 20,000–50,000 packets a second on one core, so this is a few minutes at most.
MAX_PACKETS = 5_000_000
_BAR_ABOVE = 200_000  # packets: a run this long shows a spinner while it works


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
    rtts = 0
    if t.handshake:  # the model module loads numpy: only when a handshake is asked for
        from tierwise.model.transport import HANDSHAKE_RTTS

        rtts = HANDSHAKE_RTTS[t.handshake]
    tcp = TcpSpec(
        t.cc,
        int(t.mss),
        int(t.header),
        int(t.ack),
        t.initial_window,
        t.ack_every,
        t.ack_delay,
        handshake_rtts=rtts,
        syn_window=int(t.syn_window) if t.syn_window is not None else None,
    )
    return path, tcp


Outcome = tuple[float, dict[str, Any], Any]  # (time_s, summary, trace or None)


def _request(sf: SimFile, seed: int, trace: bool) -> Outcome:
    path, tcp = specs(sf)
    w = sf.workload
    if w.transport == "relay":
        return _relay_request(sf, seed)
    r = run_request(
        path,
        tcp,
        int(w.upload),
        int(w.download),
        w.processing,
        seed=seed,
        trace=trace,
        until=sf.run.until,
    )
    return r.time_s, r.summary(), r.trace


def _relay_request(sf: SimFile, seed: int) -> Outcome:
    """The request over a relay session: upload on one stream, the reply on the same."""
    from tierwise.sim.engine import Simulator
    from tierwise.sim.relayend import RelayEnd, relay_config
    from tierwise.sim.workloads import path_links

    path, tcp = specs(sf)
    w = sf.workload
    sim = Simulator(seed)
    up, down = path_links(sim, path)
    end = RelayEnd(sim, up, down, "relay", relay_config(tcp.mss + tcp.header))
    marks: dict[str, float] = {}

    def request_in() -> None:
        marks["upload_done_s"] = sim.now
        sim.schedule(w.processing, end.reply, int(w.download))

    def reply_in() -> None:
        marks["time_s"] = sim.now
        end.stop()

    end.on_request, end.on_reply = request_in, reply_in
    end.write(int(w.upload), end=True)
    sim.run(until=sf.run.until)
    if "time_s" not in marks:
        raise SimulationError(
            f"the relay request did not finish within run.until = {sf.run.until:g} s"
        )
    stats = end.client.stats
    summary = {
        "time_s": marks["time_s"],
        "upload_done_s": marks["upload_done_s"],
        "events": sim.events,
        "transport": "relay",
        "packets_up": up.stats.packets,
        "packets_down": down.stats.packets,
        "wire_bytes_up": up.stats.bytes,
        "wire_bytes_down": down.stats.bytes,
        "packets_lost": stats.packets_lost,
        "repair_packets": stats.repair_packets_sent,
        "link_dropped": up.stats.dropped + down.stats.dropped,
    }
    return marks["time_s"], summary, None


def _flows(sf: SimFile, seed: int, trace: bool, series: bool = False) -> Outcome:
    from tierwise.sim.flows import FlowSpec, run_flows

    path, tcp = specs(sf)
    flows = [
        FlowSpec(
            f.cc or tcp.cc,
            f.start,
            int(f.size) if f.size is not None else None,
            f.duration,
            f.transport,
        )
        for f in sf.flow
    ]
    r = run_flows(path, tcp, flows, seed=seed, until=sf.run.until, series=series)
    ends = [
        row["done_s"] if row["done_s"] is not None else spec.end_s
        for row, spec in zip(r["flows"], flows, strict=True)
    ]
    r["time_s"] = max(ends)
    return r["time_s"], r, None


def _fec(sf: SimFile, seed: int, trace: bool) -> Outcome:
    from tierwise.sim.fec import run_fec_request

    path, _ = specs(sf)
    w = sf.workload
    if isinstance(path.up_loss, dict):
        raise SimulationError(
            "an FEC request plans its repair for a Bernoulli loss rate; "
            "give path.loss_up as a number"
        )
    r = run_fec_request(
        path.up_rate,
        path.down_rate,
        path.rtt,
        path.up_loss,
        int(w.upload),
        int(sf.tcp.mss),
        w.processing,
        w.target,
        seed,
        reply_bytes=int(w.download),
        down_loss=path.down_loss,
        reply=w.reply,
        until=sf.run.until,
    )
    return (
        r.time_s,
        {
            "time_s": r.time_s,
            "upload_done_s": r.upload_done_s,
            "rounds": r.rounds,
            "payload_ok": r.payload_ok,
        },
        None,
    )


def _stream(sf: SimFile, seed: int, trace: bool) -> Outcome:
    from tierwise.sim.streaming import run_stream

    path, tcp = specs(sf)
    w = sf.workload
    overrides = {int(k): v for k, v in w.propagation_overrides.items()}
    r = run_stream(
        path,
        tcp,
        w.chunks,
        w.period,
        int(w.chunk_bytes),
        w.compute,
        w.buffer,
        propagation_overrides_s=overrides,
        transport=w.transport,
        seed=seed,
        until=sf.run.until,
    )
    end = float(r.play_s[-1]) + w.period
    return (
        end,
        {
            "time_s": end,
            "first_play_s": r.first_play_s,
            "stall_s": r.total_stall_s,
            "arrive_s": r.arrive_s.tolist(),
            "play_s": r.play_s.tolist(),
        },
        None,
    )


def _streams(sf: SimFile, seed: int, trace: bool) -> Outcome:
    from tierwise.sim.streaming import StreamWrite, run_streams

    path, tcp = specs(sf)
    w = sf.workload
    writes = [StreamWrite(x.at, x.stream, int(x.bytes), x.priority) for x in w.writes]
    r = run_streams(path, tcp, writes, w.policy, w.delivery, seed, until=sf.run.until)
    delivered = r.delivered_s
    return (
        max(delivered.values()),
        {
            "time_s": max(delivered.values()),
            "sent_done_s": r.sent_done_s,
            "complete_s": r.complete_s,
            "delivered_s": delivered,
            "retransmissions": r.retransmissions,
        },
        None,
    )


def _rounds(sf: SimFile, seed: int, trace: bool) -> Outcome:
    from tierwise.sim.streaming import run_rounds

    path, tcp = specs(sf)
    w = sf.workload
    r = run_rounds(
        path,
        tcp,
        w.rounds,
        int(w.upload),
        int(w.download),
        w.client,
        w.model,
        seed,
        idle_restart=w.idle_restart,
        until=sf.run.until,
    )
    return r.time_s, {"time_s": r.time_s, "round_s": r.round_s.tolist()}, None


def _wireless(sf: SimFile, seed: int, trace: bool) -> Outcome:
    from tierwise.sim.wireless import run_wireless_transfer

    _, tcp = specs(sf)
    w = sf.workload
    r = run_wireless_transfer(
        int(w.upload),
        tcp,
        data_rate_bit_per_s=8 * w.data_rate,
        ack_rate_bit_per_s=8 * w.ack_rate,
        wired_one_way_s=w.wired_one_way,
        seed=seed,
        until=sf.run.until,
    )
    summary = {k: v for k, v in vars(r).items() if isinstance(v, int | float)}
    return r.time_s, summary, None


_KINDS: dict[str, Callable[[SimFile, int, bool], Outcome]] = {
    "request": _request,
    "fec-request": _fec,
    "stream": _stream,
    "streams": _streams,
    "rounds": _rounds,
    "wireless": _wireless,
}


def _segments(size: float, mss: float) -> int:
    return math.ceil(size / mss) if size > 0 else 0


def _flow_packets(sf: SimFile) -> int:
    """Data packets of competing flows: each size's segments, plus what the bottleneck can
    carry while the duration flows run (first start to last end, at the full uplink rate)."""
    mss, wire = float(sf.tcp.mss), float(sf.tcp.mss + sf.tcp.header)
    sized = [f for f in sf.flow if f.size is not None]
    timed = [f for f in sf.flow if f.duration is not None]
    total = sum(_segments(f.size, mss) + 1 for f in sized)
    if timed:
        span_s = max(f.start + f.duration for f in timed) - min(f.start for f in timed)
        total += math.ceil(span_s * sf.path.uplink / wire) + len(timed)
    return total


def estimate_packets(sf: SimFile) -> int:
    """Data packets of one run (both directions, before any loss): the work it takes."""
    if sf.workload is None:
        return _flow_packets(sf)
    w, mss = sf.workload, float(sf.tcp.mss)
    kind = w.kind
    if kind in ("request", "rounds"):
        one = _segments(w.upload, mss) + _segments(w.download, mss) + 1
        return one * (w.rounds if kind == "rounds" else 1)
    if kind == "fec-request":
        return math.ceil(_segments(w.upload, mss) / w.target) + _segments(w.download, mss) + 1
    if kind == "stream":
        return w.chunks * max(1, _segments(w.chunk_bytes, mss))
    if kind == "streams":
        return sum(_segments(x.bytes, mss) for x in w.writes) + 1
    return _segments(w.upload, mss) + 1  # wireless


def _kind(sf: SimFile) -> str:
    return "flows" if sf.workload is None else sf.workload.kind


def check_budget(sf: SimFile, max_packets: int = MAX_PACKETS, *, trace: bool = False) -> int:
    """Refuse, before any work, a sim over the packet budget or a trace nobody records."""
    kind = _kind(sf)
    if trace and (kind != "request" or sf.workload.transport != "tcp"):
        what = "relay request" if kind == "request" else repr(kind)
        raise SimulationError(
            f"--trace records a TCP request workload's packets; this file's workload is {what}"
        )
    per_run = estimate_packets(sf)
    total = per_run * sf.run.runs
    if total > max_packets:
        raise SimulationError(
            f"this simulation would move about {total:,} packets ({per_run:,} a run × "
            f"{sf.run.runs:,} runs), over the budget of {max_packets:,}; "
            f"raise it with --max-packets {total}"
        )
    return total


def run_sim_file(
    sf: SimFile,
    *,
    trace: bool = False,
    progress: bool = False,
    max_packets: int = MAX_PACKETS,
    series: bool = False,
) -> dict[str, Any]:
    """Summary of ``sf.run.runs`` seeds (seed, seed+1, ...); the first run's trace if asked.

    Refused up front when it would move more than ``max_packets`` packets in all.
    With ``[[flow]]`` tables, ``series`` keeps the first run's time series for plots.
    """
    total = check_budget(sf, max_packets, trace=trace)
    runs = sf.run.runs
    kind = _kind(sf)

    def run_one(sf: SimFile, seed: int, trace: bool) -> Outcome:
        if kind == "flows":
            return _flows(sf, seed, trace, series=series and seed == sf.run.seed)
        return _KINDS[kind](sf, seed, trace)

    outcomes: list[Outcome] = []
    bar = _bar() if progress and (runs > 1 or total > _BAR_ABOVE) else None
    with bar if bar is not None else _Null() as b:
        what = f"simulating ~{total:,} packets"
        task = b.add_task(what, total=runs) if bar is not None else None
        for i in range(runs):
            outcomes.append(run_one(sf, sf.run.seed + i, trace and i == 0))
            if bar is not None:
                b.advance(task)
    if runs == 1:  # numpy's mean of one value is that value: no numpy import for one run
        mean_s = float(outcomes[0][0])
    else:
        import numpy as np

        times = np.array([o[0] for o in outcomes])
        mean_s = float(times.mean())
    out: dict[str, Any] = {
        "kind": kind,
        "runs": runs,
        "seed": sf.run.seed,
        "time_s": mean_s,
        "first_run": outcomes[0][1],
    }
    if kind == "request":
        w = sf.workload
        out["transport"] = w.transport
        out["goodput_bytes_per_s"] = (w.upload + w.download) / mean_s
    if kind == "flows":
        jains = [o[1]["jain_index"] for o in outcomes]
        out["jain_index"] = float(sum(jains) / len(jains))
    if runs > 1:
        out.update(
            {
                "p50_s": float(np.quantile(times, 0.5)),
                "p99_s": float(np.quantile(times, 0.99)),
                "min_s": float(times.min()),
                "max_s": float(times.max()),
            }
        )
    out["trace"] = outcomes[0][2]
    return out


def _bar():
    """A progress bar on stderr (stdout may be a pipe or JSON)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None
