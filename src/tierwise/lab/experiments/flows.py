"""Competing kernel TCP flows on one emulated bottleneck (the simulator's check).

One :class:`~tierwise.lab.bench.path.EmulatedPath` joins a client and a server
namespace; every flow is its own TCP connection client → server across it, so all data
packets share the emulator's one up-direction queue (drop-tail, ``queue_packets ×
packet_bytes`` bytes) and all ACKs its down-direction: the dumbbell of
:func:`tierwise.sim.flows.run_flows` and of ns-3's ``--mode=flows``. Each flow has its
own congestion control (``TCP_CONGESTION``) and start offset, and sends as fast as its
socket takes bytes until the run ends.

Segments: ``TCP_MAXSEG`` is set to ``mss_bytes + 12`` on both ends, so with
timestamps each data segment carries ``mss_bytes`` of payload (default 1,168 B, the
ns-3 cross-check's segment) in an IP packet of ``mss_bytes + 52`` bytes.

Clock: ``time.monotonic``. The flows of start offset 0 connect at once; time zero of
the record is when the server accepts the first of them (its client, established half
an RTT earlier, has been sending since); a later flow connects at ``t0 + start_s``. One thread runs
everything with non-blocking sockets and ``select``: every ``sample_s`` it records
each receiver's byte count and each sender's ``TCP_INFO`` (window, smoothed RTT,
pacing rate, retransmissions; BBR's model from ``TCP_CC_INFO``). At the end every
socket is reset (nothing drains afterwards) and the path comes down; the emulator's
counters (packets, tail drops per direction) land in the record.

Reported per flow: goodput over its active time, share of all bytes, retransmitted
segments; per window, each flow's share of the bytes delivered in it; Jain's fairness
index over the goodputs.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import asdict, dataclass

from tierwise.errors import LabError, shown
from tierwise.lab.bench import netns
from tierwise.lab.bench.emulator import Direction
from tierwise.lab.bench.path import EmulatedPath, PathConfig
from tierwise.lab.bench.service import set_buffers, set_congestion
from tierwise.lab.experiments.request import TUNED_BUFFER_BYTES, tcp_state
from tierwise.lab.experiments.throughput import close_with_reset
from tierwise.sim.flows import jain_index  # the simulator's, so both report the same index

__all__ = [
    "KERNEL_CCS",
    "FlowsExperiment",
    "jain_index",
    "run_kernel_flows",
    "window_shares",
]

KERNEL_CCS = ("reno", "cubic", "bbr")
TIMESTAMP_OPTION_BYTES = 12  # TCP timestamps option, padded (RFC 7323); in every segment
HEADER_BYTES = 40  # IPv4 + TCP without options
CHUNK_BYTES = 256 << 10
MAX_FLOWS = 16
MAX_DURATION_S = 600.0  # a run holds the shared lab: ten minutes at most
CONNECT_TIMEOUT_S = 10.0
TCP_INFO_TOTAL_RETRANS_OFFSET = 100  # __u32 tcpi_total_retrans
DEFAULT_PACKET_BYTES = 1222  # 1,168 B + 54 B of headers: ns-3's and tierwise.sim's wire size


@dataclass(frozen=True)
class FlowsExperiment:
    """Flows (kernel cc, start offset) on one bottleneck for ``duration_s`` (SI units)."""

    ccs: tuple[str, ...] = ("cubic", "bbr")
    starts_s: tuple[float, ...] = (0.0, 0.0)
    duration_s: float = 60.0
    rtt_s: float = 0.100
    rate_bytes_per_s: float = 20e6 / 8
    queue_packets: int = 615  # 3 BDP of 1,222 B packets at 20 Mbit/s and 100 ms
    packet_bytes: int = DEFAULT_PACKET_BYTES  # the queue's unit: queue_bytes = packets × this
    mss_bytes: int = 1168  # payload per segment
    windows: tuple[tuple[float, float], ...] = ()
    sample_s: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = [c for c in self.ccs if c not in KERNEL_CCS]
        if unknown or not self.ccs:
            what = shown(unknown[0]) if unknown else "(none)"
            raise LabError(f"unknown --cc {what}; known: {', '.join(KERNEL_CCS)}")
        if len(self.ccs) > MAX_FLOWS:
            raise LabError(f"at most {MAX_FLOWS} flows, got {len(self.ccs)}")
        if len(self.starts_s) != len(self.ccs):
            raise LabError(
                f"--start gives {len(self.starts_s)} offsets for {len(self.ccs)} flows; "
                "give one per --cc"
            )
        if not 0 < self.duration_s <= MAX_DURATION_S:
            raise LabError(f"the duration must lie in (0, {MAX_DURATION_S:g}] s")
        if any(not 0 <= s < self.duration_s for s in self.starts_s):
            raise LabError("every start offset must lie in [0, duration)")
        if self.rtt_s < 0 or self.rate_bytes_per_s <= 0:
            raise LabError("the RTT must be ≥ 0 and the rate > 0")
        if self.queue_packets < 1 or not 536 <= self.mss_bytes <= 1448:
            raise LabError("the queue needs ≥ 1 packet and the segment 536–1,448 B")
        if self.packet_bytes < self.mss_bytes + HEADER_BYTES + TIMESTAMP_OPTION_BYTES:
            raise LabError(
                f"a packet of {self.packet_bytes} B cannot hold a {self.mss_bytes} B segment"
            )
        for a, b in self.windows:
            if not 0 <= a < b <= self.duration_s:
                raise LabError(f"window {a:g}–{b:g} s must lie within 0–{self.duration_s:g} s")
        if not 0.01 <= self.sample_s <= 1.0:
            raise LabError("the sampling interval must lie in [0.01, 1] s")

    @property
    def queue_bytes(self) -> int:
        return self.queue_packets * self.packet_bytes

    def path_config(self) -> PathConfig:
        d = Direction(
            delay_s=self.rtt_s / 2,
            rate_bytes_per_s=self.rate_bytes_per_s,
            queue_bytes=self.queue_bytes,
        )
        return PathConfig(up=d, down=d, seed=self.seed)


def window_shares(
    times_s: list[float], delivered: list[list[int]], windows: list[tuple[float, float]]
) -> list[list[float]]:
    """Each flow's share of the bytes delivered in each window ``(a, b)``.

    ``delivered[f][k]`` is flow f's cumulative byte count at ``times_s[k]`` (increasing);
    a window's ends are read at the first sample at or after them (the last if past it).
    A window in which nothing was delivered gives every flow 0.
    """
    out = []
    last = len(times_s) - 1
    for a, b in windows:
        i, j = (min(bisect_left(times_s, t - 1e-9), last) for t in (a, b))
        got = [col[j] - col[i] for col in delivered]
        total = sum(got)
        out.append([g / total if total else 0.0 for g in got])
    return out


class _Flow:
    """One connection: the client's sending socket and the server's receiving one."""

    def __init__(self, index: int, cc: str, start_s: float) -> None:
        self.index, self.cc, self.start_s = index, cc, start_s
        self.sender: socket.socket | None = None
        self.receiver: socket.socket | None = None
        self.connected_s: float | None = None  # on the record's clock (may be < 0 for t0's own)
        self.received = 0


def run_kernel_flows(exp: FlowsExperiment, progress: Callable[[float], None] | None = None) -> dict:
    """Bring the path up, run the flows, bring it down; the JSON-ready record.

    ``progress`` is called about once a second with the seconds run so far.
    """
    netns.require_lab()
    path = EmulatedPath(exp.path_config())
    flows = [_Flow(i, cc, s) for i, (cc, s) in enumerate(zip(exp.ccs, exp.starts_s, strict=True))]
    with path:
        series = _drive(path, exp, flows, progress)
    stats = {k: asdict(v) for k, v in (path.stats or {}).items()}
    return _record(exp, flows, series, stats)


def _socket(path: EmulatedPath, side: str, exp: FlowsExperiment, cc: str | None) -> socket.socket:
    sock = path.socket(side)
    try:
        set_buffers(sock, TUNED_BUFFER_BYTES)  # the receive window must not be what limits
        sock.setsockopt(
            socket.IPPROTO_TCP, socket.TCP_MAXSEG, exp.mss_bytes + TIMESTAMP_OPTION_BYTES
        )
        if cc is not None:
            set_congestion(sock, cc)
    except BaseException:
        sock.close()
        raise
    return sock


def _drive(
    path: EmulatedPath,
    exp: FlowsExperiment,
    flows: list[_Flow],
    progress: Callable[[float], None] | None,
) -> dict:
    listener = _socket(path, "server", exp, None)
    try:
        listener.bind((path.server_addr, 0))
        listener.listen(len(flows))
        listener.setblocking(False)
        return _Driver(path, exp, flows, listener, progress).run()
    finally:
        for f in flows:
            for sock in (f.sender, f.receiver):
                if sock is not None:
                    close_with_reset(sock)
        listener.close()


def _connect(path: EmulatedPath, exp: FlowsExperiment, flow: _Flow, address: tuple) -> None:
    sock = _socket(path, "client", exp, flow.cc)
    sock.setblocking(False)
    flow.sender = sock
    err = sock.connect_ex(address)
    if err not in (0, errno.EINPROGRESS):
        raise LabError(f"flow {flow.index} could not connect: {os.strerror(err)}")


class _Driver:
    """The run's one thread: connects each flow when due, accepts, reads, writes, samples."""

    def __init__(
        self,
        path: EmulatedPath,
        exp: FlowsExperiment,
        flows: list[_Flow],
        listener: socket.socket,
        progress: Callable[[float], None] | None,
    ) -> None:
        self.path, self.exp, self.flows, self.listener = path, exp, flows, listener
        self.progress = progress
        self.t0: float | None = None  # when the first flow was established
        self.by_port: dict[int, _Flow] = {}  # client port → flow, to match accepted sockets
        self.series: dict = {
            "time_s": [],
            "delivered_bytes": [[] for _ in flows],
            "senders": [[] for _ in flows],
        }
        self.next_sample_s = self.next_progress_s = 0.0
        self.chunk = memoryview(bytes(CHUNK_BYTES))
        self.buf = bytearray(CHUNK_BYTES)

    def run(self) -> dict:
        began = time.monotonic()
        self._start_due(0.0)
        while True:
            now = time.monotonic()
            if self.t0 is None:
                if now - began > CONNECT_TIMEOUT_S:
                    raise LabError(f"no flow connected within {CONNECT_TIMEOUT_S:g} s")
            elif self._tick(now - self.t0):
                return self.series
            self._serve()

    def _start_due(self, rel_s: float) -> None:
        address = self.listener.getsockname()
        for f in self.flows:
            if f.sender is None and rel_s >= f.start_s:
                _connect(self.path, self.exp, f, address)
                self.by_port[f.sender.getsockname()[1]] = f  # type: ignore[union-attr]

    def _tick(self, rel_s: float) -> bool:
        """Start the flows now due, sample on the grid; True once the run is over."""
        self._start_due(rel_s)
        if rel_s >= self.next_sample_s:
            _sample(self.series, self.flows, rel_s)
            while self.next_sample_s <= rel_s:  # late: skip the missed ticks, keep the grid
                self.next_sample_s += self.exp.sample_s
        if rel_s >= self.exp.duration_s:
            return True
        if self.progress is not None and rel_s >= self.next_progress_s:
            self.progress(rel_s)
            self.next_progress_s += 1.0
        return False

    def _serve(self) -> None:
        receivers = {f.receiver: f for f in self.flows if f.receiver is not None}
        senders = {f.sender: f for f in self.flows if f.sender is not None}
        readable, writable, _ = select.select(
            [self.listener, *receivers], list(senders), [], self.exp.sample_s / 2
        )
        now = time.monotonic()
        for sock in readable:
            if sock is self.listener:
                self.t0 = _accept(self.listener, self.by_port, now, self.t0)
            else:
                self._read(sock, receivers[sock])
        for sock in writable:
            self._write(sock, senders[sock])

    def _read(self, sock: socket.socket, flow: _Flow) -> None:
        try:
            while n := sock.recv_into(self.buf):
                flow.received += n
        except BlockingIOError:
            pass

    def _write(self, sock: socket.socket, flow: _Flow) -> None:
        if flow.connected_s is None:  # connecting; the server side's accept stamps it
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise LabError(f"flow {flow.index} could not connect: {os.strerror(err)}")
            return
        try:
            sock.send(self.chunk)
        except BlockingIOError:
            pass


def _accept(
    listener: socket.socket, by_port: dict[int, _Flow], now: float, t0: float | None
) -> float | None:
    """Accept what is waiting; the first accepted connection fixes time zero."""
    while True:
        try:
            conn, peer = listener.accept()
        except BlockingIOError:
            return t0
        conn.setblocking(False)
        flow = by_port.get(peer[1])
        if flow is None:
            conn.close()
            continue
        if t0 is None:
            t0 = now
        flow.receiver = conn
        flow.connected_s = now - t0


def _sample(series: dict, flows: list[_Flow], rel: float) -> None:
    series["time_s"].append(round(rel, 4))
    for f in flows:
        series["delivered_bytes"][f.index].append(f.received)
        state = None
        if f.sender is not None and f.connected_s is not None:
            state = tcp_state(f.sender)
            raw = f.sender.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
            (state["retransmitted_segments"],) = struct.unpack_from(
                "I", raw, TCP_INFO_TOTAL_RETRANS_OFFSET
            )
        series["senders"][f.index].append(state)


def _record(exp: FlowsExperiment, flows: list[_Flow], series: dict, stats: dict) -> dict:
    times = series["time_s"]
    per_flow = []
    for f in flows:
        active_s = exp.duration_s - f.start_s
        last = next((s for s in reversed(series["senders"][f.index]) if s), {})
        per_flow.append(
            {
                "cc": f.cc,
                "start_s": f.start_s,
                "connected_s": f.connected_s,
                "delivered_bytes": f.received,
                "goodput_bytes_per_s": f.received / active_s,
                "retransmitted_segments": last.get("retransmitted_segments", 0),
            }
        )
    total = sum(p["delivered_bytes"] for p in per_flow)
    for p in per_flow:
        p["share"] = p["delivered_bytes"] / total if total else 0.0
    windows = list(exp.windows)
    shares = window_shares(times, series["delivered_bytes"], windows) if times else []
    return {
        "experiment": "flows",
        "parameters": {
            "ccs": list(exp.ccs),
            "starts_s": list(exp.starts_s),
            "duration_s": exp.duration_s,
            "rtt_s": exp.rtt_s,
            "rate_bytes_per_s": exp.rate_bytes_per_s,
            "queue_packets": exp.queue_packets,
            "packet_bytes": exp.packet_bytes,
            "queue_bytes": exp.queue_bytes,
            "mss_bytes": exp.mss_bytes,
            "ip_packet_bytes": exp.mss_bytes + HEADER_BYTES + TIMESTAMP_OPTION_BYTES,
            "socket_buffers_bytes": TUNED_BUFFER_BYTES,
            "sample_s": exp.sample_s,
            "direction": "up (client → server; the client sends)",
        },
        "kernel": os.uname().release,
        "seeds": {"path": exp.seed},
        "flows": per_flow,
        "jain_index": jain_index([p["goodput_bytes_per_s"] for p in per_flow]),
        "windows": [
            {"from_s": a, "to_s": b, "shares": s} for (a, b), s in zip(windows, shares, strict=True)
        ],
        "emulator": stats,
        "series": series,
    }
