"""A packet capture: data segments as they arrive at one end of a lab path.

An ``AF_PACKET`` socket bound to the server's TUN device, opened inside its
namespace, receives a copy of every IP packet the kernel takes in there, each
stamped by the kernel on arrival (``SO_TIMESTAMPNS``, put onto ``time.perf_counter``'s
clock, the one the lab's request events use). Grouping the TCP segments' arrivals by
the silences between them gives the sender's rounds — the window per round trip that
slow start doubles, or the pacing that spreads BBR's — without a capture tool
installed, and without a reader competing with the client while it runs.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from tierwise.errors import LabError
from tierwise.lab.bench import netns
from tierwise.lab.bench.service import SO_RCVBUFFORCE

if TYPE_CHECKING:
    from tierwise.lab.bench.path import EmulatedPath

__all__ = ["Arrival", "Capture", "Round", "rounds", "tcp_payload_bytes"]

ETH_P_IP = 0x0800
SOL_PACKET = 263  # <linux/socket.h>
PACKET_STATISTICS = 6  # <linux/if_packet.h>: struct tpacket_stats {packets, drops}
SO_TIMESTAMPNS = 35  # <asm-generic/socket.h>: SCM_TIMESTAMPNS, a struct timespec per packet
TIMESPEC = struct.Struct("qq")  # tv_sec, tv_nsec (64-bit)
RCVBUF_BYTES = 32 << 20  # the whole capture waits in the queue until the block ends
IPPROTO_TCP = 6


@dataclass(frozen=True)
class Arrival:
    """One TCP segment with payload: when it arrived and how many payload bytes."""

    time_s: float
    payload_bytes: int


@dataclass(frozen=True)
class Round:
    """Segments arriving back to back: the first and last arrival, count and bytes."""

    first_s: float
    last_s: float
    segments: int
    payload_bytes: int

    @property
    def spread_s(self) -> float:
        return self.last_s - self.first_s


class Capture:
    """``with Capture(path) as cap:`` records data segments arriving at the server.

    No thread: the kernel stamps each packet as it arrives (``SO_TIMESTAMPNS``) and
    queues it in a large buffer; the block's end drains the queue. So the capture
    neither competes with the client for the interpreter nor mis-times a packet when
    the host is busy, and a queue that overflowed is reported in :attr:`dropped`.
    """

    def __init__(self, path: EmulatedPath, side: str = "server") -> None:
        namespace, device = {
            "server": (path.server_ns, path.server_dev),
            "client": (path.client_ns, path.client_dev),
        }[side]
        with netns.entered(namespace):
            self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
            self._sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self._sock.bind((device, 0))
        except OSError:
            self._sock.close()
            raise
        self.arrivals: list[Arrival] = []
        self.dropped = 0  # packets the kernel could not queue for us (PACKET_STATISTICS)

    def __enter__(self) -> Capture:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._drain()
            _, self.dropped = struct.unpack(
                "II", self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
            )
        finally:
            self._sock.close()

    def _drain(self) -> None:
        """Read every queued packet; kernel arrival stamps onto ``time.perf_counter``'s clock."""
        offset = time.time() - time.perf_counter()  # CLOCK_REALTIME − CLOCK_MONOTONIC, now
        self._sock.setblocking(False)
        space = socket.CMSG_SPACE(TIMESPEC.size)
        while True:
            try:
                packet, ancillary, _, _ = self._sock.recvmsg(65_536, space)
            except BlockingIOError:
                return
            payload = tcp_payload_bytes(packet)
            if not payload:
                continue
            stamps = [
                d
                for lvl, kind, d in ancillary
                if (lvl, kind) == (socket.SOL_SOCKET, SO_TIMESTAMPNS)
            ]
            if not stamps:
                raise LabError("the capture got a packet without its kernel timestamp")
            sec, nsec = TIMESPEC.unpack(stamps[0][: TIMESPEC.size])
            self.arrivals.append(Arrival(sec + nsec * 1e-9 - offset, payload))


def tcp_payload_bytes(packet: bytes) -> int:
    """Payload length of an IPv4 TCP segment (0 for anything else or a bare ACK)."""
    if len(packet) < 20 or packet[0] >> 4 != 4 or packet[9] != IPPROTO_TCP:
        return 0
    ihl = (packet[0] & 0x0F) * 4
    (total,) = struct.unpack_from("!H", packet, 2)
    if len(packet) < ihl + 13:
        return 0
    data_offset = (packet[ihl + 12] >> 4) * 4
    return max(0, total - ihl - data_offset)


def rounds(arrivals: list[Arrival], gap_s: float, min_round_s: float = 0.0) -> list[Round]:
    """Group arrivals into rounds: a new round starts after a silence longer than ``gap_s``
    that ends at least ``min_round_s`` after the current round's first arrival.

    ``min_round_s`` keeps one round whole when its delivery stalls: a sender's next round
    comes a round trip after the last began, so a silence inside a burst (the user-space
    emulator descheduled on a loaded host) is not a new round.
    """
    groups: list[list[Arrival]] = []
    for a in arrivals:
        if not groups or (
            a.time_s - groups[-1][-1].time_s > gap_s
            and a.time_s - groups[-1][0].time_s >= min_round_s
        ):
            groups.append([])
        groups[-1].append(a)
    return [
        Round(g[0].time_s, g[-1].time_s, len(g), sum(a.payload_bytes for a in g)) for g in groups
    ]
