"""A request carried by forward error correction over lossy simulated links (§12.3.3).

The client sends the request as FEC symbols (:class:`tierwise.proto.fec.FecSender`)
on the uplink; the server decodes it as soon as it holds ``k`` symbols of every
block, processes for ``processing_s``, and replies — as FEC again or over the
TCP-like transport of :mod:`tierwise.proto.tcp` (a warm, open connection). Time
runs from the first request byte until the client holds the whole reply, the
definition of §12.3.2.

The repair per block is :func:`tierwise.model.loss.fec_repair_symbols` of the
configured loss (the link's mean loss unless ``fec_loss`` says otherwise).
Symbols leave all at once and the link queue paces them at the path rate. Each
symbol costs ``symbol_bytes`` + 20 bytes of FEC header + 28 of UDP/IPv4 on the
wire, so the §12.3.3 block of 308 symbols is 460,768 bytes: 11.07 ms at
333 Mbit/s (the closed form's 10.71 ms counts the 1,448-byte symbols alone).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tierwise.errors import SimulationError
from tierwise.model.loss import fec_repair_symbols
from tierwise.proto.fec import FecReceiver, FecSender, Report, Symbol, parse_datagram
from tierwise.proto.tcp import Receiver, Sender
from tierwise.sim.engine import Simulator
from tierwise.sim.link import Link, loss_process
from tierwise.sim.transport import TransferEnd

__all__ = ["FecFlow", "FecRequestResult", "run_fec_request"]

REPLY_MODES = ("fec", "tcp")


class _Timer:
    """One lazily re-armed timer event for a sans-IO endpoint (as in ``TransferEnd``)."""

    def __init__(self, sim: Simulator, endpoint: Any, after: Callable[[], None]) -> None:
        self.sim, self.endpoint, self.after = sim, endpoint, after
        self._at: float | None = None

    def arm(self) -> None:
        deadline = self.endpoint.get_timer()
        if deadline is not None and (self._at is None or deadline < self._at - 1e-12):
            self._at = deadline
            self.sim.at(max(deadline, self.sim.now), self._fire, deadline)

    def _fire(self, scheduled: float) -> None:
        if self._at != scheduled:
            return  # superseded by an earlier deadline
        self._at = None
        deadline = self.endpoint.get_timer()
        if deadline is not None and deadline <= self.sim.now + 1e-12:
            self.endpoint.handle_timer(self.sim.now)
        self.after()


class FecFlow:
    """One direction: a FecSender on ``data_link``, its receiver's reports on ``report_link``.

    With ``serialize`` every datagram crosses the link as bytes (``to_bytes`` /
    ``parse_datagram``), exactly as it would cross a socket.
    """

    def __init__(
        self,
        sim: Simulator,
        sender: FecSender,
        receiver: FecReceiver,
        data_link: Link,
        report_link: Link,
        on_complete: Callable[[], None] | None = None,
        *,
        serialize: bool = False,
    ) -> None:
        self.sim, self.sender, self.receiver = sim, sender, receiver
        self.data_link, self.report_link = data_link, report_link
        self.on_complete, self.serialize = on_complete, serialize
        self.completed_at: float | None = None
        self._sender_timer = _Timer(sim, sender, self.pump_sender)
        self._receiver_timer = _Timer(sim, receiver, self.pump_receiver)

    def pump_sender(self) -> None:
        for sym in self.sender.datagrams_to_send(self.sim.now):
            packet = sym.to_bytes() if self.serialize else sym
            self.data_link.put(packet, sym.wire, self._symbol_arrives)
        self._sender_timer.arm()

    def pump_receiver(self) -> None:
        for report in self.receiver.datagrams_to_send(self.sim.now):
            packet = report.to_bytes() if self.serialize else report
            self.report_link.put(packet, report.wire, self._report_arrives)
        self._receiver_timer.arm()

    def _symbol_arrives(self, packet: Symbol | bytes) -> None:
        sym = parse_datagram(packet) if isinstance(packet, bytes) else packet
        self.receiver.receive_symbol(sym, self.sim.now)  # type: ignore[arg-type]
        if self.receiver.complete and self.completed_at is None:
            self.completed_at = self.sim.now
            if self.on_complete is not None:
                self.on_complete()
        self.pump_receiver()

    def _report_arrives(self, packet: Report | bytes) -> None:
        report = parse_datagram(packet) if isinstance(packet, bytes) else packet
        self.sender.receive_report(report, self.sim.now)  # type: ignore[arg-type]
        self.pump_sender()

    def stats(self) -> dict[str, Any]:
        """Counts for one direction (JSON-ready; sizes in bytes)."""
        s, r = self.sender.stats, self.receiver.stats
        return {
            "blocks": len(self.sender.blocks),
            "data_symbols": s.data_symbols,
            "repair_symbols": s.repair_symbols,
            "topup_symbols": s.topup_symbols,
            "symbols_sent": s.symbols_sent,
            "rounds": max(self.receiver.rounds.values(), default=0),
            "timeouts": s.timeouts,
            "reports": r.reports,
            "symbols_received": r.symbols,
            "data_wire_bytes": s.bytes_on_wire,
            "report_wire_bytes": r.report_bytes_on_wire,
            "link_lost": self.data_link.stats.lost,
            "completed_s": self.completed_at,
        }


@dataclass
class FecRequestResult:
    """Outcome of one FEC request/response; ``up``/``down`` hold per-direction counts."""

    time_s: float
    upload_done_s: float
    events: int
    payload_ok: bool | None  # request (and FEC reply) decoded intact; None in virtual mode
    up: dict[str, Any] = field(default_factory=dict)
    down: dict[str, Any] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        """Rounds the request needed (1: no top-up)."""
        return int(self.up["rounds"])

    def summary(self) -> dict[str, Any]:
        return {
            "time_s": self.time_s,
            "upload_done_s": self.upload_done_s,
            "events": self.events,
            "payload_ok": self.payload_ok,
            "upload": self.up,
            "download": self.down,
        }


def _mean_loss(process: Any) -> float:
    return float(getattr(process, "mean_loss", getattr(process, "p", 0.0)))


def run_fec_request(
    rate_up: float,
    rate_down: float,
    rtt: float,
    loss: Any,
    payload_bytes: int,
    symbol_bytes: int = 1448,
    processing_s: float = 0.0,
    target: float = 0.999,
    seed: int = 0,
    *,
    reply_bytes: int = 0,
    down_loss: Any = 0.0,
    reply: str = "fec",
    fec_loss: float | None = None,
    max_block: int | None = None,
    repair_symbols: int | None = None,
    virtual: bool = False,
    serialize: bool = False,
    until: float = 60.0,
) -> FecRequestResult:
    """Upload ``payload_bytes`` as FEC symbols, process, reply; SI units throughout.

    ``loss``/``down_loss``: a probability or a Gilbert–Elliott dict. ``fec_loss``
    overrides the loss the repair is planned for (default: the uplink's mean).
    ``virtual`` sends sizes only (fast, for many seeds); otherwise the request
    is random bytes from the seed and ``payload_ok`` checks the decoded copy.
    ``reply``: ``"fec"`` (planned for the downlink's mean loss) or ``"tcp"``.
    """
    _check(rate_up, rate_down, rtt, payload_bytes, processing_s, reply_bytes, reply)
    sim = Simulator(seed)
    uplink = Link(sim, rate_up, rtt / 2, loss=loss_process(loss, sim.rng("loss-up")), name="uplink")
    downlink = Link(
        sim, rate_down, rtt / 2, loss=loss_process(down_loss, sim.rng("loss-down")), name="downlink"
    )
    request: bytes | int = payload_bytes
    if not virtual:
        request = sim.rng("payload").integers(0, 256, payload_bytes, dtype="uint8").tobytes()
    planned = _mean_loss(uplink.loss) if fec_loss is None else fec_loss
    up_sender = FecSender(
        request,
        loss=planned,
        symbol_bytes=symbol_bytes,
        target=target,
        max_block=max_block,
        repair_symbols=repair_symbols,
        repair_policy=fec_repair_symbols,
    )
    marks: dict[str, float] = {}
    up = FecFlow(sim, up_sender, FecReceiver(), uplink, downlink, serialize=serialize)
    down = _reply_flow(
        sim,
        reply,
        reply_bytes,
        downlink,
        uplink,
        symbol_bytes,
        target,
        virtual,
        serialize,
        lambda: marks.setdefault("done", sim.now),
    )

    def request_decoded() -> None:
        marks["up"] = sim.now
        sim.schedule(processing_s, down.start)

    up.on_complete = request_decoded
    sim.at(0.0, up.pump_sender)
    sim.run(until=until)
    if "done" not in marks:
        raise SimulationError(f"the FEC request did not finish within {until} s of simulated time")
    ok = None if virtual else up.receiver.read() == request and down.intact()
    return FecRequestResult(marks["done"], marks["up"], sim.events, ok, up.stats(), down.stats())


def _check(rate_up, rate_down, rtt, payload_bytes, processing_s, reply_bytes, reply) -> None:
    if reply not in REPLY_MODES:
        raise SimulationError(f"reply must be one of {REPLY_MODES}, got {reply!r}")
    if payload_bytes < 0 or reply_bytes < 0 or processing_s < 0 or rtt < 0:
        raise SimulationError("payload, reply, processing and RTT must be ≥ 0")
    if reply == "tcp" and reply_bytes == 0:
        raise SimulationError("a TCP reply needs at least one byte (use reply='fec' for none)")
    if not (math.isfinite(rate_up) and math.isfinite(rate_down)):
        raise SimulationError("rates must be finite")


class _FecReply:
    def __init__(self, flow: FecFlow, body: bytes | int, on_done: Callable[[], Any]) -> None:
        self.flow, self.body = flow, body
        flow.on_complete = on_done

    def intact(self) -> bool:
        return isinstance(self.body, int) or self.flow.receiver.read() == self.body

    def start(self) -> None:
        self.flow.pump_sender()

    def stats(self) -> dict[str, Any]:
        return {"mode": "fec", **self.flow.stats()}


class _TcpReply:
    def __init__(self, end: TransferEnd, size: int, on_done: Callable[[], Any]) -> None:
        self.end, self.size = end, size
        end.on_delivered = lambda n: on_done() if n >= size else None

    def start(self) -> None:
        self.end.write(self.size)

    def intact(self) -> bool:
        return self.end.receiver.delivered >= self.size  # TCP here carries sizes, not bytes

    def stats(self) -> dict[str, Any]:
        s = self.end.sender.stats
        return {
            "mode": "tcp",
            "segments": s.segments_sent,
            "retransmissions": s.retransmissions,
            "rtos": s.rtos,
            "data_wire_bytes": s.bytes_on_wire,
            "link_lost": self.end.data_link.stats.lost,
        }


def _reply_flow(
    sim: Simulator,
    mode: str,
    size: int,
    downlink: Link,
    uplink: Link,
    symbol_bytes: int,
    target: float,
    virtual: bool,
    serialize: bool,
    on_done: Callable[[], Any],
) -> _FecReply | _TcpReply:
    if mode == "tcp":
        end = TransferEnd(sim, Sender(), Receiver(), downlink, uplink, "server")
        return _TcpReply(end, size, on_done)
    body: bytes | int = size
    if not virtual:
        body = sim.rng("reply").integers(0, 256, size, dtype="uint8").tobytes()
    sender = FecSender(
        body,
        loss=_mean_loss(downlink.loss),
        symbol_bytes=symbol_bytes,
        target=target,
        repair_policy=fec_repair_symbols,
    )
    flow = FecFlow(sim, sender, FecReceiver(), downlink, uplink, serialize=serialize)
    return _FecReply(flow, body, on_done)
