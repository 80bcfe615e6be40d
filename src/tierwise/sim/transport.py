"""Drive sans-IO transport endpoints over simulated links.

An adapter only feeds bytes in, drains what the endpoint wants to send into a
link, and keeps one timer event armed (aioquic's ``asyncio/protocol.py`` pattern).
Timers are lazy: a deadline that moves later does not reschedule, the pending
event re-checks when it fires; only a deadline that moves earlier adds an event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from mypy_extensions import mypyc_attr

from tierwise.proto.tcp import Ack, Receiver, Segment, Sender
from tierwise.sim.engine import Simulator

__all__ = ["PacketLink", "Trace", "TransferEnd"]


class PacketLink(Protocol):
    """What an adapter needs of a link: :class:`tierwise.sim.link.Link`, or a stand-in
    (a wireless medium's port, a flow's tap on a shared bottleneck)."""

    def put(self, packet: Any, wire_bytes: int, deliver: Callable[[Any], None]) -> bool: ...


class Trace:
    """Per-packet records ``(time, endpoint, event, seq, bytes, cwnd, in_flight)``."""

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "time_s",
        "endpoint",
        "event",
        "seq",
        "bytes",
        "cwnd_bytes",
        "in_flight_bytes",
    )

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def add(self, *row: Any) -> None:
        self.rows.append(row)

    def write_csv(self, path: str) -> None:
        """Write the trace as CSV (times with 9 decimals: byte-identical for a seed)."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(",".join(self.COLUMNS) + "\n")
            for t, ep, ev, seq, nbytes, cwnd, flight in self.rows:
                f.write(f"{t:.9f},{ep},{ev},{seq},{nbytes},{cwnd:.0f},{flight}\n")


@mypyc_attr(allow_interpreted_subclasses=True)
class TransferEnd:
    """One direction of a connection: a Sender on one side, a Receiver on the other.

    ``data_link`` carries segments sender → receiver, ``ack_link`` carries ACKs back.
    ``on_delivered(n)`` is called whenever the receiver's in-order byte count grows.
    """

    def __init__(
        self,
        sim: Simulator,
        sender: Sender,
        receiver: Receiver,
        data_link: PacketLink,
        ack_link: PacketLink,
        name: str,
        trace: Trace | None = None,
        on_delivered: Callable[[int], None] | None = None,
    ) -> None:
        self.sim, self.sender, self.receiver = sim, sender, receiver
        self.data_link, self.ack_link, self.name, self.trace = data_link, ack_link, name, trace
        self.on_delivered = on_delivered
        self._sender_timer: float | None = None
        self._receiver_timer: float | None = None

    def __repr__(self) -> str:
        s = self.sender
        return (
            f"TransferEnd({self.name}: snd_una={s.snd_una}, snd_nxt={s.snd_nxt}, "
            f"app_limit={s.app_limit}, flight={s.flight}, cwnd={s.cwnd:.0f}, "
            f"timer={s.get_timer()}, rcv_nxt={self.receiver.rcv_nxt})"
        )

    # ------------------------------------------------------------------ sender side

    def write(self, nbytes: int) -> None:
        """The application writes ``nbytes`` into the sender."""
        self.sender.send(nbytes)
        self.pump()

    def pump(self) -> None:
        now, sender = self.sim.now, self.sender
        batch = sender.segments_to_send(now)
        if batch:
            put, arrives = self.data_link.put, self._segment_arrives
            if self.trace is None:
                for seg in batch:
                    put(seg, seg.wire, arrives)
            else:
                self._trace_batch(now, batch)
        # Arm the sender's timer (lazily: only a deadline that moved earlier adds an event).
        deadline = sender.get_timer()
        if deadline is not None and (
            self._sender_timer is None or deadline < self._sender_timer - 1e-12
        ):
            self._sender_timer = deadline
            self.sim.at(max(deadline, now), self._sender_fires, deadline)

    def _trace_batch(self, now: float, batch: list[Segment]) -> None:
        sender, trace = self.sender, self.trace
        assert trace is not None
        flight = sender.flight - sum(seg.length for seg in batch)
        for seg in batch:
            flight += seg.length
            event = "retx" if seg.retx else "send"
            trace.add(now, self.name, event, seg.seq, seg.length, sender.cwnd, flight)
            self.data_link.put(seg, seg.wire, self._segment_arrives)

    def _sender_fires(self, scheduled: float) -> None:
        if self._sender_timer != scheduled:
            return  # superseded by an earlier deadline
        self._sender_timer = None
        deadline = self.sender.get_timer()
        if deadline is not None and deadline <= self.sim.now + 1e-12:
            if (
                self.trace is not None
                and self.sender._rto_at is not None
                and self.sender._rto_at <= self.sim.now + 1e-12
            ):
                self.trace.add(
                    self.sim.now,
                    self.name,
                    "rto",
                    self.sender.snd_una,
                    0,
                    self.sender.cwnd,
                    self.sender.flight,
                )
            self.sender.handle_timer(self.sim.now)
        self.pump()

    def _ack_arrives(self, ack: Ack) -> None:
        sender = self.sender
        sender.receive_ack(ack, self.sim.now)
        if self.trace is not None:
            self.trace.add(self.sim.now, self.name, "ack", ack.ack, 0, sender.cwnd, sender.flight)
        self.pump()

    # ---------------------------------------------------------------- receiver side

    def _segment_arrives(self, seg: Segment) -> None:
        receiver = self.receiver
        before = receiver.rcv_nxt
        ack = receiver.receive(seg, self.sim.now)
        if ack is not None:
            self.ack_link.put(ack, ack.wire, self._ack_arrives)
        # Arm the receiver's delayed-ACK timer (its get_timer(), read directly: per packet).
        deadline = receiver._ack_at
        if deadline is not None and deadline != self._receiver_timer:
            self._receiver_timer = deadline
            self.sim.at(deadline, self._receiver_fires, deadline)
        if receiver.rcv_nxt != before and self.on_delivered is not None:
            self.on_delivered(receiver.rcv_nxt)

    def _send_ack(self, ack: Ack | None) -> None:
        if ack is not None:
            self.ack_link.put(ack, ack.wire, self._ack_arrives)

    def _receiver_fires(self, scheduled: float) -> None:
        if self._receiver_timer != scheduled:
            return
        self._receiver_timer = None
        self._send_ack(self.receiver.handle_timer(self.sim.now))
