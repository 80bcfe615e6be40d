"""One relay session over asyncio UDP: feed datagrams in, drain them out, arm one timer.

The aioquic ``asyncio/protocol.py`` pattern: every protocol decision stays in
:class:`~tierwise.proto.relay.RelayConnection`; this module only moves bytes and
hands events to the owner (``on_event``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any

from tierwise.proto.relay import Event, RelayConnection, StreamDataReceived
from tierwise.relay import trace

__all__ = ["SOCKET_BUFFER_BYTES", "Session", "widen_buffers"]

log = logging.getLogger("tierwise.relay.session")
# A session socket's kernel buffers: a request or a pacing burst arrives faster than
# Python drains it; the default (rmem_default, 208 KB here) overflowed in the lab, and
# the kernel dropped 21 % of a no-loss run's datagrams (Udp RcvbufErrors) unseen.
SOCKET_BUFFER_BYTES = 8 << 20  # ≈ BDP of 333 Mbit/s × 200 ms
_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # Linux values
_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)


def widen_buffers(transport: asyncio.BaseTransport, nbytes: int = SOCKET_BUFFER_BYTES) -> int:
    """Ask for ``nbytes`` of receive and send buffer on ``transport``'s UDP socket.

    As root ``SO_RCVBUFFORCE`` passes ``net.core.rmem_max``; otherwise the kernel caps
    the request there (a warning says so). Returns the receive buffer the kernel gave.
    """
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    for force, plain in ((_RCVBUFFORCE, socket.SO_RCVBUF), (_SNDBUFFORCE, socket.SO_SNDBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, nbytes)
        except OSError:
            try:
                sock.setsockopt(socket.SOL_SOCKET, plain, nbytes)
            except OSError:
                pass
    got = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2  # Linux reports double
    if got < nbytes:
        log.warning("UDP receive buffer %d B, not %d B: raise net.core.rmem_max", got, nbytes)
    return got


class Session:
    """A :class:`RelayConnection` bound to a datagram transport and the event loop's clock."""

    def __init__(
        self,
        conn: RelayConnection,
        transport: asyncio.DatagramTransport,
        on_event: Callable[[Session, Event], None],
    ) -> None:
        self.conn, self.transport, self.on_event = conn, transport, on_event
        # The owner's callbacks for this session's streams, by stream id (the client's).
        self.handlers: dict[int, Callable[[Event], None]] = {}
        self.loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._trace = trace.enabled()
        self._traced_exit = ""
        self._traced_policed = False

    @property
    def held(self) -> set[int]:
        """Streams whose reader reports what it consumed (a Pipe into a socket); for the
        others (UDP associations, a refused stream) delivery is consumption. The set is
        the connection's: a stream's mark goes when the connection forgets the stream."""
        return self.conn.held

    def now(self) -> float:
        return self.loop.time()

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.receive(data, addr)
        self.transmit()

    def receive(self, data: bytes, addr: Any, at: float | None = None) -> None:
        """Feed one datagram without sending: a batch's owner calls :meth:`transmit` once.

        ``at``: when it arrived (the kernel's stamp on the loop's clock), if known.
        """
        now = self.now()
        self.conn.receive_datagram(data, addr, now if at is None else min(at, now))
        if self._trace:
            trace.event("rx", len(data))

    def receive_parsed(
        self, data: bytes, kind: int, cid: bytes, pn: int, addr: Any, at: float, now: float
    ) -> None:
        """:meth:`receive` for a caller that has read the datagram's header and the loop's
        clock (``now``, once a batch) already."""
        self.conn.receive_parsed(data, kind, cid, pn, addr, at if at < now else now)
        if self._trace:
            trace.event("rx", len(data))

    def receive_batch(self, batch: list[tuple[bytes, Any]], arrivals: list[float] | None) -> None:
        """Feed a whole batch (all this session's) without sending: :meth:`receive` for each,
        with the loop's clock read once (a batch is read in one go), but the first ACK a
        flight's sender waits for leaves as soon as it is due (:meth:`send_prompt_ack`)."""
        early = len(batch) > 1
        if self._trace:
            for i, (data, addr) in enumerate(batch):
                self.receive(data, addr, arrivals[i] if arrivals else None)
                if early and i + 1 < len(batch) and self.send_prompt_ack():
                    early = False
            return
        now = self.now()
        conn = self.conn
        take = conn.receive_datagram
        for i, (data, addr) in enumerate(batch):
            at = arrivals[i] if arrivals else now
            take(data, addr, at if at < now else now)
            if early and i + 1 < len(batch) and conn.prompt_ack_due(now):
                self._send_due()  # send_prompt_ack's, with its check just made
                early = False

    def send_prompt_ack(self, now: float | None = None) -> bool:
        """Send what is due now if that includes an ACK a flight's sender waits for (a
        start-up flight, a request): the caller is feeding a batch and would send only after
        its last datagram. In the lab a gateway just started read a new session's first
        flight in batches of 8–19 and sent the first ACK after the whole batch, 0.8–2.8 ms
        later; that ACK's arrival is when the client sends the rest of the request. Once a
        batch: each ACK is a system call more. ``now``: the loop's clock, if the caller read it."""
        if not self.conn.prompt_ack_due(self.now() if now is None else now):
            return False
        self._send_due()
        return True

    @property
    def read_delay_s(self) -> float:
        """How long what arrives for this session may wait unread: a bulk flight arriving,
        or ACKs while it paces one out (0: read at once)."""
        conn = self.conn
        return max(conn.bulk_read_delay_s, conn.ack_read_delay_s)

    @property
    def timer_at(self) -> float | None:
        """When the session's timer fires next (the loop's clock), if armed."""
        return self._timer_at if self._timer is not None else None

    def transmit(self) -> None:
        """Send what is due (as one batch where the transport can), deliver events, re-arm."""
        self._send_due()
        credited = False
        while (event := self.conn.next_event()) is not None:
            if type(event) is StreamDataReceived and event.stream_id not in self.conn.held:
                credited |= self.conn.stream_consumed(event.stream_id, len(event.data))
            self.on_event(self, event)
        if credited:  # the new credit goes now, not with the next timer
            self._send_due()
        self._arm()

    def consumed(self, stream_id: int, nbytes: int) -> None:
        """A held stream's reader took ``nbytes``: credit the peer (and send it if new)."""
        if self.conn.stream_consumed(stream_id, nbytes):
            self.transmit()

    def _send_due(self) -> None:
        datagrams = self.conn.datagrams_to_send(self.now())
        if self._trace and datagrams:
            self._trace_tx(datagrams)
        send_many = getattr(self.transport, "send_many", None)
        if send_many is not None:
            send_many(datagrams)
        else:
            for data, addr in datagrams:
                self.transport.sendto(data, addr)

    def _trace_tx(self, datagrams: list[tuple[bytes, Any]]) -> None:
        """One ``tx`` line: count, bytes, pacing rate, window, estimate, in flight, repairs."""
        rate, conn = self.conn.rate, self.conn
        numbers = (rate.pacing_rate_bytes_per_s, rate.cwnd_bytes, rate.btl_bw_bytes_per_s)
        trace.event(
            "tx",
            len(datagrams),
            sum(len(d) for d, _ in datagrams),
            *(f"{x:.0f}" for x in numbers),
            conn.in_flight_bytes,
            conn.stats.repair_packets_sent,
            int(rate.startup),
            int(rate.app_limited),
        )
        if rate.startup_exit != self._traced_exit:  # start-up ended: say why, at what estimate
            self._traced_exit = rate.startup_exit
            trace.event("startup_end", rate.startup_exit.replace(" ", "_"), f"{numbers[2]:.0f}")
        if rate.police.policed != self._traced_policed:  # a policer declared or released
            self._traced_policed = rate.police.policed
            ceiling = rate.police.ceiling_bytes_per_s
            trace.event(
                "policed", int(rate.police.policed), f"{ceiling or 0:.0f}", conn.stats.packets_sent
            )

    def _arm(self) -> None:
        """Arm the connection's next deadline; a timer already due no later is kept.

        Most datagrams move the deadline (the next ACK or pacing slot), and a new
        timer handle per datagram is measurable; firing early is harmless
        (``handle_timer`` acts only on deadlines that have passed, then this re-arms).
        """
        at = self.conn.get_timer()
        if self._timer is not None and at is not None and self._timer_at is not None:
            if self._timer_at <= at:
                return
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, at
        if at is not None:
            self._timer = self.loop.call_at(max(at, self.now()), self._fire)

    def _fire(self) -> None:
        self._timer = self._timer_at = None
        self.conn.handle_timer(self.now())
        self.transmit()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
