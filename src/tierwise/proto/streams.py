"""Several streams over one connection, sans-IO: who sends next, who may read (§12.3.4).

Two orders can change when an image, audio and control messages share one
connection. The sender's schedule decides which stream's bytes fill the next
piece of the connection byte stream; the receiver's ordering rule decides when
bytes that have arrived reach the application::

    sched = StreamScheduler("priority")
    sched.write("image", 5_000_000, priority=1)
    sched.write("audio", 1_000_000, priority=0)    # smaller is more urgent
    chunk = sched.next_chunk(1448)                 # audio's first 1,448 bytes
    delivery = StreamDelivery("stream")
    delivery.expect(chunk)                         # the framing: which bytes are whose
    events = delivery.update(arrived, now)         # arrived: a RangeSet of connection bytes

Scheduling policies (:data:`SCHEDULING_POLICIES`):

- ``"fifo"``: the oldest pending write first, whatever its stream (one queue).
- ``"priority"``: the most urgent stream with pending bytes (smallest
  ``priority``, like RFC 9218 urgency and :class:`tierwise.model.multiplex.Flow`;
  ties go to the stream whose oldest pending write is oldest), chosen again for
  every chunk — an urgent write preempts a bulk stream at the next chunk boundary.

Delivery orders (:data:`DELIVERY_ORDERS`):

- ``"connection"`` (TCP, HTTP/2): a chunk is handed over once every connection
  byte before it has arrived — a gap blocks every stream behind it.
- ``"stream"`` (QUIC): a chunk is handed over once its own stream's earlier
  bytes have arrived.

A chunk is handed over whole, as a frame is. Nothing here reads a clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from tierwise.errors import LocalProtocolError
from tierwise.proto.rangeset import RangeSet

__all__ = [
    "DELIVERY_ORDERS",
    "SCHEDULING_POLICIES",
    "Chunk",
    "StreamData",
    "StreamDelivery",
    "StreamScheduler",
]


@dataclass(frozen=True, slots=True)
class Chunk:
    """``[start, end)`` of the connection byte stream carries ``stream`` from ``stream_offset``."""

    stream: Hashable
    stream_offset: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end or self.stream_offset < 0:
            raise LocalProtocolError(
                f"a chunk needs 0 ≤ start < end and stream_offset ≥ 0, got {self!r}"
            )

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class StreamData:
    """Event: stream bytes ``[start, end)`` (stream offsets) reached the application."""

    stream: Hashable
    start: int
    end: int
    time_s: float


class _Write:
    __slots__ = ("remaining", "seq")

    def __init__(self, seq: int, remaining: int) -> None:
        self.seq, self.remaining = seq, remaining


# policy -> sort key of a stream with pending writes: (its priority, its oldest write)
_SchedKey = Callable[[int, _Write], tuple[int, ...]]
_KEYS: dict[str, _SchedKey] = {
    "fifo": lambda priority, head: (head.seq,),
    "priority": lambda priority, head: (priority, head.seq),
}
SCHEDULING_POLICIES = tuple(_KEYS)
DELIVERY_ORDERS = ("connection", "stream")


def _count(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise LocalProtocolError(f"{name} must be an integer ≥ {minimum}, got {value!r}")
    return value


class StreamScheduler:
    """Sender side: queue writes per stream, cut the connection byte stream into chunks."""

    def __init__(self, policy: str = "fifo") -> None:
        try:
            self._key = _KEYS[policy]
        except (KeyError, TypeError):
            raise LocalProtocolError(
                f"unknown scheduling policy {policy!r}; known: {', '.join(SCHEDULING_POLICIES)}"
            ) from None
        self.policy = policy
        self.offset = 0  # connection bytes handed out so far
        self.pending_bytes = 0
        self.chunks: list[Chunk] = []  # in connection order
        self.written: dict[Hashable, int] = {}  # stream -> bytes written
        self._queues: dict[Hashable, deque[_Write]] = {}
        self._priority: dict[Hashable, int] = {}
        self._sent: dict[Hashable, int] = {}  # stream -> stream bytes handed out
        self._seq = 0

    def write(self, stream: Hashable, nbytes: int, priority: int = 0) -> None:
        """The application writes ``nbytes`` on ``stream``; ``priority`` applies to the stream."""
        _count("bytes written", nbytes, 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise LocalProtocolError(f"priority must be an integer, got {priority!r}")
        self._priority[stream] = priority  # the latest write re-prioritises (RFC 9218 §7)
        self.written[stream] = self.written.get(stream, 0) + nbytes
        if nbytes == 0:
            return
        self._seq += 1
        self._queues.setdefault(stream, deque()).append(_Write(self._seq, nbytes))
        self.pending_bytes += nbytes

    def next_chunk(self, max_bytes: int) -> Chunk | None:
        """The next at most ``max_bytes`` of one stream, by the policy; None if nothing waits."""
        _count("chunk size", max_bytes, 1)
        if not self._queues:
            return None
        key = self._key
        stream = min(self._queues, key=lambda s: key(self._priority[s], self._queues[s][0]))
        queue = self._queues[stream]
        head = queue[0]
        length = min(max_bytes, head.remaining)
        head.remaining -= length
        if head.remaining == 0:
            queue.popleft()
            if not queue:
                del self._queues[stream]
        stream_offset = self._sent.get(stream, 0)
        self._sent[stream] = stream_offset + length
        chunk = Chunk(stream, stream_offset, self.offset, self.offset + length)
        self.offset += length
        self.pending_bytes -= length
        self.chunks.append(chunk)
        return chunk

    def ranges(self, stream: Hashable) -> list[tuple[int, int]]:
        """Where ``stream``'s bytes sit in the connection byte stream (merged ranges)."""
        return list(RangeSet([(c.start, c.end) for c in self.chunks if c.stream == stream]))


class StreamDelivery:
    """Receiver side: which arrived bytes may reach the application, in one of two orders."""

    def __init__(self, order: str = "connection") -> None:
        if order not in DELIVERY_ORDERS:
            raise LocalProtocolError(
                f"unknown delivery order {order!r}; known: {', '.join(DELIVERY_ORDERS)}"
            )
        self.order = order
        self.chunks: list[Chunk] = []  # in connection order
        self.delivered_s: list[float | None] = []  # per chunk, when handed over
        self.delivered: dict[Hashable, int] = {}  # stream -> stream bytes handed over
        self._by_stream: dict[Hashable, list[int]] = {}  # chunk indices, stream order
        self._cursor: dict[Hashable, int] = {}  # position in _by_stream of the next chunk
        self._next = 0  # connection order: first chunk not yet handed over

    def expect(self, chunk: Chunk) -> None:
        """Learn that ``chunk`` follows the previous one (what frame headers tell a receiver)."""
        end = self.chunks[-1].end if self.chunks else 0
        indices = self._by_stream.get(chunk.stream, [])
        last = self.chunks[indices[-1]] if indices else None
        expected = last.stream_offset + last.length if last else 0
        if chunk.start != end or chunk.stream_offset != expected:
            raise LocalProtocolError(
                f"chunk {chunk!r} does not continue the connection at {end} "
                f"and stream {chunk.stream!r} at {expected}"
            )
        self._by_stream.setdefault(chunk.stream, indices).append(len(self.chunks))
        self._cursor.setdefault(chunk.stream, 0)
        self.delivered.setdefault(chunk.stream, 0)
        self.chunks.append(chunk)
        self.delivered_s.append(None)

    def update(self, arrived: RangeSet, now: float, *, contiguous: int = 0) -> list[StreamData]:
        """Hand over what the order allows; ``arrived`` (plus every byte below ``contiguous``).

        ``contiguous`` lets a caller pass a TCP receiver's ``rcv_nxt`` with only its
        out-of-order ranges in ``arrived``.
        """

        def have(chunk: Chunk) -> bool:
            return chunk.end <= contiguous or arrived.covered(chunk.start, chunk.end)

        if self.order == "connection":
            return self._connection(have, now)
        return self._per_stream(have, now)

    def _connection(self, have: Callable[[Chunk], bool], now: float) -> list[StreamData]:
        events: list[StreamData] = []
        while self._next < len(self.chunks) and have(self.chunks[self._next]):
            events.append(self._hand_over(self._next, now))
            self._next += 1
        return events

    def _per_stream(self, have: Callable[[Chunk], bool], now: float) -> list[StreamData]:
        events: list[StreamData] = []
        for stream, indices in self._by_stream.items():
            pos = self._cursor[stream]
            while pos < len(indices) and have(self.chunks[indices[pos]]):
                events.append(self._hand_over(indices[pos], now))
                pos += 1
            self._cursor[stream] = pos
        return events

    def _hand_over(self, index: int, now: float) -> StreamData:
        chunk = self.chunks[index]
        self.delivered_s[index] = now
        self.delivered[chunk.stream] += chunk.length
        end = chunk.stream_offset + chunk.length
        return StreamData(chunk.stream, chunk.stream_offset, end, now)
