"""A TCP-like reliable byte stream, sans-IO: a :class:`Sender` and a :class:`Receiver`.

Neither reads a clock nor touches a socket. Feed them what arrives with the
current time; drain what they want to send; ask for their next timer deadline
(aioquic's pattern)::

    sender.send(n)                        # the application has n more bytes
    for seg in sender.segments_to_send(now): link.put(seg)
    ack = receiver.receive(seg, now)      # an Ack, or None while delaying it
    sender.receive_ack(ack, now)
    sender.get_timer(); sender.handle_timer(now)

Loss recovery is SACK-based: a segment is lost once a segment *sent after it*
has been delivered (the RACK rule with no reordering window, RFC 8985), or when
the retransmission timer fires (RFC 6298, 200 ms minimum as in Linux). Lost
segments are retransmitted before new data, within the congestion window.
A loss episode lasts until the recovery point is acknowledged (RFC 6582).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tierwise.errors import LocalProtocolError
from tierwise.proto.congestion import CongestionController, make_controller
from tierwise.proto.rangeset import RangeSet

__all__ = ["Ack", "Receiver", "Segment", "Sender", "SenderStats"]

RTO_MIN_S = 0.2  # Linux TCP_RTO_MIN
RTO_MAX_S = 60.0  # RFC 6298 §2.5 allows a cap of at least 60 s
RTO_INITIAL_S = 1.0  # RFC 6298 §2.1
SACK_BLOCKS = 3  # RFC 2018: three blocks fit beside timestamps


class Segment:
    """One data segment in flight; ``wire`` is its size on the link (payload + header)."""

    __slots__ = (
        "delivered",
        "delivered_at",
        "length",
        "lost",
        "retx",
        "sacked",
        "sent_at",
        "seq",
        "wire",
    )

    def __init__(
        self,
        seq: int,
        length: int,
        wire: int,
        sent_at: float,
        retx: bool,
        delivered: int,
        delivered_at: float,
    ) -> None:
        self.seq = seq
        self.length = length
        self.wire = wire
        self.sent_at = sent_at
        self.retx = retx
        self.sacked = False
        self.lost = False
        self.delivered = delivered
        self.delivered_at = delivered_at

    @property
    def end(self) -> int:
        return self.seq + self.length


@dataclass(frozen=True, slots=True)
class Ack:
    """A cumulative acknowledgement with SACK blocks and the echoed send time (RFC 7323)."""

    ack: int
    sack: tuple[tuple[int, int], ...]
    echo: float
    wire: int


@dataclass
class SenderStats:
    segments_sent: int = 0
    retransmissions: int = 0
    rtos: int = 0
    bytes_on_wire: int = 0
    congestion_events: int = 0


@dataclass
class Sender:
    """Sends an application byte stream in segments of ``mss`` payload bytes."""

    mss: int = 1448
    header: int = 52
    initial_window: int = 10
    cc: str | CongestionController = "newreno"
    stats: SenderStats = field(default_factory=SenderStats)

    def __post_init__(self) -> None:
        if self.mss <= 0 or self.header < 0:
            raise LocalProtocolError(
                f"mss must be > 0 and header ≥ 0, got {self.mss}, {self.header}"
            )
        if isinstance(self.cc, str):
            self.cc = make_controller(self.cc, mss=self.mss, initial_window=self.initial_window)
        self.app_limit = 0  # bytes the application has handed over
        self.snd_una = 0
        self.snd_nxt = 0
        self.flight = 0  # bytes outstanding, not SACKed, not marked lost
        self._out: deque[Segment] = deque()  # unacknowledged, in sequence order
        self._by_send: deque[tuple[float, Segment]] = deque()  # (sent_at, seg) in send order
        self._lost: deque[Segment] = deque()
        self._rack_sent_at = -1.0
        self._recovery_point: int | None = None
        self.delivered = 0
        self.delivered_at = 0.0
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.min_rtt = float("inf")
        self.rto = RTO_INITIAL_S
        self._rto_at: float | None = None
        self._next_send_at = 0.0

    # ------------------------------------------------------------------ application

    def send(self, nbytes: int) -> None:
        """The application hands over ``nbytes`` more bytes."""
        if nbytes < 0:
            raise LocalProtocolError(f"cannot send a negative number of bytes ({nbytes})")
        self.app_limit += nbytes

    @property
    def done(self) -> bool:
        """Every byte handed over has been acknowledged."""
        return self.snd_una >= self.app_limit

    @property
    def cwnd(self) -> float:
        return self.cc.cwnd  # type: ignore[union-attr]

    # ---------------------------------------------------------------------- output

    def segments_to_send(self, now: float) -> list[Segment]:
        """Segments the window (and pacing) allow now: retransmissions first."""
        out: list[Segment] = []
        cc: CongestionController = self.cc  # type: ignore[assignment]
        while self.flight + self.mss <= cc.cwnd or (self.flight == 0 and cc.cwnd > 0):
            if cc.pacing_rate and now < self._next_send_at - 1e-12:
                break
            seg = self._next_segment(now)
            if seg is None:
                break
            out.append(seg)
            if cc.pacing_rate:
                self._next_send_at = max(now, self._next_send_at) + seg.wire / cc.pacing_rate
        return out

    def _next_segment(self, now: float) -> Segment | None:
        while self._lost and (self._lost[0].sacked or self._lost[0].end <= self.snd_una):
            self._lost.popleft()
        if self._lost:
            seg = self._lost.popleft()
            seg.lost, seg.retx, seg.sent_at = False, True, now
            self.stats.retransmissions += 1
        elif self.snd_nxt < self.app_limit:
            length = min(self.mss, self.app_limit - self.snd_nxt)
            seg = Segment(
                self.snd_nxt,
                length,
                length + self.header,
                now,
                False,
                self.delivered,
                self.delivered_at,
            )
            self.snd_nxt += length
            self._out.append(seg)
        else:
            return None
        seg.delivered, seg.delivered_at = self.delivered, self.delivered_at
        self.flight += seg.length
        self._by_send.append((now, seg))
        self.stats.segments_sent += 1
        self.stats.bytes_on_wire += seg.wire
        if self._rto_at is None:
            self._rto_at = now + self.rto
        return seg

    # ----------------------------------------------------------------------- input

    def receive_ack(self, ack: Ack, now: float) -> None:
        """Process an acknowledgement: advance, mark SACKed and lost, grow the window."""
        if ack.ack > self.snd_nxt:
            raise LocalProtocolError(f"ACK {ack.ack} beyond snd_nxt {self.snd_nxt}")
        newly = self._cumulative(ack.ack, now) + self._sack(ack.sack, now)
        rtt = now - ack.echo if ack.echo >= 0 else None
        if rtt is not None and newly:
            self._rtt_sample(rtt)
        self._detect_losses(now)
        if newly:
            rate = self._rate_sample(now)
            self.cc.on_ack(
                acked=newly,
                rtt=rtt,
                now=now,  # type: ignore[union-attr]
                in_flight=self.flight,
                delivery_rate=rate,
            )
        if self._recovery_point is not None and self.snd_una >= self._recovery_point:
            self._recovery_point = None
            self.cc.on_recovered(now=now)  # type: ignore[union-attr]

    def _cumulative(self, ack: int, now: float) -> int:
        if ack <= self.snd_una:
            return 0
        newly = 0
        while self._out and self._out[0].end <= ack:
            seg = self._out.popleft()
            newly += self._deliver(seg, now) if not seg.sacked else 0
        self.snd_una = ack
        self._rto_at = now + self.rto if self._out else None
        return newly

    def _sack(self, blocks: tuple[tuple[int, int], ...], now: float) -> int:
        newly = 0
        for start, end in blocks:
            if end <= self.snd_una:
                continue
            for seg in self._out:  # few segments per block in practice
                if seg.seq >= end:
                    break
                if seg.seq >= start and seg.end <= end and not seg.sacked:
                    seg.sacked = True
                    newly += self._deliver(seg, now)
        return newly

    def _deliver(self, seg: Segment, now: float) -> int:
        if not seg.lost:
            self.flight -= seg.length
        seg.lost = False
        self.delivered += seg.length
        self.delivered_at = now
        self._rack_sent_at = max(self._rack_sent_at, seg.sent_at)
        self._last_delivered = seg
        return seg.length

    def _detect_losses(self, now: float) -> None:
        """RACK with no reordering window: sent before something already delivered ⇒ lost."""
        newly_lost = False
        while self._by_send and self._by_send[0][0] < self._rack_sent_at:
            sent_at, seg = self._by_send.popleft()
            if seg.sent_at != sent_at or seg.sacked or seg.end <= self.snd_una or seg.lost:
                continue  # stale entry or already delivered
            seg.lost = True
            self.flight -= seg.length
            self._lost.append(seg)
            newly_lost = True
        if newly_lost and self._recovery_point is None:
            self._recovery_point = self.snd_nxt
            self.stats.congestion_events += 1
            self.cc.on_congestion(now=now, in_flight=self.flight)  # type: ignore[union-attr]

    def _rtt_sample(self, rtt: float) -> None:
        """RFC 6298 §2.2–2.3 smoothing; RTO floored at 200 ms."""
        self.min_rtt = min(self.min_rtt, rtt)
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = min(max(self.srtt + 4 * self.rttvar, RTO_MIN_S), RTO_MAX_S)

    def _rate_sample(self, now: float) -> float | None:
        seg = getattr(self, "_last_delivered", None)
        if seg is None or now <= seg.delivered_at:
            return None
        return (self.delivered - seg.delivered) / (now - seg.delivered_at)

    # ---------------------------------------------------------------------- timers

    def get_timer(self) -> float | None:
        """The next deadline: the retransmission timer, or the pacing clock."""
        paced = self.cc.pacing_rate and self._sendable()  # type: ignore[union-attr]
        pace = self._next_send_at if paced else None
        times = [t for t in (self._rto_at, pace) if t is not None]
        return min(times) if times else None

    def _sendable(self) -> bool:
        return bool(self._lost) or self.snd_nxt < self.app_limit

    def handle_timer(self, now: float) -> None:
        """Fire the retransmission timer if due: everything outstanding is lost (RFC 6298 §5)."""
        if self._rto_at is None or now < self._rto_at - 1e-12:
            return
        self.stats.rtos += 1
        self.cc.on_rto(now=now, in_flight=self.flight)  # type: ignore[union-attr]
        self._lost.clear()
        for seg in self._out:
            if not seg.sacked:
                if not seg.lost:
                    self.flight -= seg.length
                seg.lost = True
                self._lost.append(seg)
        self._by_send.clear()
        self._recovery_point = self.snd_nxt
        self.rto = min(self.rto * 2, RTO_MAX_S)
        self._rto_at = now + self.rto


@dataclass
class Receiver:
    """Reassembles the stream, acknowledges every ``ack_every`` segments or after ``ack_delay``.

    Out-of-order segments and segments that fill a gap are acknowledged at once
    (RFC 5681 §4.2). ``delivered`` counts bytes handed to the application in order.
    """

    ack_every: int = 1
    ack_delay: float = 0.0
    ack_wire: int = 52

    def __post_init__(self) -> None:
        if self.ack_every < 1 or self.ack_delay < 0:
            raise LocalProtocolError(
                f"ack_every must be ≥ 1 and ack_delay ≥ 0, got {self.ack_every}, {self.ack_delay}"
            )
        if self.ack_every > 1 and self.ack_delay == 0:
            raise LocalProtocolError(
                "acknowledging every k > 1 segments needs an ack_delay "
                "(otherwise the last odd segment is never acknowledged)"
            )
        self.rcv_nxt = 0
        self._ooo = RangeSet()
        self._pending = 0
        self._echo = -1.0
        self._ack_at: float | None = None
        self.acks_sent = 0

    @property
    def delivered(self) -> int:
        return self.rcv_nxt

    def receive(self, seg: Segment, now: float) -> Ack | None:
        """A data segment arrives; return the ACK to send now, if any."""
        gap_before = bool(self._ooo)
        if seg.seq == self.rcv_nxt:
            self.rcv_nxt = seg.end
            end = self._ooo.pop_first_if_starts_at(self.rcv_nxt)
            while end is not None:
                self.rcv_nxt = end
                end = self._ooo.pop_first_if_starts_at(self.rcv_nxt)
            self._echo = seg.sent_at
        elif seg.seq > self.rcv_nxt:
            self._ooo.add(seg.seq, seg.end)
        self._ooo.subtract_below(self.rcv_nxt)
        self._pending += 1
        if seg.seq != self.rcv_nxt - seg.length or gap_before or self._pending >= self.ack_every:
            return self._ack(seg.sent_at)
        if self._ack_at is None:
            self._ack_at = now + self.ack_delay
        return None

    def _ack(self, echo: float) -> Ack:
        self._pending = 0
        self._ack_at = None
        self.acks_sent += 1
        return Ack(self.rcv_nxt, self._ooo.blocks(SACK_BLOCKS), echo, self.ack_wire)

    def get_timer(self) -> float | None:
        return self._ack_at

    def handle_timer(self, now: float) -> Ack | None:
        """The delayed-ACK timer: acknowledge what is pending."""
        if self._ack_at is None or now < self._ack_at - 1e-12:
            return None
        return self._ack(self._echo)
