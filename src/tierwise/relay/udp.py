"""SOCKS5 UDP ASSOCIATE (RFC 1928 §7) carried over one relay stream per association.

The relay protocol has no datagram frame, so an association is a stream whose
open names the reserved host ``UDP_HOST`` (under ``.invalid``, RFC 6761: it can
never be a real destination). On that stream each datagram travels as one
length-prefixed record in both directions::

    length u16 | ATYP u8 | address | port u16 | payload      (length: all after itself)

the SOCKS UDP request header without RSV and FRAG. The stream is reliable and
ordered, so a lost packet delays the datagrams behind it (one RTT at worst,
usually none: FEC repairs it first), but nothing is lost or reordered on the
long-haul path. Queues are bounded by bytes: a datagram that would push a
stream's unacknowledged bytes past ``buffer_bytes`` is dropped and counted,
never waited for, as a router would (a datagram application expects loss,
not blocking).

Rules: only the SOCKS client's own address may use the relay port; fragments
(FRAG ≠ 0, §7) are dropped; the gateway sends only to destinations its
allow-list names, and takes replies only from addresses it sent to.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import struct
from collections import Counter
from collections.abc import Callable

from tierwise.proto.relay import Event, StreamDataReceived, StreamReset
from tierwise.relay.session import Session

__all__ = [
    "UDP_HOST",
    "ClientAssociation",
    "Deframer",
    "GatewayAssociation",
    "decode_addr",
    "encode_addr",
    "record",
]

log = logging.getLogger("tierwise.relay.udp")
UDP_HOST = "udp-associate.tierwise.invalid"
MAX_RECORD_BYTES = 65_535
RESOLVE_TTL_S = 60.0
_LEN = struct.Struct(">H")
ATYP_V4, ATYP_NAME, ATYP_V6 = 1, 3, 4


def encode_addr(host: str, port: int) -> bytes:
    """SOCKS5 ``ATYP | address | port`` for an IP literal or a name (RFC 1928 §5)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raw = host.encode()[:255]
        return bytes([ATYP_NAME, len(raw)]) + raw + _LEN.pack(port)
    atyp = ATYP_V4 if ip.version == 4 else ATYP_V6
    return bytes([atyp]) + ip.packed + _LEN.pack(port)


def decode_addr(buf: bytes, at: int = 0) -> tuple[str, int, int]:
    """``(host, port, end)`` of the address at ``at``; ``ValueError`` if malformed."""
    atyp = buf[at]
    if atyp == ATYP_V4:
        start, end = at + 1, at + 5
        host = str(ipaddress.IPv4Address(buf[start:end]))
    elif atyp == ATYP_V6:
        start, end = at + 1, at + 17
        host = str(ipaddress.IPv6Address(buf[start:end]))
    elif atyp == ATYP_NAME:
        start = at + 2
        end = start + buf[at + 1]
        host = buf[start:end].decode()
    else:
        raise ValueError(f"address type {atyp}")
    if len(buf) < end + 2:
        raise ValueError("short address")
    (port,) = _LEN.unpack_from(buf, end)
    return host, port, end + 2


def record(host: str, port: int, payload: bytes) -> bytes:
    """One datagram as a length-prefixed record of the association stream."""
    body = encode_addr(host, port) + payload
    return _LEN.pack(len(body)) + body


class Deframer:
    """Splits the association stream back into ``(host, port, payload)`` datagrams."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[str, int, bytes]]:
        self._buf += data
        out = []
        while len(self._buf) >= 2:
            (n,) = _LEN.unpack_from(self._buf)
            if len(self._buf) < 2 + n:
                break
            body = bytes(self._buf[2 : 2 + n])
            del self._buf[: 2 + n]
            try:
                host, port, end = decode_addr(body)
            except (ValueError, IndexError, UnicodeDecodeError):
                continue
            out.append((host, port, body[end:]))
        return out


class _Stream:
    """What both ends share: the stream, its byte bound, its counters."""

    def __init__(self, session: Session, sid: int, buffer_bytes: int, counters: Counter) -> None:
        self.session, self.sid, self.buffer_bytes = session, sid, buffer_bytes
        self.counters = counters
        self.deframer = Deframer()
        self.closed = asyncio.Event()

    def put(self, host: str, port: int, payload: bytes) -> None:
        """Queue one datagram on the stream, or drop it if the stream is full (never block)."""
        conn = self.session.conn
        if not conn.has_stream(self.sid):
            return
        if conn.send_buffered_bytes(self.sid) + len(payload) > self.buffer_bytes:
            self.counters["udp_dropped_full"] += 1
            return
        conn.send(self.sid, record(host, port, payload))
        self.session.transmit()


class ClientAssociation(_Stream, asyncio.DatagramProtocol):
    """The client's relay port of one association: SOCKS UDP in, stream records out."""

    def __init__(
        self,
        session: Session,
        sid: int,
        app: tuple[str, int],
        buffer_bytes: int,
        counters: Counter,
    ) -> None:
        super().__init__(session, sid, buffer_bytes, counters)
        self.app_host, self.app_port = app  # port 0: taken from the first datagram (§7)
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        if addr[0] != self.app_host or self.app_port not in (0, addr[1]):
            self.counters["udp_dropped_foreign"] += 1
            return
        self.app_port = addr[1]
        try:
            if len(data) < 4 or data[:2] != b"\0\0":
                raise ValueError("reserved bytes")
            host, port, end = decode_addr(data, 3)
        except (ValueError, IndexError, UnicodeDecodeError):
            self.counters["udp_dropped_malformed"] += 1
            return
        if data[2] != 0:  # §7: an implementation that does not reassemble drops fragments
            self.counters["udp_dropped_frag"] += 1
            return
        self.counters["udp_sent"] += 1
        self.put(host, port, data[end:])

    def on_event(self, event: Event) -> None:
        """Stream → application: each record gets the SOCKS UDP header back."""
        if isinstance(event, StreamDataReceived):
            for host, port, payload in self.deframer.feed(event.data):
                if self.transport is not None and self.app_port:
                    header = b"\0\0\0" + encode_addr(host, port)
                    self.transport.sendto(header + payload, (self.app_host, self.app_port))
                    self.counters["udp_received"] += 1
            if event.end_stream:
                self.close()
        elif isinstance(event, StreamReset):
            self.close()

    def close(self) -> None:
        """End the association: the relay port closes and the gateway's sockets with it."""
        if self.transport is not None:
            self.transport.close()
        conn = self.session.conn
        if conn.has_stream(self.sid):
            conn.reset(self.sid, code=0)
            self.session.transmit()
        self.closed.set()


class _Socket(asyncio.DatagramProtocol):
    def __init__(self, on_datagram: Callable[[bytes, tuple], None]) -> None:
        self.on_datagram = on_datagram

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.on_datagram(data, addr)


class GatewayAssociation(_Stream):
    """The gateway's end: stream records out to allowed destinations, replies back.

    It has the interface the gateway drives a :class:`~tierwise.relay.pipe.Pipe`
    with (``deliver``, ``abort``, ``closed``).
    """

    def __init__(
        self,
        session: Session,
        sid: int,
        allowed: Callable[[str, int], bool],
        buffer_bytes: int,
        counters: Counter,
    ) -> None:
        super().__init__(session, sid, buffer_bytes, counters)
        self.allowed = allowed
        self._sockets: dict[int, asyncio.DatagramTransport] = {}
        self._peers: set[tuple[str, int]] = set()  # replies are taken from these only
        self._names: dict[str, tuple[float, list[str]]] = {}
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        """Open one unconnected UDP socket per address family the host has."""
        loop = asyncio.get_running_loop()
        for family, any_addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
            try:
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: _Socket(self._reply), local_addr=(any_addr, 0), family=family
                )
            except OSError:
                continue
            self._sockets[family] = transport

    def deliver(self, data: bytes, end_stream: bool) -> None:
        for host, port, payload in self.deframer.feed(data):
            self._send(host, port, payload)
        if end_stream:
            self.abort()

    def _send(self, host: str, port: int, payload: bytes) -> None:
        if not self.allowed(host, port):
            self.counters["udp_refused"] += 1
            log.debug("udp to %s:%s refused (not in --allow)", host, port)
            return
        try:
            ipaddress.ip_address(host)
        except ValueError:
            cached = self._names.get(host.lower())
            now = asyncio.get_running_loop().time()
            if cached is None or cached[0] < now:
                task = asyncio.get_running_loop().create_task(self._resolve(host, port, payload))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return
            host = cached[1][0]
        self._sendto(host, port, payload)

    async def _resolve(self, name: str, port: int, payload: bytes) -> None:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(name, port, type=socket.SOCK_DGRAM)
        except OSError:
            self.counters["udp_dropped_unresolved"] += 1
            return
        hosts = [info[4][0] for info in infos if info[0] in self._sockets]
        if not hosts:
            self.counters["udp_dropped_unresolved"] += 1
            return
        self._names[name.lower()] = (loop.time() + RESOLVE_TTL_S, hosts)
        self._sendto(hosts[0], port, payload)

    def _sendto(self, ip: str, port: int, payload: bytes) -> None:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        transport = self._sockets.get(family)
        if transport is None or self.closed.is_set():
            self.counters["udp_dropped_unresolved"] += 1
            return
        self._peers.add((str(ipaddress.ip_address(ip)), port))
        transport.sendto(payload, (ip, port))
        self.counters["udp_sent"] += 1

    def _reply(self, data: bytes, addr: tuple) -> None:
        host, port = str(ipaddress.ip_address(addr[0].split("%")[0])), addr[1]
        if (host, port) not in self._peers:
            self.counters["udp_dropped_foreign"] += 1
            return
        self.counters["udp_received"] += 1
        self.put(host, port, data)

    def abort(self) -> None:
        for transport in self._sockets.values():
            transport.close()
        self._sockets.clear()
        for task in self._tasks:
            task.cancel()
        conn = self.session.conn
        if conn.has_stream(self.sid):
            conn.reset(self.sid, code=0)
            self.session.transmit()
        self.closed.set()
