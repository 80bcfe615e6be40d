"""Workloads with structure in time: streams on one connection, chunked playout, agent rounds.

- :func:`run_streams` — several streams share one TCP-like connection (§12.3.4):
  a :class:`~tierwise.proto.streams.StreamScheduler` picks whose bytes go next,
  a :class:`~tierwise.proto.streams.StreamDelivery` decides when arrived bytes
  reach the application (head-of-line or per stream).
- :func:`run_stream` — chunks captured every τ, processed one at a time, sent,
  and played behind an initial buffer that waits for late chunks (§12.1.2).
- :func:`run_rounds` — an agent loop on one kept connection: client work,
  upload, model time, download, round after round (§12.1.3, §12.3.2).

All run the transfers over :class:`~tierwise.sim.link.Link` pairs built from a
:class:`~tierwise.sim.workloads.PathSpec`; a ``_Tap`` around a link sees each
packet put and each arrival, and may drop or delay one.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from tierwise.errors import SimulationError
from tierwise.model.stream import STALL_RESOLUTION_S
from tierwise.proto.rangeset import RangeSet
from tierwise.proto.streams import Chunk, StreamDelivery, StreamScheduler
from tierwise.proto.tcp import Receiver, Segment, Sender
from tierwise.sim.engine import Simulator
from tierwise.sim.link import Link
from tierwise.sim.transport import TransferEnd
from tierwise.sim.workloads import PathSpec, TcpSpec, path_links

__all__ = [
    "RoundsResult",
    "StreamResult",
    "StreamWrite",
    "StreamsResult",
    "run_rounds",
    "run_stream",
    "run_streams",
]

_WRITE_FIRST = -1  # event priority: an application write at t precedes a link wake-up at t


# --------------------------------------------------------------------------- plumbing


def _tcp_pair(tcp: TcpSpec) -> tuple[Sender, Receiver]:
    sender = Sender(mss=tcp.mss, header=tcp.header, initial_window=tcp.initial_window, cc=tcp.cc)
    receiver = Receiver(ack_every=tcp.ack_every, ack_delay=tcp.ack_delay, ack_wire=tcp.ack_bytes)
    return sender, receiver


def _discard(packet: Any) -> None:
    """Deliver callback of a packet the tap chose to lose."""


class _Tap:
    """A link seen from outside: ``on_put(packet, departs_s)`` and ``on_arrive(packet)`` hooks.

    ``drop(packet)`` loses a packet after it has used the link; ``extra_delay(packet)``
    adds propagation to one packet. Has the Link's ``put`` interface.
    """

    def __init__(
        self,
        sim: Simulator,
        link: Link,
        *,
        on_put: Callable[[Any, float], None] | None = None,
        on_arrive: Callable[[Any], None] | None = None,
        drop: Callable[[Any], bool] | None = None,
        extra_delay: Callable[[Any], float] | None = None,
    ) -> None:
        self.sim, self.link = sim, link
        self.on_put, self.on_arrive = on_put, on_arrive
        self.drop, self.extra_delay = drop, extra_delay

    def put(self, packet: Any, wire_bytes: int, deliver: Callable[[Any], None]) -> bool:
        if self.drop is not None and self.drop(packet):
            callback: Callable[[Any], None] = _discard
        else:
            delay = self.extra_delay(packet) if self.extra_delay is not None else 0.0
            callback = partial(self._arrive, deliver, delay)
        ok = self.link.put(packet, wire_bytes, callback)
        if ok and self.on_put is not None:
            self.on_put(packet, self.link.free_at)
        return ok

    def _arrive(self, deliver: Callable[[Any], None], delay: float, packet: Any) -> None:
        if delay > 0:
            self.sim.schedule(delay, self._arrive, deliver, 0.0, packet)
            return
        if self.on_arrive is not None:
            self.on_arrive(packet)
        deliver(packet)


# ---------------------------------------------------------- several streams (§12.3.4)


@dataclass(frozen=True)
class StreamWrite:
    """The application writes ``nbytes`` on ``stream`` at ``time_s`` (priority: smaller first)."""

    time_s: float
    stream: Hashable
    nbytes: int
    priority: int = 0


@dataclass
class StreamsResult:
    """Per chunk (connection order): when it left the link, arrived, reached the application."""

    chunks: list[Chunk]
    sent_s: np.ndarray  # first transmission's last bit leaves the sender's link
    arrive_s: np.ndarray  # all its bytes at the receiver (first copy)
    deliver_s: np.ndarray  # handed to the application
    events: int
    retransmissions: int

    def _per_stream(self, times: np.ndarray) -> dict[Hashable, float]:
        out: dict[Hashable, float] = {}
        for chunk, t in zip(self.chunks, times, strict=True):
            out[chunk.stream] = max(out.get(chunk.stream, -math.inf), float(t))
        return out

    @property
    def sent_done_s(self) -> dict[Hashable, float]:
        """When each stream's last byte left the link (``link_schedule``'s finish times)."""
        return self._per_stream(self.sent_s)

    @property
    def complete_s(self) -> dict[Hashable, float]:
        """When all of each stream's bytes had arrived."""
        return self._per_stream(self.arrive_s)

    @property
    def delivered_s(self) -> dict[Hashable, float]:
        """When each stream's last byte reached the application."""
        return self._per_stream(self.deliver_s)

    def segments(self) -> list[tuple[Hashable, float]]:
        """``(stream, arrival_s)`` per chunk in connection order, for ``delivery_times``."""
        return [(c.stream, float(t)) for c, t in zip(self.chunks, self.arrive_s, strict=True)]


class _StreamEnd(TransferEnd):
    """A TransferEnd fed by a scheduler one chunk at a time, as the link drains.

    The scheduler decides only when the link's backlog is at most ``lowat`` bytes
    (Linux ``TCP_NOTSENT_LOWAT`` / TSQ): bytes already queued at the link are past
    any priority decision, so a deep socket buffer would turn every policy into FIFO.
    """

    def __init__(self, *args: Any, scheduler: StreamScheduler, lowat: float, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.scheduler, self.lowat = scheduler, lowat
        self.on_chunk: Callable[[Chunk], None] | None = None
        self._wake_at: float | None = None

    def write_stream(self, stream: Hashable, nbytes: int, priority: int) -> None:
        self.scheduler.write(stream, nbytes, priority)
        self.pump()

    def pump(self) -> None:
        super().pump()
        sender, sched = self.sender, self.scheduler
        while sched.pending_bytes and self._room():
            chunk = sched.next_chunk(sender.mss)
            assert chunk is not None
            if self.on_chunk is not None:
                self.on_chunk(chunk)
            sender.send(chunk.length)  # exactly one segment: the sender had nothing unsent
            super().pump()
        if sched.pending_bytes and self._link_backlog() > self.lowat:
            self._wake_when_drained()

    def _room(self) -> bool:
        s = self.sender
        window_open = s.flight == 0 or s.flight + s.mss <= s.cwnd
        return s.snd_nxt >= s.app_limit and window_open and self._link_backlog() <= self.lowat

    def _link_backlog(self) -> float:
        return self.data_link.link.backlog_bytes()

    def _wake_when_drained(self) -> None:
        link = self.data_link.link
        wake = link.free_at - self.lowat / link.rate
        if self._wake_at is None or wake < self._wake_at:
            self._wake_at = wake
            self.sim.at(wake, self._wake, wake)

    def _wake(self, scheduled: float) -> None:
        if self._wake_at == scheduled:
            self._wake_at = None
            self.pump()


def run_streams(
    path: PathSpec,
    tcp: TcpSpec,
    writes: Iterable[StreamWrite | tuple],
    policy: str = "fifo",
    delivery: str = "connection",
    seed: int = 0,
    *,
    lose: Collection[tuple[Hashable, int]] = (),
    notsent_lowat_bytes: float = 0.0,
    until: float = 3600.0,
) -> StreamsResult:
    """Several streams over one open connection, client → server (§12.3.4).

    ``writes``: :class:`StreamWrite` or ``(time_s, stream, nbytes[, priority])``.
    ``policy``: ``"fifo"`` or ``"priority"``; ``delivery``: ``"connection"`` or
    ``"stream"``. ``lose``: ``(stream, stream_offset)`` pairs whose carrying
    segment's first transmission is lost (after using the link), to place one
    loss exactly. With header 0, a window that never binds and chunk boundaries
    on the write times, ``sent_done_s`` equals :func:`tierwise.model.multiplex.link_schedule`
    and ``deliver_s`` equals :func:`tierwise.model.multiplex.delivery_times` of ``segments()``.
    """
    table = [w if isinstance(w, StreamWrite) else StreamWrite(*w) for w in writes]
    if not table:
        raise SimulationError("run_streams needs at least one write")
    sim = Simulator(seed)
    uplink, downlink = path_links(sim, path)
    sched, receiving = StreamScheduler(policy), StreamDelivery(delivery)
    log = _ChunkLog(lose)
    data = _Tap(sim, uplink, on_put=log.put, drop=log.drop)
    sender, receiver = _tcp_pair(tcp)
    end = _StreamEnd(
        sim, sender, receiver, data, downlink, "client", scheduler=sched, lowat=notsent_lowat_bytes
    )
    end.on_chunk = lambda chunk: (log.add(chunk), receiving.expect(chunk))
    data.on_arrive = lambda seg: log.arrive(seg, sim.now, receiving)
    for w in table:
        sim.at(w.time_s, end.write_stream, w.stream, w.nbytes, w.priority, priority=_WRITE_FIRST)
    sim.run(until=until)
    if sched.pending_bytes or None in receiving.delivered_s:
        raise SimulationError(f"the streams were not all delivered within {until} s")
    return StreamsResult(
        list(sched.chunks),
        np.array(log.sent_s),
        np.array(log.arrive_s),
        np.array(receiving.delivered_s, dtype=float),
        sim.events,
        sender.stats.retransmissions,
    )


class _ChunkLog:
    """Per-chunk send and arrival times, keyed by connection offset; the scripted losses."""

    def __init__(self, lose: Collection[tuple[Hashable, int]]) -> None:
        self.lose = list(lose)
        self.index: dict[int, int] = {}  # connection start -> chunk index
        self.chunks: list[Chunk] = []
        self.sent_s: list[float] = []
        self.arrive_s: list[float] = []
        self.arrived = RangeSet()

    def add(self, chunk: Chunk) -> None:
        self.index[chunk.start] = len(self.chunks)
        self.chunks.append(chunk)
        self.sent_s.append(math.nan)
        self.arrive_s.append(math.nan)

    def put(self, seg: Segment, departs_s: float) -> None:
        if not seg.retx:
            self.sent_s[self.index[seg.seq]] = departs_s

    def drop(self, seg: Segment) -> bool:
        if seg.retx:
            return False
        chunk = self.chunks[self.index[seg.seq]]
        return any(
            s == chunk.stream and chunk.stream_offset <= off < chunk.stream_offset + chunk.length
            for s, off in self.lose
        )

    def arrive(self, seg: Segment, now: float, receiving: StreamDelivery) -> None:
        i = self.index[seg.seq]
        if math.isnan(self.arrive_s[i]):
            self.arrive_s[i] = now
        self.arrived.add(seg.seq, seg.end)
        receiving.update(self.arrived, now)


# -------------------------------------------------------- streaming playout (§12.1.2)


@dataclass
class StreamResult:
    """Per-chunk event times of a simulated stream (seconds from the start of capture)."""

    ready_s: np.ndarray
    compute_done_s: np.ndarray
    send_done_s: np.ndarray  # the chunk's last packet leaves the link (first transmission)
    arrive_s: np.ndarray
    play_s: np.ndarray
    stall_s: np.ndarray  # per chunk: how long playback waited for it
    period_s: float
    events: int
    transport: str
    retransmissions: int = 0

    @property
    def first_play_s(self) -> float:
        return float(self.play_s[0])

    @property
    def total_stall_s(self) -> float:
        return float(self.stall_s.sum())

    def summary(self) -> dict[str, Any]:
        return {
            "first_play_s": self.first_play_s,
            "stall_s": self.total_stall_s,
            "end_s": float(self.play_s[-1] + self.period_s),
            "transport": self.transport,
            "retransmissions": self.retransmissions,
            "events": self.events,
            "chunks": [
                {"arrive_s": float(a), "play_s": float(p), "stall_s": float(s)}
                for a, p, s in zip(self.arrive_s, self.play_s, self.stall_s, strict=True)
            ],
        }


class _Processor:
    """One worker, chunks in order: ``c_i = max(a_i, c_{i−1}) + m_i``."""

    def __init__(self, sim: Simulator, compute_s: np.ndarray, done: Callable[[int], None]):
        self.sim, self.compute_s, self.done = sim, compute_s, done
        self.queue: deque[int] = deque()
        self.busy = False
        self.done_s = np.full(compute_s.size, math.nan)

    def ready(self, i: int) -> None:
        self.queue.append(i)
        if not self.busy:
            self._start()

    def _start(self) -> None:
        i = self.queue.popleft()
        self.busy = True
        self.sim.schedule(self.compute_s[i], self._finish, i)

    def _finish(self, i: int) -> None:
        self.done_s[i] = self.sim.now
        self.busy = False
        self.done(i)
        if self.queue:
            self._start()


class _Player:
    """In-order playback after an initial buffer ``J``: ``p_i = max(r_i, p_{i−1} + τ)``.

    Waits for a missing chunk rather than skipping it (§12.1.2, figure 12-6).
    """

    def __init__(self, sim: Simulator, count: int, period_s: float, buffer_s: float) -> None:
        self.sim, self.period_s, self.buffer_s = sim, period_s, buffer_s
        self.arrive_s = np.full(count, math.nan)
        self.play_s = np.full(count, math.nan)
        self.stall_s = np.zeros(count)
        self.next = 0
        self.free_at: float | None = None  # when the clock may start the next chunk

    def arrive(self, i: int) -> None:
        if not math.isnan(self.arrive_s[i]):
            return
        self.arrive_s[i] = self.sim.now
        if i == 0:
            self.free_at = self.sim.now + self.buffer_s
            self.sim.at(self.free_at, self._try)
        else:
            self._try()

    def _try(self) -> None:
        i, now = self.next, self.sim.now
        if i >= self.play_s.size or math.isnan(self.arrive_s[i]):
            return
        if self.free_at is None or now < self.free_at:
            return
        stall = now - self.free_at if i else 0.0
        self.stall_s[i] = stall if stall >= STALL_RESOLUTION_S else 0.0
        self.play_s[i] = now
        self.next += 1
        self.free_at = now + self.period_s
        self.sim.at(self.free_at, self._try)


def run_stream(
    path: PathSpec,
    tcp: TcpSpec,
    chunks: int,
    period_s: float,
    chunk_bytes: int,
    compute_s: float | np.ndarray,
    buffer_s: float,
    *,
    propagation_overrides_s: Mapping[int, float] | None = None,
    transport: str = "datagram",
    direction: str = "down",
    seed: int = 0,
    until: float = 3600.0,
) -> StreamResult:
    """Capture every ``period_s``, process (``compute_s``), send, play behind ``buffer_s``.

    Chunk ``i`` is ready at ``(i+1)·τ``; one processor serves chunks in order; the
    result goes over ``direction`` of ``path`` either as datagrams (``"datagram"``:
    RTP/UDP-like, packets of at most ``tcp.mss`` payload plus ``tcp.header``, no
    retransmission) or over one open TCP-like connection (``"tcp"``: in-order
    bytes, so a chunk arrives when the receiver has delivered all of it).
    ``propagation_overrides_s`` sets one chunk's one-way propagation (every packet
    carrying it, retransmissions included), e.g. ``{2: 0.050}`` (§12.1.2). The
    player plays in order and waits for a late chunk.
    """
    _check_stream(transport, direction, chunks, chunk_bytes, period_s, buffer_s)
    compute = np.broadcast_to(np.asarray(compute_s, dtype=float), (chunks,)).copy()
    if np.any(compute < 0):
        raise SimulationError("compute time must be ≥ 0")
    sim = Simulator(seed)
    up, down = path_links(sim, path)
    data, back = (down, up) if direction == "down" else (up, down)
    extra = _extra_delays(propagation_overrides_s or {}, chunks, data.prop)
    player = _Player(sim, chunks, period_s, buffer_s)
    send = _SENDERS[transport](sim, tcp, data, back, chunk_bytes, extra, player.arrive)
    processor = _Processor(sim, compute, send.chunk)
    for i in range(chunks):
        sim.at((i + 1) * period_s, processor.ready, i)
    sim.run(until=until)
    missing = np.flatnonzero(np.isnan(player.play_s))
    if missing.size:
        raise SimulationError(
            f"chunk {int(missing[0])} was never played within {until} s "
            f"(a lost datagram stalls a waiting player for good; use transport='tcp')"
        )
    return StreamResult(
        (np.arange(chunks) + 1.0) * period_s,
        processor.done_s,
        np.array(send.sent_s),
        player.arrive_s,
        player.play_s,
        player.stall_s,
        float(period_s),
        sim.events,
        transport,
        send.retransmissions,
    )


def _check_stream(
    transport: str, direction: str, chunks: int, chunk_bytes: int, period_s: float, buffer_s: float
) -> None:
    if transport not in _SENDERS:
        raise SimulationError(f"unknown transport {transport!r}; known: {', '.join(_SENDERS)}")
    if direction not in ("up", "down"):
        raise SimulationError(f"direction must be 'up' or 'down', got {direction!r}")
    if chunks < 1 or chunk_bytes < 1 or not period_s > 0 or buffer_s < 0:
        raise SimulationError("need chunks ≥ 1, chunk_bytes ≥ 1, period > 0 and buffer ≥ 0")


def _extra_delays(overrides: Mapping[int, float], chunks: int, base_s: float) -> dict[int, float]:
    """Per-chunk one-way propagation overrides as delay added to the path's ``base_s``."""
    for i, d in overrides.items():
        if not 0 <= i < chunks or d < base_s:
            raise SimulationError(
                f"propagation override for chunk {i}: needs 0 ≤ i < {chunks} and "
                f"a value ≥ the path's one-way {base_s} s, got {d}"
            )
    return {i: d - base_s for i, d in overrides.items()}


class _DatagramSender:
    """Chunks as datagrams of at most ``mss`` payload; a chunk arrives with its last packet."""

    def __init__(
        self,
        sim: Simulator,
        tcp: TcpSpec,
        data: Link,
        back: Link,
        chunk_bytes: int,
        extra: dict[int, float],
        arrived: Callable[[int], None],
    ) -> None:
        full, last = divmod(chunk_bytes, tcp.mss)
        self.payloads = [tcp.mss] * full + ([last] if last else [])
        self.header, self.arrived, self.retransmissions = tcp.header, arrived, 0
        self.tap = _Tap(sim, data, extra_delay=lambda p: extra.get(p[0], 0.0))
        self.left: dict[int, int] = {}
        self.sent_s: list[float] = []

    def chunk(self, i: int) -> None:
        self.left[i] = len(self.payloads)
        for payload in self.payloads:
            self.tap.put((i, payload), payload + self.header, self._packet)
        self.sent_s.append(self.tap.link.free_at)

    def _packet(self, packet: tuple[int, int]) -> None:
        i = packet[0]
        self.left[i] -= 1
        if self.left[i] == 0:
            self.arrived(i)


class _TcpStreamSender:
    """Chunks written into one open connection; chunk ``i`` arrives with byte ``(i+1)·size``."""

    def __init__(
        self,
        sim: Simulator,
        tcp: TcpSpec,
        data: Link,
        back: Link,
        chunk_bytes: int,
        extra: dict[int, float],
        arrived: Callable[[int], None],
    ) -> None:
        self.size, self.arrived = chunk_bytes, arrived
        self.sent_s: list[float] = []
        self._last_seg: dict[int, float] = {}
        tap = _Tap(
            sim,
            data,
            on_put=self._put,
            extra_delay=lambda seg: extra.get(seg.seq // chunk_bytes, 0.0),
        )
        sender, receiver = _tcp_pair(tcp)
        self.end = TransferEnd(sim, sender, receiver, tap, back, "stream", None, self._delivered)
        self.next = 0

    @property
    def retransmissions(self) -> int:
        return self.end.sender.stats.retransmissions

    def chunk(self, i: int) -> None:
        self.sent_s.append(math.nan)
        self.end.write(self.size)

    def _put(self, seg: Segment, departs_s: float) -> None:
        if seg.retx:
            return
        for i in range(seg.seq // self.size, (seg.end - 1) // self.size + 1):
            if seg.seq < (i + 1) * self.size <= seg.end:  # the chunk's last byte is aboard
                self.sent_s[i] = departs_s

    def _delivered(self, n: int) -> None:
        while self.next < n // self.size:
            self.arrived(self.next)
            self.next += 1


_SENDERS: dict[str, Callable[..., Any]] = {
    "datagram": _DatagramSender,
    "tcp": _TcpStreamSender,
}


# ------------------------------------------------------------ agent rounds (§12.1.3)


@dataclass
class RoundsResult:
    """Per round: start, upload complete at the server, response complete at the client."""

    start_s: np.ndarray
    upload_done_s: np.ndarray
    done_s: np.ndarray
    window_bytes: np.ndarray  # client's congestion window when each upload starts
    server_window_bytes: np.ndarray  # server's when each response starts
    events: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def round_s(self) -> np.ndarray:
        return self.done_s - self.start_s

    @property
    def time_s(self) -> float:
        return float(self.done_s[-1])


class _IdleRestart:
    """RFC 5681 §4.1: after more than one RTO without sending, ``cwnd = min(IW, cwnd)``.

    Applied by the workload before each write (the proto Sender keeps its window);
    tracks the last send through the link tap.
    """

    def __init__(self, end: TransferEnd, enabled: bool) -> None:
        self.end, self.enabled = end, enabled
        self.last_send_s: float | None = None

    def sent(self, packet: Any, departs_s: float) -> None:
        self.last_send_s = self.end.sim.now

    def before_write(self) -> float:
        sender = self.end.sender
        cc = sender.cc
        idle = self.end.sim.now - self.last_send_s if self.last_send_s is not None else 0.0
        if self.enabled and idle > sender.rto:
            cc.cwnd = min(cc.cwnd, float(sender.initial_window * sender.mss))  # type: ignore[union-attr]
        return sender.cwnd


def run_rounds(
    path: PathSpec,
    tcp: TcpSpec,
    rounds: int,
    upload: int,
    download: int,
    client_s: float,
    model_s: float,
    seed: int = 0,
    *,
    idle_restart: bool = False,
    until: float = 36000.0,
) -> RoundsResult:
    """``rounds`` agent rounds on one kept, open connection (§12.1.3).

    A round: client work ``client_s``, upload ``upload`` bytes, model ``model_s``
    once the server holds them, download ``download`` bytes; the next round starts
    when the client holds the response. A zero-byte response is a control reply
    that takes one-way propagation and no sending time (§12.1.3's "控制回复的发送时间取零").

    The window is kept across rounds by default (Linux with
    ``net.ipv4.tcp_slow_start_after_idle = 0``); ``idle_restart=True`` applies
    RFC 5681 §4.1 before each write: more than one RTO without sending resets the
    window to ``min(IW, cwnd)``, so every round pays slow start again.
    """
    if rounds < 1 or upload < 0 or download < 0 or client_s < 0 or model_s < 0:
        raise SimulationError("need rounds ≥ 1 and non-negative sizes and times")
    sim = Simulator(seed)
    uplink, downlink = path_links(sim, path)
    loop = _Loop(sim, path, tcp, rounds, upload, download, client_s, model_s)
    loop.wire(uplink, downlink, idle_restart)
    sim.at(0.0, loop.start_round)
    sim.run(until=until)
    if loop.round < rounds:
        raise SimulationError(f"only {loop.round} of {rounds} rounds finished within {until} s")
    up, down = loop.up_end.sender.stats, loop.down_end.sender.stats
    return RoundsResult(
        np.array(loop.start_s),
        np.array(loop.upload_done_s),
        np.array(loop.done_s),
        np.array(loop.window),
        np.array(loop.server_window),
        sim.events,
        {
            "retransmissions": up.retransmissions + down.retransmissions,
            "rtos": up.rtos + down.rtos,
        },
    )


class _Loop:
    """The round state machine of :func:`run_rounds`."""

    def __init__(
        self,
        sim: Simulator,
        path: PathSpec,
        tcp: TcpSpec,
        rounds: int,
        upload: int,
        download: int,
        client_s: float,
        model_s: float,
    ) -> None:
        self.sim, self.path, self.tcp, self.rounds = sim, path, tcp, rounds
        self.upload, self.download = upload, download
        self.client_s, self.model_s = client_s, model_s
        self.round = 0
        self.start_s: list[float] = []
        self.upload_done_s: list[float] = []
        self.done_s: list[float] = []
        self.window: list[float] = []
        self.server_window: list[float] = []

    def wire(self, uplink: Link, downlink: Link, idle_restart: bool) -> None:
        sim = self.sim
        s_up, r_up = _tcp_pair(self.tcp)
        s_down, r_down = _tcp_pair(self.tcp)
        up_tap, down_tap = _Tap(sim, uplink), _Tap(sim, downlink)
        self.up_end = TransferEnd(sim, s_up, r_up, up_tap, downlink, "client", None, self._server)
        self.down_end = TransferEnd(
            sim, s_down, r_down, down_tap, uplink, "server", None, self._client
        )
        self.up_idle = _IdleRestart(self.up_end, idle_restart)
        self.down_idle = _IdleRestart(self.down_end, idle_restart)
        up_tap.on_put, down_tap.on_put = self.up_idle.sent, self.down_idle.sent

    def start_round(self) -> None:
        self.start_s.append(self.sim.now)
        self.sim.schedule(self.client_s, self._send_upload)

    def _send_upload(self) -> None:
        self.window.append(self.up_idle.before_write())
        if self.upload:
            self.up_end.write(self.upload)
        else:
            self._server(0)

    def _server(self, n: int) -> None:
        if n >= self.upload * (self.round + 1) and len(self.upload_done_s) == self.round:
            self.upload_done_s.append(self.sim.now)
            self.sim.schedule(self.model_s, self._send_response)

    def _send_response(self) -> None:
        self.server_window.append(self.down_idle.before_write())
        if self.download:
            self.down_end.write(self.download)
        else:
            self.sim.schedule(self.path.rtt / 2, self._client, 0)

    def _client(self, n: int) -> None:
        if n >= self.download * (self.round + 1) and len(self.done_s) == self.round:
            self.done_s.append(self.sim.now)
            self.round += 1
            if self.round < self.rounds:
                self.start_round()
