"""A UDP endpoint that reads every queued datagram per wake-up and sends runs with GSO.

asyncio's datagram transport hands its protocol one datagram per event-loop
iteration, so the session could neither acknowledge nor write to TCP once per
batch. This endpoint drains the socket until ``EAGAIN`` (at most
``MAX_BATCH`` datagrams per wake-up) and gives the protocol the whole batch
(``datagrams_received``, if it has one; else one ``datagram_received`` each).
Sending, consecutive datagrams to one address of one size (the last may be
shorter) leave in one ``sendmsg`` with UDP generic segmentation offload
(``UDP_SEGMENT``, Linux ≥ 4.18); where the kernel refuses it the endpoint
falls back to one ``sendto`` per datagram for good. A full socket buffer
queues datagrams until the socket is writable, as asyncio's transport does.

Receiving, the socket asks for UDP generic receive offload (``UDP_GRO``, Linux ≥ 5.0):
the kernel may hand over a run of one sender's equal-size datagrams (the last may be
shorter) as one buffer with a control message giving the segment size, and the
endpoint cuts it back into datagrams, so a GSO burst from loopback or a GRO-capable
NIC costs one ``recvmsg`` instead of one per datagram. Where the kernel refuses the
option, or hands a buffer without the message, each read is one datagram, as before.

A protocol whose peer is sending it a bulk flight may ask for a read pause after a
batch (:meth:`BatchTransport.pause_reading_for`): the socket is left unread for a
millisecond or so and then drained in one wake-up. At the lab's 200 Mbit/s a paced
flight arrives one datagram every 54 µs; read as it comes, each datagram cost a whole
wake-up of the event loop (``epoll_wait``, the loop's turn, a read that ends in
``EAGAIN``, the session's send pass and timer), most of a receiving end's CPU. The
kernel's arrival stamps (below) keep the pause out of every RTT and rate sample.

Each datagram is read with the kernel's arrival time (``SO_TIMESTAMPNS``), turned
into the event loop's clock: ``datagrams_received(batch, arrivals)``. A busy process
reads a socket late and a batch at once; the arrival times keep an ACK train's
spacing and an RTT sample free of that delay (without them, ACKs that had waited
in the socket read as a train 10–50 × faster than the path, and a stall as
queueing delay). Where the kernel gives no stamp the read time stands in.

The socket asks for ``SO_RXQ_OVFL``: a read carries the count of datagrams the kernel
dropped for this socket before any read (its queue full, or its socket filter's
drops, :mod:`.kfilter`), kept as ``kernel_drops`` (:func:`kernel_drops` reads the same
count at any time, with ``SO_MEMINFO``, where no datagram is read to carry it).

Nothing the endpoint sends is ever fragmented: the socket sets ``IP_MTU_DISCOVER``
(``IPV6_MTU_DISCOVER``) to ``IP_PMTUDISC_PROBE`` — the Don't Fragment bit on every
datagram, the local interface's MTU enforced, the kernel's ICMP-learnt path MTU
ignored (unauthenticated ICMP could shrink it; the session discovers the path's
MTU itself, :mod:`tierwise.proto.relay.pmtu`, RFC 8899). A datagram larger than
the interface takes is refused by the kernel with ``EMSGSIZE``: it is counted
(``oversize``) and dropped, as the path would drop it; the session's loss
recovery (or its path MTU search, for a probe) takes it from there. A GSO run
the kernel refuses because one segment is too large (``EMSGSIZE``/``EINVAL``) is
sent one datagram at a time; GSO stays on unless the single sends all succeed. (After
a refusal the kernel reports ``EMSGSIZE`` once more on the socket's next send, of any
size: a send refused so is tried once again before it counts.)
"""

from __future__ import annotations

import asyncio
import errno
import socket
import struct
import time
from collections import deque
from typing import Any

__all__ = [
    "BULK_READ_PAUSE_S",
    "MAX_BATCH",
    "BatchTransport",
    "forbid_fragments",
    "kernel_drops",
    "open_batch_endpoint",
]

MAX_BATCH = 64  # datagrams per wake-up: other sockets get their turn
# A receiver's read pause while a bulk flight arrives (the event loop's timers are
# millisecond-grained): ≈ 18 datagrams per wake-up at 200 Mbit/s instead of one. Well
# inside the delay a bulk flight's ACKs may take anyway (max_ack_delay_s, 5 ms), and
# taken only on a path whose RTT is long beside it (RelayConnection.bulk_read_delay_s).
BULK_READ_PAUSE_S = 0.001
RECV_BYTES = 65535
SOL_UDP = 17
UDP_SEGMENT = 103  # linux/udp.h
UDP_GRO = 104  # linux/udp.h; its control message carries the segment size as an int
GSO_MAX_SEGMENTS = 64
GSO_MAX_BYTES = 65000
_U16 = struct.Struct("=H")
SO_TIMESTAMPNS = 35  # asm-generic/socket.h; SCM_TIMESTAMPNS, its control message, is the same
_TIMESPEC = struct.Struct("=qq")  # struct timespec on a 64-bit kernel
_INT = struct.Struct("=i")
SO_RXQ_OVFL = 40  # its control message: the socket's drops so far, a u32
SO_MEMINFO = 55  # u32[SK_MEMINFO_VARS]; index 8 (SK_MEMINFO_DROPS) is the socket's drops
_MEMINFO = struct.Struct("=9I")
_U32 = struct.Struct("=I")
_ANC_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) + socket.CMSG_SPACE(_INT.size) + socket.CMSG_SPACE(4)
# linux/in.h and linux/in6.h (the socket module names only some): Don't Fragment, the
# interface MTU enforced, the ICMP-learnt path MTU ignored (RFC 8899 §3: the sender probes)
IP_MTU_DISCOVER, IPV6_MTU_DISCOVER = 10, 23
IP_PMTUDISC_PROBE = IPV6_PMTUDISC_PROBE = 3
IP_MTU, IPV6_MTU = 14, 24  # a connected socket's path MTU as the kernel knows it


class BatchTransport(asyncio.DatagramTransport):
    """A non-blocking UDP socket read with ``loop.add_reader`` and ``recvfrom_into``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol: Any,
        *,
        gro: bool = True,
        max_batch: int = MAX_BATCH,
        pause_s: float = 0.0,
    ) -> None:
        super().__init__()
        # a read budget: at most max_batch datagrams, then (pause_s > 0) no read for
        # pause_s after a full batch (the gateway's slow socket: what a flood costs it)
        self.max_batch, self.pause_s = max_batch, pause_s
        self._loop, self._sock, self._protocol = loop, sock, protocol
        self._buf = bytearray(RECV_BYTES)
        self._view = memoryview(self._buf)
        self._backlog: deque[tuple[bytes, Any]] = deque()
        self._connected = sock.getpeername() if _connected(sock) else None
        self.gso = sock.family in (socket.AF_INET, socket.AF_INET6)
        self._closing = False
        self._registered = True  # the socket is registered with the loop
        self._paused = False  # a read pause is under way
        self.pauses = 0  # read pauses taken (pause_reading_for)
        self.stamps = _enable_stamps(sock)
        self.gro = gro and _enable_gro(sock)
        self.reads = 0  # recvmsg/recvfrom calls that returned a datagram (or a GRO run)
        self.oversize = 0  # datagrams the kernel refused as larger than the interface MTU
        self.no_fragments = forbid_fragments(sock)
        self.kernel_drops = 0  # the kernel's drops for this socket, as the last read said
        _enable_overflow(sock)
        loop.add_reader(sock.fileno(), self._on_readable)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        extra = {"socket": self._sock, "sockname": self._sock.getsockname()}
        if self._connected is not None:
            extra["peername"] = self._connected
        return extra.get(name, default)

    def _on_readable(self) -> None:
        batch: list[tuple[bytes, Any]] = []
        arrivals: list[float] = []
        now = self._loop.time()
        offset = time.time() - now  # CLOCK_REALTIME (the stamps) less the loop's clock
        ancillary = self.stamps or self.gro
        limit = self.max_batch
        while len(batch) < limit:
            try:
                if ancillary:
                    n, anc, _flags, addr = self._sock.recvmsg_into([self._buf], _ANC_BYTES)
                else:
                    n, addr = self._sock.recvfrom_into(self._buf)
                    anc = ()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # an ICMP error on a connected socket
                self._protocol.error_received(exc)
                break
            self.reads += 1
            if len(anc) == 1 and anc[0][1] == SO_TIMESTAMPNS and anc[0][0] == socket.SOL_SOCKET:
                # the usual read: one datagram with its stamp (no GRO run, no drops), taken
                # here rather than through _ancillary (a call and a loop per datagram)
                stamp = anc[0][2]
                at, segment = now, 0
                if len(stamp) >= _TIMESPEC.size:
                    sec, nsec = _TIMESPEC.unpack_from(stamp)
                    at = sec + nsec * 1e-9 - offset
                    if at > now:
                        at = now
            else:
                at, segment = _ancillary(anc, offset, now)
                if len(anc) > self.stamps + (segment > 0):  # more than stamp and GRO: drops
                    self.kernel_drops = max(self.kernel_drops, _overflow(anc))
            if segment and n > segment:  # a GRO run: one sender's datagrams, back to back
                view = self._view
                for start in range(0, n, segment):
                    batch.append((bytes(view[start : min(start + segment, n)]), addr))
                    arrivals.append(at)
            else:
                batch.append((bytes(self._view[:n]), addr))
                arrivals.append(at)
        if not batch:
            return
        if self.pause_s and len(batch) >= limit:
            self.pause_reading_for(self.pause_s)
        many = getattr(self._protocol, "datagrams_received", None)
        if many is not None:
            many(batch, arrivals)
        else:
            for data, addr in batch:
                self._protocol.datagram_received(data, addr)

    def pause_reading_until(self, when: float, longest_s: float) -> None:
        """A read pause that ends at ``when`` (the loop's clock) if that is in the next
        ``longest_s``, else after ``longest_s``: a sender's ACKs are then read in the same
        turn of the loop as its pacing timer at ``when`` (one wake-up for both)."""
        now = self._loop.time()
        self._pause_until(when if now < when <= now + longest_s else now + longest_s)

    def pause_reading_for(self, seconds: float) -> None:
        """Leave the socket unread for ``seconds``, then read what queued meanwhile at once
        (what a receiver of a bulk flight asks for after a batch: one wake-up per
        millisecond or so, not one per datagram). A pause under way is not extended."""
        self._pause_until(self._loop.time() + seconds)

    def _pause_until(self, when: float) -> None:
        if self._closing or self._paused:
            return
        self._paused = True
        self.pauses += 1
        if self._registered:
            self._registered = False
            self._loop.remove_reader(self._sock.fileno())
        self._loop.call_at(when, self._resume)

    def _resume(self) -> None:
        """The pause is over: read now (the batch may ask for the next pause), then wait
        on the socket again unless it did."""
        if self._closing:
            return
        self._paused = False
        self._on_readable()
        if not (self._paused or self._closing or self._registered):
            self._registered = True
            self._loop.add_reader(self._sock.fileno(), self._on_readable)

    def sendto(self, data: bytes, addr: Any = None) -> None:  # type: ignore[override]
        self.send_many([(data, addr)])

    def send_many(self, datagrams: list[tuple[bytes, Any]]) -> None:
        """Send in order; equal-size runs to one address as one GSO ``sendmsg``."""
        if self._closing:
            return
        i = 0
        while i < len(datagrams):
            j = self._run_end(datagrams, i) if self.gso else i + 1
            if self._backlog:
                self._backlog.extend(datagrams[i:])
                return
            self._send_run(datagrams[i:j])
            i = j

    @staticmethod
    def _run_end(datagrams: list[tuple[bytes, Any]], i: int) -> int:
        size, addr = len(datagrams[i][0]), datagrams[i][1]
        j, total = i + 1, size
        while j < len(datagrams) and j - i < GSO_MAX_SEGMENTS:
            data, to = datagrams[j]
            if to != addr or len(data) > size or total + len(data) > GSO_MAX_BYTES:
                break
            total += len(data)
            j += 1
            if len(data) < size:  # only the last segment may be shorter
                break
        return j

    def _send_run(self, run: list[tuple[bytes, Any]]) -> None:
        addr = None if self._connected is not None else run[0][1]
        error: OSError | None = None
        for attempt in range(2):
            try:
                self._transmit(run, addr)
                return
            except (BlockingIOError, InterruptedError):
                self._queue(run)
                return
            except OSError as exc:
                error = exc
                if exc.errno != errno.EMSGSIZE or attempt:
                    break
                # a socket with Don't Fragment reports a refused datagram's EMSGSIZE once
                # more, on the next send: try once again before believing it
        assert error is not None
        if len(run) > 1:
            self._send_singly(run, keep_gso=error.errno == errno.EMSGSIZE)
        elif error.errno == errno.EMSGSIZE:
            self.oversize += 1  # larger than the interface takes: the path would drop it
        else:
            self._protocol.error_received(error)

    def _transmit(self, run: list[tuple[bytes, Any]], addr: Any) -> None:
        if len(run) == 1:
            self._send_one(run[0][0], addr)
            return
        cmsg = [(SOL_UDP, UDP_SEGMENT, _U16.pack(len(run[0][0])))]
        payload = [b"".join(data for data, _ in run)]
        if addr is None:
            self._sock.sendmsg(payload, cmsg)
        else:
            self._sock.sendmsg(payload, cmsg, 0, addr)

    def _send_singly(self, run: list[tuple[bytes, Any]], keep_gso: bool) -> None:
        """A refused GSO run, one datagram at a time. GSO is off for good (EINVAL, EIO,
        ENOPROTOOPT: the kernel or device lacks it) unless a segment was too large."""
        before = self.oversize
        self.gso = False
        self.send_many(run)
        self.gso = keep_gso or self.oversize > before

    def _send_one(self, data: bytes, addr: Any) -> None:
        if addr is None:
            self._sock.send(data)
        else:
            self._sock.sendto(data, addr)

    def _queue(self, run: list[tuple[bytes, Any]]) -> None:
        if not self._backlog:
            self._loop.add_writer(self._sock.fileno(), self._on_writable)
        self._backlog.extend(run)

    def _on_writable(self) -> None:
        while self._backlog:
            data, addr = self._backlog[0]
            try:
                self._send_one(data, None if self._connected is not None else addr)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno == errno.EMSGSIZE:
                    self.oversize += 1
                else:
                    self._protocol.error_received(exc)
            self._backlog.popleft()
        self._loop.remove_writer(self._sock.fileno())

    def get_write_buffer_size(self) -> int:
        return sum(len(data) for data, _ in self._backlog)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._sock.fileno())
        if self._backlog:
            self._loop.remove_writer(self._sock.fileno())
            self._backlog.clear()
        self._sock.close()
        self._loop.call_soon(self._protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()


def forbid_fragments(sock: socket.socket) -> bool:
    """Set Don't Fragment, probe mode (see the module docstring); False where the
    socket is not IPv4/IPv6 or the kernel refuses the option."""
    if sock.family == socket.AF_INET:
        level, option = socket.IPPROTO_IP, IP_MTU_DISCOVER
    elif sock.family == socket.AF_INET6:
        level, option = socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER
    else:
        return False
    try:
        sock.setsockopt(level, option, IP_PMTUDISC_PROBE)
        if sock.family == socket.AF_INET6:  # a dual-stack socket's IPv4 datagrams too
            sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_PROBE)
    except OSError:
        return sock.family == socket.AF_INET6 and _probing(sock)
    return True


def _probing(sock: socket.socket) -> bool:
    try:
        return sock.getsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER) == IPV6_PMTUDISC_PROBE
    except OSError:
        return False


def _enable_stamps(sock: socket.socket) -> bool:
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def _enable_gro(sock: socket.socket) -> bool:
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    try:
        sock.setsockopt(SOL_UDP, UDP_GRO, 1)
    except OSError:  # ENOPROTOOPT before Linux 5.0: one datagram per read
        return False
    return True


def _enable_overflow(sock: socket.socket) -> bool:
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)
    except OSError:
        return False
    return True


def _overflow(anc: Any) -> int:
    """The ``SO_RXQ_OVFL`` count in a read's control messages (0 without one)."""
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == SO_RXQ_OVFL and len(data) >= _U32.size:
            return _U32.unpack_from(data)[0]
    return 0


def kernel_drops(sock: socket.socket) -> int:
    """Datagrams the kernel dropped for ``sock`` so far (``SO_MEMINFO``; 0 where refused):
    its queue's overflows and its socket filter's drops."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, _MEMINFO.size)
    except OSError:
        return 0
    return _MEMINFO.unpack_from(raw.ljust(_MEMINFO.size, b"\0"))[8]


def _ancillary(anc: Any, offset: float, now: float) -> tuple[float, int]:
    """``(arrival, segment size)`` from a read's control messages.

    The arrival is the kernel's stamp on the loop's clock, never later than ``now``
    (``now`` without one); the segment size is that of a GRO run (0 without one).
    """
    at, segment = now, 0
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            at = min(sec + nsec * 1e-9 - offset, now)
        elif level == SOL_UDP and kind == UDP_GRO and len(data) >= _INT.size:
            (segment,) = _INT.unpack_from(data)
    return at, segment


def _connected(sock: socket.socket) -> bool:
    try:
        sock.getpeername()
    except OSError:
        return False
    return True


async def open_batch_endpoint(
    protocol: Any,
    local_addr: tuple[str, int] | None = None,
    remote_addr: tuple[str, int] | None = None,
    *,
    gro: bool = True,
    reuse_port: bool = False,
) -> BatchTransport:
    """Bind (and for a client, connect) a UDP socket and attach ``protocol`` to it.

    ``gro=False`` reads one datagram per system call (the path a kernel without
    ``UDP_GRO`` takes); ``reuse_port`` sets ``SO_REUSEPORT`` once bound (the bind itself
    is exclusive; the gateway then binds its HELLO socket to the same port, :mod:`.kfilter`).
    """
    loop = asyncio.get_running_loop()
    host, port = remote_addr or local_addr or ("0.0.0.0", 0)
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    family = infos[0][0]
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        if local_addr is not None:
            sock.bind(infos[0][4] if remote_addr is None else local_addr)
        if reuse_port:  # after the bind: a port another socket holds is still refused
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if remote_addr is not None:
            sock.connect(infos[0][4])
    except OSError:
        sock.close()
        raise
    transport = BatchTransport(loop, sock, protocol, gro=gro)
    protocol.connection_made(transport)
    return transport
