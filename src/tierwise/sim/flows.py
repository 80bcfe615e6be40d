"""Competing flows: several transfers sharing one bottleneck.

Every flow has its own sender, receiver and controller (or, with
``transport="relay"``, its own relay session); all data packets go through one
uplink (the bottleneck, with its drop-tail queue and loss) and all ACKs through one
downlink, so the flows compete for the queue exactly as packets of one link do.
Each flow starts at its own time and sends a size, or with a duration writes as
fast as it is drained until then (the application keeps two windows ahead of the
sender, then stops writing). Reported per flow: goodput (bytes delivered in order
over its active time), share of the total, queueing delay of its data packets at
the bottleneck (mean, median, p99), completion time and retransmissions; Jain's
fairness index over the goodputs, ``(Σx)² / (n·Σx²)`` (1 = equal shares); and a
time series (delivered bytes per flow, queueing delay, and in runs of up to 16 flows
each TCP sender's window, flight, pacing rate, smoothed RTT and BBR's model) sampled
every RTT for plots.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tierwise.errors import SimulationError
from tierwise.proto.tcp import Receiver, Sender
from tierwise.sim.engine import Simulator
from tierwise.sim.link import Link
from tierwise.sim.relayend import RelayEnd, relay_config
from tierwise.sim.transport import TransferEnd
from tierwise.sim.workloads import PathSpec, TcpSpec, path_links

__all__ = ["TRANSPORTS", "FlowSpec", "jain_index", "run_flows"]

TRANSPORTS = ("tcp", "relay")
_TOP_UP_BYTES = 1 << 20  # a duration flow's writes: at least this much ahead of the sender
_CHECK_BYTES = 1 << 16  # a duration flow's supply is checked every this many delivered bytes
_MAX_SAMPLES = 4096  # time-series points kept per run (the interval doubles past this)
_MAX_SENDER_FLOWS = 16  # senders' state is sampled only in runs of at most this many flows


@dataclass(frozen=True)
class FlowSpec:
    """One flow: its controller, start time and either a size or a duration (SI units)."""

    cc: str = "cubic"
    start_s: float = 0.0
    size_bytes: int | None = None
    duration_s: float | None = None
    transport: str = "tcp"

    def __post_init__(self) -> None:
        if (self.size_bytes is None) == (self.duration_s is None):
            raise SimulationError("a flow needs exactly one of size_bytes and duration_s")
        bad_size = self.size_bytes is not None and self.size_bytes < 0
        bad_duration = self.duration_s is not None and not self.duration_s > 0
        if not self.start_s >= 0 or bad_size or bad_duration:
            raise SimulationError(
                f"a flow needs start ≥ 0 s, size ≥ 0 B or duration > 0 s, got {self}"
            )
        if self.transport not in TRANSPORTS:
            raise SimulationError(
                f"unknown transport {self.transport!r}; known: {', '.join(TRANSPORTS)}"
            )

    @property
    def end_s(self) -> float:
        """When a duration flow stops counting (infinite for a sized flow)."""
        return self.start_s + self.duration_s if self.duration_s is not None else math.inf


def jain_index(values: list[float]) -> float:
    """Jain's fairness index ``(Σx)² / (n·Σx²)``: 1 for equal shares, 1/n for one taker."""
    squares = sum(v * v for v in values)
    if not values or squares == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * squares)


class _FlowLink:
    """What one flow sees as its data link: the bottleneck, recording each accepted
    packet's queueing delay (FIFO at a constant rate: the backlog ahead, ``free_at − now``)."""

    __slots__ = ("link", "sim", "waits_s")

    def __init__(self, link: Link) -> None:
        self.link, self.sim = link, link.sim
        self.waits_s = array("d")

    def put(self, packet: Any, wire_bytes: int, deliver: Any) -> bool:
        link = self.link
        wait_s = link.free_at - self.sim.now
        if not link.put(packet, wire_bytes, deliver):
            return False
        self.waits_s.append(wait_s if wait_s > 0.0 else 0.0)
        return True


@dataclass
class _Flow:
    spec: FlowSpec
    end: TransferEnd | RelayEnd
    meter: _FlowLink
    delivered: int = 0  # in-order bytes by the flow's end (all of them for a sized flow)
    done_s: float | None = None
    next_check: int = 0  # delivered bytes at which a duration flow's supply is checked


def run_flows(
    path: PathSpec,
    tcp: TcpSpec,
    flows: list[FlowSpec],
    *,
    seed: int = 0,
    until: float = 3600.0,
    series: bool = False,
) -> dict[str, Any]:
    """Run ``flows`` over one path: per-flow goodput, share, queueing delay; Jain's index.

    Duration flows stop writing at their end; sized flows must finish by ``until``.
    With ``series`` the result also holds ``series`` (delivered bytes per flow and the
    bottleneck's queueing delay, every RTT) for plots.
    """
    if not flows:
        raise SimulationError("run_flows needs at least one flow")
    sim = Simulator(seed)
    uplink, downlink = path_links(sim, path)
    state = [_start(sim, tcp, flow, i, uplink, downlink) for i, flow in enumerate(flows)]
    sampler = _Sampler(sim, uplink, state, max(path.rtt, 1e-3)) if series else None
    sized = any(f.size_bytes is not None for f in flows)
    sim.run(until=until if sized else max(f.end_s for f in flows))
    out = _summary(flows, state, until)
    out["events"] = sim.events
    out["data_packets"] = uplink.stats.packets
    if sampler is not None:
        out["series"] = sampler.result()
    return out


def _start(
    sim: Simulator, tcp: TcpSpec, flow: FlowSpec, i: int, uplink: Link, downlink: Link
) -> _Flow:
    """Build flow ``i``'s endpoints and schedule its first write at its start time."""
    meter = _FlowLink(uplink)
    end: TransferEnd | RelayEnd
    if flow.transport == "relay":
        end = RelayEnd(sim, meter, downlink, f"flow{i}", relay_config(tcp.mss + tcp.header))
    else:
        sender = Sender(
            mss=tcp.mss, header=tcp.header, initial_window=tcp.initial_window, cc=flow.cc
        )
        receiver = Receiver(
            ack_every=tcp.ack_every, ack_delay=tcp.ack_delay, ack_wire=tcp.ack_bytes
        )
        end = TransferEnd(sim, sender, receiver, meter, downlink, f"flow{i}")  # type: ignore[arg-type]
    state = _Flow(flow, end, meter, done_s=flow.start_s if flow.size_bytes == 0 else None)
    end.on_delivered = _on_delivered(sim, state)
    if flow.size_bytes is not None:
        sim.at(flow.start_s, _write, end, flow.size_bytes, True)
    else:
        sim.at(flow.start_s, _write, end, _TOP_UP_BYTES + 4 * tcp.initial_window * tcp.mss, False)
        if isinstance(end, RelayEnd):
            sim.at(flow.end_s, end.stop)
    return state


def _write(end: TransferEnd | RelayEnd, nbytes: int, last: bool) -> None:
    if isinstance(end, RelayEnd):
        end.write(nbytes, end=last)
    else:
        end.write(nbytes)


def _unsent_bytes(end: TransferEnd | RelayEnd) -> tuple[int, float]:
    """Bytes written and not yet sent (TCP) or not yet acknowledged (relay), and the window."""
    if isinstance(end, RelayEnd):
        return end.buffered_bytes(), end.client.rate.cwnd_bytes
    s = end.sender
    return s.app_limit - s.snd_nxt, s.cwnd


def _on_delivered(sim: Simulator, state: _Flow) -> Callable[[int], None]:
    """Count in-order bytes up to the flow's end, mark a sized flow's completion, and keep
    a duration flow's sender supplied until its end."""
    flow, end = state.spec, state.end
    end_s, size = flow.end_s, flow.size_bytes

    def delivered(n: int) -> None:
        now = sim.now
        if now > end_s + 1e-12:
            return
        state.delivered = n
        if size is not None:
            if n >= size and state.done_s is None:
                state.done_s = now
                if isinstance(end, RelayEnd):
                    end.stop()
            return
        if n >= state.next_check:  # every 64 kB: far less than the half-MiB margin
            state.next_check = n + _CHECK_BYTES
            unsent, window = _unsent_bytes(end)
            if unsent < 2 * window + _TOP_UP_BYTES // 2:
                _write(end, _TOP_UP_BYTES, False)

    return delivered


def _summary(flows: list[FlowSpec], state: list[_Flow], until: float) -> dict[str, Any]:
    rows = []
    for i, st in enumerate(state):
        flow = st.spec
        if flow.size_bytes is not None and st.done_s is None and flow.size_bytes > 0:
            raise SimulationError(
                f"flow {i} did not finish within the simulated time (run.until = {until:g} s)"
            )
        stop_s = st.done_s if st.done_s is not None else flow.start_s + (flow.duration_s or 0.0)
        active_s = max(stop_s - flow.start_s, 1e-12)
        rows.append(
            {
                "cc": flow.cc if flow.transport == "tcp" else "relay",
                "transport": flow.transport,
                "start_s": flow.start_s,
                "done_s": st.done_s,
                "completion_s": (st.done_s - flow.start_s) if st.done_s is not None else None,
                "delivered_bytes": st.delivered,
                "goodput_bytes_per_s": st.delivered / active_s,
                **_delays(st.meter.waits_s),
                "retransmissions": _retransmissions(st.end),
                "timeouts": 0 if isinstance(st.end, RelayEnd) else st.end.sender.stats.rtos,
            }
        )
    goodputs = [r["goodput_bytes_per_s"] for r in rows]
    total = sum(goodputs) or 1.0
    for r in rows:
        r["share"] = r["goodput_bytes_per_s"] / total
    return {"flows": rows, "jain_index": jain_index(goodputs)}


def _delays(waits_s: array) -> dict[str, float]:
    """Mean, median and p99 queueing delay of one flow's packets (0 if it sent none)."""
    if not waits_s:
        return {"queueing_delay_s": 0.0, "queue_p50_s": 0.0, "queue_p99_s": 0.0}
    w = np.frombuffer(waits_s, dtype=np.float64)
    p50, p99 = np.quantile(w, [0.5, 0.99])
    return {
        "queueing_delay_s": float(w.mean()),
        "queue_p50_s": float(p50),
        "queue_p99_s": float(p99),
    }


def _retransmissions(end: TransferEnd | RelayEnd) -> int:
    """Segments sent again (TCP) or packets declared lost, whose bytes went again (relay)."""
    if isinstance(end, RelayEnd):
        return end.client.stats.packets_lost
    return end.sender.stats.retransmissions


class _Sampler:
    """Every ``interval_s``: each flow's delivered bytes and the bottleneck's queueing
    delay, and with at most ``_MAX_SENDER_FLOWS`` flows each sender's state (one flat
    array of floats per sample, NaN for none: at most 16 × 6 × 8,192 values); stops once
    no flow is active (so it never keeps a finished run alive)."""

    def __init__(self, sim: Simulator, link: Link, state: list[_Flow], interval_s: float) -> None:
        self.sim, self.link, self.state, self.interval_s = sim, link, state, interval_s
        self.times_s: list[float] = []
        self.queue_s: list[float] = []
        self.delivered: list[list[int]] = []
        self.senders: list[array] | None = [] if len(state) <= _MAX_SENDER_FLOWS else None
        self.last_s = max(st.spec.end_s if st.spec.size_bytes is None else math.inf for st in state)
        sim.at(0.0, self._tick)

    def _tick(self) -> None:
        now = self.sim.now
        self.times_s.append(now)
        self.queue_s.append(max(0.0, self.link.free_at - now))
        self.delivered.append([st.delivered for st in self.state])
        if self.senders is not None:
            row = array("d")
            for st in self.state:
                row.extend(_sender_state(st.end))
            self.senders.append(row)
        if len(self.times_s) >= 2 * _MAX_SAMPLES:
            del self.times_s[1::2], self.queue_s[1::2], self.delivered[1::2]
            if self.senders is not None:
                del self.senders[1::2]
            self.interval_s *= 2
        active = any(st.done_s is None and now < st.spec.end_s for st in self.state)
        if active and now < self.last_s:
            self.sim.at(now + self.interval_s, self._tick)

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "time_s": self.times_s,
            "queue_delay_s": self.queue_s,
            "delivered_bytes": [list(col) for col in zip(*self.delivered, strict=True)],
        }
        if self.senders is not None:
            width = len(_SENDER_KEYS)
            for k, key in enumerate(_SENDER_KEYS):
                out[key] = [
                    [
                        None if math.isnan(v) else v
                        for v in (row[f * width + k] for row in self.senders)
                    ]
                    for f in range(len(self.state))
                ]
        return out


# Per flow and sample: the TCP sender's window, flight, pacing rate and smoothed RTT,
# and BBR's model (bottleneck bandwidth, RTprop); None where a flow has no such value.
_SENDER_KEYS = (
    "cwnd_bytes",
    "in_flight_bytes",
    "pacing_bytes_per_s",
    "srtt_s",
    "btlbw_bytes_per_s",
    "min_rtt_s",
)


def _sender_state(end: TransferEnd | RelayEnd) -> tuple[float, ...]:
    """One sample of ``_SENDER_KEYS`` for a flow, NaN where it has no such value (all
    NaN for a relay flow)."""
    nan = math.nan
    if isinstance(end, RelayEnd):
        return (nan,) * len(_SENDER_KEYS)
    s = end.sender
    cc = s.cc
    pacing = cc.pacing_rate  # type: ignore[union-attr]
    btlbw = getattr(cc, "btlbw", None)
    min_rtt = getattr(cc, "min_rtt", None)
    return (
        float(s.cwnd),
        float(s.flight),
        nan if pacing is None else pacing,
        nan if s.srtt is None else s.srtt,
        nan if btlbw is None else btlbw,
        min_rtt if min_rtt is not None and math.isfinite(min_rtt) else nan,
    )
