"""The relay's sans-IO session over the TCP simulator's links, packet by packet (§12.3.5).

:class:`RelayEnd` is the relay counterpart of :class:`~tierwise.sim.transport.TransferEnd`:
a client and a gateway :class:`~tierwise.proto.relay.RelayConnection` — the objects
``tierwise relay`` deploys, sealing real datagrams — whose datagrams go through the
same :class:`~tierwise.sim.link.Link` objects as TCP segments (client → gateway on
the uplink, gateway → client on the downlink, 28 B of IP/UDP header each), driven by
the engine's clock. So a relay flow and a TCP flow meet in one drop-tail queue and a
user compares the two transports packet by packet. One lazy timer per endpoint, as
in the TCP adapter: a deadline that moves later is re-checked when the event fires.

The relay brings its own congestion control (a delivery-rate controller braked by
queueing delay, :mod:`tierwise.proto.relay.rate`), FEC and handshake (1 RTT);
``tcp.cc`` does not apply to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tierwise.proto.relay import RelayConfig, RelayConnection, StreamDataReceived
from tierwise.sim.engine import Simulator

__all__ = ["UDP_IP_BYTES", "RelayEnd", "relay_config"]

UDP_IP_BYTES = 28  # IPv4 + UDP header of every datagram on the wire
_KEY = bytes(range(32))  # a fixed key: simulations are not secrets
_CLIENT, _GATEWAY = ("10.0.0.1", 4000), ("10.0.0.2", 7443)
_EPS_S = 1e-12


def relay_config(wire_bytes: int) -> RelayConfig:
    """A relay config whose full datagram is ``wire_bytes`` on the wire (TCP's segment size),
    clipped to 200–1,400 B of datagram: a TCP-sized relay packet, not a jumbo one (the relay
    takes up to 65,000 B and discovers a path's MTU above 1,350; these links have no MTU)."""
    datagram = min(1400, max(200, wire_bytes - UDP_IP_BYTES))
    return RelayConfig(max_datagram_bytes=datagram)


class RelayEnd:
    """One relay session: the client writes on one stream, the gateway may reply on it.

    ``up`` carries client datagrams, ``down`` gateway datagrams; both are anything with
    ``put(packet, wire_bytes, deliver) -> bool`` (a Link, or a metering wrapper).
    ``on_delivered(n)`` sees the gateway's in-order byte count grow; ``on_request``
    fires when the client's stream ends at the gateway, ``on_reply`` when the reply
    has fully reached the client.
    """

    def __init__(
        self, sim: Simulator, up: Any, down: Any, name: str, config: RelayConfig | None = None
    ) -> None:
        self.sim, self.name = sim, name
        self.conns = (
            RelayConnection(_KEY, is_client=True, config=config),
            RelayConnection(_KEY, is_client=False, config=config),
        )
        self.links = (up, down)
        self.delivered_up = self.delivered_down = 0
        self.on_delivered: Callable[[int], None] | None = None
        self.on_request: Callable[[], None] | None = None
        self.on_reply: Callable[[], None] | None = None
        self.stopped = False
        self.sid: int | None = None
        self._timers: list[float | None] = [None, None]
        self._deliver = (self._at_gateway, self._at_client)

    def __repr__(self) -> str:
        return f"RelayEnd({self.name}: up={self.delivered_up}, down={self.delivered_down})"

    @property
    def client(self) -> RelayConnection:
        return self.conns[0]

    def write(self, nbytes: int, end: bool = False) -> None:
        """The client application writes ``nbytes`` (connecting on the first write)."""
        client = self.client
        if self.sid is None:
            client.connect(_GATEWAY, self.sim.now)
            self.sid = client.open_stream()
        client.send(self.sid, bytes(nbytes), end_stream=end)
        self._flush(0)

    def reply(self, nbytes: int) -> None:
        """The gateway answers on the client's stream with ``nbytes`` and ends it."""
        assert self.sid is not None
        self.conns[1].send(self.sid, bytes(nbytes), end_stream=True)
        self._flush(1)

    def buffered_bytes(self) -> int:
        """Bytes the client wrote that the gateway has not acknowledged yet."""
        return self.client.send_buffered_bytes(self.sid) if self.sid is not None else 0

    def stop(self) -> None:
        """Leave the session: every later datagram and timer of it is ignored."""
        self.stopped = True

    def _flush(self, side: int) -> None:
        if self.stopped:
            return
        conn, put, deliver = self.conns[side], self.links[side].put, self._deliver[side]
        for datagram, _ in conn.datagrams_to_send(self.sim.now):
            put(datagram, len(datagram) + UDP_IP_BYTES, deliver)
        deadline = conn.get_timer()
        if deadline is None:
            return
        pending = self._timers[side]
        if pending is None or deadline < pending - _EPS_S:
            self._timers[side] = deadline
            self.sim.at(max(deadline, self.sim.now), self._fires, side, deadline)

    def _fires(self, side: int, scheduled: float) -> None:
        if self.stopped or self._timers[side] != scheduled:
            return
        self._timers[side] = None
        conn = self.conns[side]
        deadline = conn.get_timer()
        if deadline is not None and deadline <= self.sim.now + 1e-9:
            conn.handle_timer(self.sim.now)
        self._events(side)
        self._flush(side)

    def _at_gateway(self, datagram: bytes) -> None:
        if not self.stopped:
            self.conns[1].receive_datagram(datagram, _CLIENT, self.sim.now)
            self._events(1)
            self._flush(1)

    def _at_client(self, datagram: bytes) -> None:
        if not self.stopped:
            self.conns[0].receive_datagram(datagram, _GATEWAY, self.sim.now)
            self._events(0)
            self._flush(0)

    def _events(self, side: int) -> None:
        conn = self.conns[side]
        while (event := conn.next_event()) is not None:
            if not isinstance(event, StreamDataReceived) or self.stopped:
                continue
            if side == 1:
                self.delivered_up += len(event.data)
                if self.on_delivered is not None:
                    self.on_delivered(self.delivered_up)
                if event.end_stream and self.on_request is not None:
                    self.on_request()
            else:
                self.delivered_down += len(event.data)
                if event.end_stream and self.on_reply is not None:
                    self.on_reply()
