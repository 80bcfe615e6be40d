"""The two halves of a relay stream: what is left to send, and reassembly in stream order.

Each stream is reassembled on its own, so a lost packet delays only the streams
whose bytes it carried (no head-of-line blocking between streams, §12.3.4).
Both halves are bounded: a sender's buffer holds only bytes written and not yet
acknowledged; a receiver buffers at most its advertised window beyond what it
has delivered, and drops bytes beyond it (a flow-control violation).
"""

from __future__ import annotations

from tierwise.errors import LocalProtocolError
from tierwise.proto.rangeset import RangeSet

__all__ = ["RecvStream", "SendStream", "gaps"]

BULK_BYTES = 1_000_000  # a stream that has sent this much yields to smaller ones (§12.3.4)
TRIM_BYTES = 256 * 1024  # the send buffer drops its acknowledged front from this much on
# Bulk streams of one priority share the rate, least recently served first: served by
# stream id, a second download stopped at this mark for as long as the first had bytes.


def gaps(have: RangeSet, start: int, end: int) -> list[tuple[int, int]]:
    """The parts of ``[start, end)`` not in ``have``.

    A binary search in ``have`` (:meth:`RangeSet.uncovered`): at 14 % loss a receiver's
    set holds hundreds of holes across a window, and a walk from its lowest range for
    every frame cost a bulk receiver ≈ 50 µs per datagram.
    """
    return have.uncovered(start, end)


class SendStream:
    """Bytes written and not yet acknowledged, new and to-be-retransmitted ranges."""

    def __init__(
        self, stream_id: int, priority: int, peer_limit: int, bulk_bytes: int = BULK_BYTES
    ) -> None:
        self.stream_id, self.priority = stream_id, priority
        self.bulk_bytes = bulk_bytes  # the bulk mark (RelayConfig.bulk_bytes)
        self.base = 0  # everything below is acknowledged
        # _buf[0] is at offset _start (<= base): the acknowledged front is dropped only once
        # it is at least as long as what is left (and TRIM_BYTES), so a bulk sender copies
        # each byte O(1) times. Dropping it on every ACK made the next write move the whole
        # window (a bytearray grown after a front delete is reallocated and copied).
        self._start = 0
        self._buf = bytearray()
        self.end = 0  # bytes written
        self.next_offset = 0  # next never-sent byte
        self.peer_limit = peer_limit
        self.acked = RangeSet()
        self.lost = RangeSet()
        self.fin, self.fin_sent, self.fin_acked = False, False, False
        self.reset_code: int | None = None
        self.turn = 0  # when the sender last served this stream: bulk streams take turns

    @property
    def buffered_bytes(self) -> int:
        """Bytes written and not yet acknowledged."""
        return self.end - self.base

    @property
    def bulk(self) -> bool:
        return self.next_offset >= self.bulk_bytes

    def write(self, data: bytes, fin: bool) -> None:
        if self.fin or self.reset_code is not None:
            raise LocalProtocolError(f"stream {self.stream_id} is closed for sending")
        self._buf += data
        self.end += len(data)
        self.fin = fin

    def has_data(self, session_credit: int) -> bool:
        """Whether a frame could go out now (lost bytes, new bytes within credit, or a FIN)."""
        return self.has_unmetered() or (session_credit > 0 and self.has_new())

    def has_unmetered(self) -> bool:
        """Lost bytes or a lone FIN to send: a frame that needs no session credit."""
        if self.reset_code is not None:
            return False
        return bool(self.lost) or (self.fin and not self.fin_sent and self.next_offset == self.end)

    def has_new(self) -> bool:
        """Never-sent bytes within the stream's limit (they also need session credit)."""
        return self.reset_code is None and min(self.end, self.peer_limit) > self.next_offset

    def next_frame(self, max_bytes: int, session_credit: int) -> tuple[int, bytes, bool, int]:
        """``(offset, data, fin, new bytes)`` of the next frame: lost bytes first."""
        while (start := self.lost.first_start()) is not None:
            end = self.lost.pop_first_if_starts_at(start)
            assert end is not None
            start = max(start, self.base)
            if start >= end:
                continue  # acknowledged since it was declared lost
            stop = min(end, start + max_bytes)
            if stop < end:
                self.lost.add(stop, end)
            fin = self.fin and stop == self.end
            return start, bytes(self._buf[start - self._start : stop - self._start]), fin, 0
        start = self.next_offset
        stop = max(start, min(self.end, self.peer_limit, start + max_bytes, start + session_credit))
        self.next_offset = stop
        fin = self.fin and stop == self.end
        self.fin_sent = self.fin_sent or fin
        return start, bytes(self._buf[start - self._start : stop - self._start]), fin, stop - start

    def on_acked(self, start: int, end: int, fin: bool) -> None:
        self.fin_acked = self.fin_acked or fin
        base = self.base
        if start <= base < end and not self.acked:
            top: int | None = end  # in order, nothing above held: the usual case
        else:
            self.acked.add(max(start, base), end)
            top = self.acked.pop_first_if_starts_at(base)
        if top is not None:
            self.base = top
            dead = top - self._start
            live = self.end - top
            if dead >= live and (dead >= TRIM_BYTES or not live):
                del self._buf[:dead]
                self._start = top

    def on_lost(self, start: int, end: int, fin: bool) -> None:
        if self.reset_code is not None:
            return
        for s, e in gaps(self.acked, max(start, self.base), end):
            self.lost.add(s, e)
        if fin and not self.fin_acked and start == end:
            self.fin_sent = False  # an empty FIN frame: send it again

    @property
    def done(self) -> bool:
        return self.reset_code is not None or (self.fin_acked and self.base == self.end)


class RecvStream:
    """Out-of-order pieces of one stream, handed over in order."""

    def __init__(self, stream_id: int, window: int, on_consume: bool = False) -> None:
        self.stream_id = stream_id
        self.window = window
        self.on_consume = on_consume  # credit from what the application consumed
        self.delivered = 0
        self.consumed = 0  # of the delivered bytes, what the application took
        self.limit = window  # advertised: the peer may send bytes below this offset
        self.highest = 0
        self.received = RangeSet()
        self._pieces: dict[int, bytes] = {}
        self.final_size: int | None = None
        self.reset = False

    def receive(self, offset: int, data: bytes, fin: bool) -> bool:
        """Store a frame's new bytes; ``False`` if it breaks flow control or the final size."""
        end = offset + len(data)
        if end > self.limit or (self.final_size is not None and end > self.final_size):
            return False
        if fin:
            if (self.final_size is not None and self.final_size != end) or end < self.highest:
                return False
            self.final_size = end
        self.highest = max(self.highest, end)
        for s, e in gaps(self.received, max(offset, self.delivered), end):
            self._pieces[s] = data[s - offset : e - offset]
            self.received.add(s, e)
        return True

    def take(self, offset: int, data: bytes, fin: bool) -> bytes | None:
        """:meth:`receive` then :meth:`pop_ready` in one step: the bytes now in order, or
        None if the frame breaks flow control or the final size. A frame that continues
        what was delivered while nothing waits out of order (every frame of a loss-free
        path) is handed over as it is, without the set of ranges or the piece store."""
        end = offset + len(data)
        delivered = self.delivered
        if (
            offset <= delivered
            and not self._pieces
            and end <= self.limit
            and not fin
            and self.final_size is None
        ):
            if end > self.highest:
                self.highest = end
            if end <= delivered:
                return b""
            ready = data if offset == delivered else data[delivered - offset :]
            self.delivered = end
            return ready
        if not self.receive(offset, data, fin):
            return None
        return self.pop_ready()

    def pop_ready(self) -> bytes:
        """Bytes now contiguous with what was delivered."""
        out = []
        while (piece := self._pieces.pop(self.delivered, None)) is not None:
            out.append(piece)
            self.delivered += len(piece)
        self.received.subtract_below(self.delivered)
        return b"".join(out)

    @property
    def finished(self) -> bool:
        return self.reset or (self.final_size is not None and self.delivered == self.final_size)

    def credit_update(self) -> int | None:
        """A new limit to advertise, once a quarter of the window has been consumed."""
        if self.final_size is not None:
            return None
        new = (self.consumed if self.on_consume else self.delivered) + self.window
        if new - self.limit >= self.window // 4:
            self.limit = new
            return new
        return None
