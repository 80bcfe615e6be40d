"""Workloads on simulated paths: bulk transfer and request/response (§12.3.2)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tierwise.errors import SimulationError
from tierwise.proto.tcp import Receiver, Sender
from tierwise.sim.engine import Simulator
from tierwise.sim.link import Link, loss_process
from tierwise.sim.transport import Trace, TransferEnd

__all__ = ["PathSpec", "RequestResult", "TcpSpec", "path_links", "run_request"]


@dataclass(frozen=True)
class TcpSpec:
    """Transport settings shared by both directions."""

    cc: str = "newreno"
    mss: int = 1448
    header: int = 52
    ack_bytes: int = 52
    initial_window: int = 10
    ack_every: int = 1
    ack_delay: float = 0.0
    handshake_rtts: int = 0  # control round trips before data: 2 for TCP + TLS 1.3 (§12.3.1)
    control_bytes: int = 300  # wire size of a handshake packet (SYN, ClientHello, ...)
    # With a handshake: the window the peer's SYN/SYN-ACK announced, unscaled, caps the
    # first flight (65,535 B at most, RFC 7323 §2.2). None: not modelled.
    syn_window: int | None = None


@dataclass(frozen=True)
class PathSpec:
    """Both directions of a path (SI units); ``loss_*`` may be a float or a GE dict."""

    up_rate: float
    down_rate: float
    rtt: float
    up_loss: Any = 0.0
    down_loss: Any = 0.0
    queue_bytes: float = math.inf
    queue_packets: float = math.inf


@dataclass
class RequestResult:
    """Outcome of one request/response."""

    time_s: float
    upload_done_s: float | None
    events: int
    up: dict[str, Any] = field(default_factory=dict)
    down: dict[str, Any] = field(default_factory=dict)
    trace: Trace | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "time_s": self.time_s,
            "upload_done_s": self.upload_done_s,
            "events": self.events,
            "upload": self.up,
            "download": self.down,
        }


def path_links(sim: Simulator, path: PathSpec) -> tuple[Link, Link]:
    """Uplink and downlink of ``path``: its rates and loss, half the RTT each way."""
    q = {"queue_bytes": path.queue_bytes, "queue_packets": path.queue_packets}
    half = path.rtt / 2
    up = Link(
        sim,
        path.up_rate,
        half,
        # no stream (and no numpy) for a lossless direction: streams are independent
        loss=loss_process(path.up_loss, sim.rng("loss-up")) if path.up_loss else None,
        name="uplink",
        **q,
    )
    down = Link(
        sim,
        path.down_rate,
        half,
        loss=loss_process(path.down_loss, sim.rng("loss-down")) if path.down_loss else None,
        name="downlink",
        **q,
    )
    return up, down


def _end_stats(end: TransferEnd, link: Link, ack_link: Link) -> dict[str, Any]:
    s = end.sender.stats
    return {
        "segments": s.segments_sent,
        "retransmissions": s.retransmissions,
        "rtos": s.rtos,
        "acks": end.receiver.acks_sent,
        "data_wire_bytes": s.bytes_on_wire,
        "ack_wire_bytes": end.receiver.acks_sent * end.receiver.ack_wire,
        "link_lost": link.stats.lost,
        "link_dropped": link.stats.dropped,
        "ack_link_lost": ack_link.stats.lost,
    }


class Handshake:
    """``rtts`` control round trips (SYN/SYN-ACK, TLS flights) as real packets on the links.

    A lost control packet is sent again after a timer that starts at 1 s and doubles
    (RFC 6298 §2.1 and §5.5), as a SYN is.
    """

    def __init__(
        self, sim: Simulator, up: Link, down: Link, rtts: int, wire: int, done: Callable[[], None]
    ) -> None:
        if rtts < 0:
            raise SimulationError(f"handshake round trips must be ≥ 0, got {rtts}")
        self.sim, self.up, self.down, self.rtts, self.wire, self.done = (
            sim,
            up,
            down,
            rtts,
            wire,
            done,
        )
        self.completed = 0
        self.timeout = 1.0
        self._flight = 0

    def begin(self) -> None:
        if self.rtts == 0:
            self.sim.at(0.0, self.done)
        else:
            self.sim.at(0.0, self._send)

    def _send(self) -> None:
        self._flight += 1
        flight = self._flight
        self.up.put(flight, self.wire, self._at_server)
        self.sim.schedule(self.timeout, self._expire, flight)

    def _at_server(self, flight: int) -> None:
        self.down.put(flight, self.wire, self._at_client)

    def _at_client(self, flight: int) -> None:
        if flight != self._flight:
            return  # an answer to a superseded flight
        self._flight += 1  # disarms the pending timer
        self.completed += 1
        self.timeout = 1.0
        if self.completed == self.rtts:
            self.done()
        else:
            self._send()

    def _expire(self, flight: int) -> None:
        if flight == self._flight:
            self.timeout *= 2
            self._send()


def run_request(
    path: PathSpec,
    tcp: TcpSpec,
    upload: int,
    download: int,
    processing_s: float,
    *,
    seed: int = 0,
    trace: bool = False,
    until: float = 3600.0,
) -> RequestResult:
    """Upload ``upload`` bytes, process, download ``download`` bytes; the connection is open.

    Time runs from the first upload byte until the client holds the last response
    byte (§12.3.2's definition).
    """
    if upload < 0 or download < 0 or processing_s < 0:
        raise SimulationError("upload, download and processing must be ≥ 0")
    sim = Simulator(seed)
    rec = Trace() if trace else None
    uplink, downlink = path_links(sim, path)

    def endpoint(name: str, data: Link, acks: Link, on_delivered) -> TransferEnd:
        sender = Sender(
            mss=tcp.mss,
            header=tcp.header,
            initial_window=tcp.initial_window,
            cc=tcp.cc,
            first_flight=tcp.syn_window if tcp.handshake_rtts else None,
        )
        receiver = Receiver(
            ack_every=tcp.ack_every, ack_delay=tcp.ack_delay, ack_wire=tcp.ack_bytes
        )
        return TransferEnd(sim, sender, receiver, data, acks, name, rec, on_delivered)

    marks: dict[str, float] = {}

    def server_got(n: int) -> None:
        if n >= upload and "up" not in marks:
            marks["up"] = sim.now
            sim.schedule(processing_s, down_end.write, download)

    def client_got(n: int) -> None:
        if n >= download and "done" not in marks:
            marks["done"] = sim.now

    up_end = endpoint("client", uplink, downlink, server_got)
    down_end = endpoint("server", downlink, uplink, client_got)

    def start() -> None:
        marks["open"] = sim.now
        if upload == 0:
            server_got(0)
        else:
            up_end.write(upload)

    Handshake(sim, uplink, downlink, tcp.handshake_rtts, tcp.control_bytes, start).begin()
    if download == 0:
        down_end.on_delivered = None
    sim.run(until=until)
    if download == 0 and "up" in marks:
        marks["done"] = marks["up"] + processing_s
    if "done" not in marks:
        raise SimulationError(f"the request did not finish within {until} s of simulated time")
    result = RequestResult(
        marks["done"],
        marks.get("up"),
        sim.events,
        _end_stats(up_end, uplink, downlink),
        _end_stats(down_end, downlink, uplink),
        rec,
    )
    result.up["handshake_s"] = marks.get("open", 0.0)
    return result
