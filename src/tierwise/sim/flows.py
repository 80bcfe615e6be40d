"""Competing flows: several TCP transfers sharing one bottleneck (issue 14).

Every flow has its own sender, receiver and controller; all data segments go through
one uplink (the bottleneck, with its drop-tail queue and loss) and all ACKs through
one downlink, so the flows compete for the queue exactly as packets of one link do.
Each flow starts at its own time and sends a size (or, with a duration, as much as
it can until then). Reported per flow: goodput (bytes delivered in order over its
active time), mean queueing delay of its data packets, retransmissions; and Jain's
fairness index over the goodputs, ``(Σx)² / (n·Σx²)`` (1 = equal shares).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tierwise.errors import SimulationError
from tierwise.proto.tcp import Receiver, Segment, Sender
from tierwise.sim.engine import Simulator
from tierwise.sim.link import Link
from tierwise.sim.transport import TransferEnd
from tierwise.sim.workloads import PathSpec, TcpSpec, path_links

__all__ = ["FlowSpec", "jain_index", "run_flows"]

_BULK_BYTES = 1 << 50  # a duration-bounded flow's "size": more than it can ever send


@dataclass(frozen=True)
class FlowSpec:
    """One flow: its controller, start time and either a size or a duration (SI units)."""

    cc: str = "cubic"
    start_s: float = 0.0
    size_bytes: int | None = None
    duration_s: float | None = None

    def __post_init__(self) -> None:
        if (self.size_bytes is None) == (self.duration_s is None):
            raise SimulationError("a flow needs exactly one of size_bytes and duration_s")
        bad_size = self.size_bytes is not None and self.size_bytes < 0
        bad_duration = self.duration_s is not None and not self.duration_s > 0
        if not self.start_s >= 0 or bad_size or bad_duration:
            raise SimulationError(
                f"a flow needs start ≥ 0 s, size ≥ 0 B or duration > 0 s, got {self}"
            )


def jain_index(values: list[float]) -> float:
    """Jain's fairness index ``(Σx)² / (n·Σx²)``: 1 for equal shares, 1/n for one taker."""
    squares = sum(v * v for v in values)
    if not values or squares == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * squares)


class _QueueMeter:
    """Sums each flow's queueing delay at the bottleneck (FIFO at a constant rate: a
    packet waits ``free_at − now``, the backlog ahead of it)."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.delay_s: dict[int, float] = {}
        self.count: dict[int, int] = {}

    def put_for(self, flow: int, packet: Any, wire_bytes: int, deliver: Any) -> bool:
        link = self.link
        wait_s = max(0.0, link.free_at - link.sim.now)
        if not link.put(packet, wire_bytes, deliver):
            return False
        self.delay_s[flow] = self.delay_s.get(flow, 0.0) + wait_s
        self.count[flow] = self.count.get(flow, 0) + 1
        return True


class _FlowLink:
    """What one flow's TransferEnd sees as its data link: the meter, tagged with the flow."""

    __slots__ = ("flow", "meter")

    def __init__(self, meter: _QueueMeter, flow: int) -> None:
        self.meter, self.flow = meter, flow

    def put(self, packet: Segment, wire_bytes: int, deliver: Any) -> bool:
        return self.meter.put_for(self.flow, packet, wire_bytes, deliver)


def run_flows(
    path: PathSpec, tcp: TcpSpec, flows: list[FlowSpec], *, seed: int = 0, until: float = 3600.0
) -> dict[str, Any]:
    """Run ``flows`` over one path; per-flow goodput and queueing delay, Jain's index."""
    if not flows:
        raise SimulationError("run_flows needs at least one flow")
    sim = Simulator(seed)
    uplink, downlink = path_links(sim, path)
    meter = _QueueMeter(uplink)
    ends: list[TransferEnd] = []
    marks: list[dict[str, float]] = [{} for _ in flows]
    for i, flow in enumerate(flows):
        sender = Sender(
            mss=tcp.mss, header=tcp.header, initial_window=tcp.initial_window, cc=flow.cc
        )
        receiver = Receiver(
            ack_every=tcp.ack_every, ack_delay=tcp.ack_delay, ack_wire=tcp.ack_bytes
        )
        data = _FlowLink(meter, i)
        end = TransferEnd(sim, sender, receiver, data, downlink, f"flow{i}")  # type: ignore[arg-type]
        end.on_delivered = _delivery_mark(sim, flow, marks[i])
        size = flow.size_bytes if flow.size_bytes is not None else _BULK_BYTES
        sim.at(flow.start_s, end.write, size)
        ends.append(end)
    # Duration-bounded flows never run dry: stop at the last one's end (sized flows
    # must be done by then); with sizes only, run until every flow is done.
    timed = [f.start_s + f.duration_s for f in flows if f.duration_s is not None]
    sim.run(until=max(timed) if timed else until)
    return _summary(sim, flows, ends, marks, meter)


def _delivery_mark(sim: Simulator, flow: FlowSpec, mark: dict[str, float]) -> Callable[[int], None]:
    """on_delivered: remember when the flow finished (sized) and how much arrived by its end."""
    end_s = flow.start_s + flow.duration_s if flow.duration_s else math.inf

    def delivered(n: int) -> None:
        if sim.now <= end_s + 1e-12:
            mark["bytes"] = n
        if flow.size_bytes is not None and n >= flow.size_bytes and "done" not in mark:
            mark["done"] = sim.now

    return delivered


def _summary(
    sim: Simulator,
    flows: list[FlowSpec],
    ends: list[TransferEnd],
    marks: list[dict[str, float]],
    meter: _QueueMeter,
) -> dict[str, Any]:
    rows = []
    for i, (flow, end, mark) in enumerate(zip(flows, ends, marks, strict=True)):
        if flow.size_bytes is not None and "done" not in mark and flow.size_bytes > 0:
            raise SimulationError(f"flow {i} did not finish within the simulated time")
        stop_s = mark.get("done", flow.start_s + (flow.duration_s or 0.0))
        active_s = max(stop_s - flow.start_s, 1e-12)
        count = meter.count.get(i, 0)
        rows.append(
            {
                "cc": flow.cc,
                "start_s": flow.start_s,
                "done_s": mark.get("done"),
                "delivered_bytes": mark.get("bytes", 0),
                "goodput_bytes_per_s": mark.get("bytes", 0) / active_s,
                "queueing_delay_s": meter.delay_s.get(i, 0.0) / count if count else 0.0,
                "retransmissions": end.sender.stats.retransmissions,
            }
        )
    goodputs = [r["goodput_bytes_per_s"] for r in rows]
    total = sum(goodputs) or 1.0
    for r in rows:
        r["share"] = r["goodput_bytes_per_s"] / total
    return {"flows": rows, "jain_index": jain_index(goodputs), "events": sim.events}
