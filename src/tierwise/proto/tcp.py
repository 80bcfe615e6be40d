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
has been delivered (the RACK rule with no reordering window, RFC 8985; "after"
is transmission order, so segments sent in one burst at the same instant are
still ordered), or when the retransmission timer fires (RFC 6298, 200 ms
minimum as in Linux). Lost segments are retransmitted before new data, within
the congestion window. A loss episode lasts until the recovery point is
acknowledged (RFC 6582).

Every acknowledgement that delivers data yields a delivery-rate sample
(draft-cheng-iccrg-delivery-rate-estimation): each transmission snapshots
the connection's delivered count and times, and the sample of an ACK is taken
from its most recently sent delivered segment, with app-limited marking. Rates,
windows and flight are payload bytes; the pacer charges each segment its
payload length at ``cc.pacing_rate``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from tierwise.errors import LocalProtocolError
from tierwise.proto.congestion import CongestionController, RateSample, make_controller
from tierwise.proto.rangeset import RangeSet

__all__ = ["Ack", "Receiver", "Segment", "Sender", "SenderStats"]

RTO_MIN_S = 0.2  # Linux TCP_RTO_MIN
RTO_MAX_S = 60.0  # RFC 6298 §2.5 allows a cap of at least 60 s
RTO_INITIAL_S = 1.0  # RFC 6298 §2.1
SACK_BLOCKS = 3  # RFC 2018: three blocks fit beside timestamps
_EPS_S = 1e-12  # timer comparisons tolerate float rounding


class Segment:
    """One data segment in flight; ``wire`` is its size on the link (payload + header).

    ``delivered``, ``delivered_at``, ``first_sent_at`` and ``app_limited`` are the
    sender's delivery-rate snapshot at this transmission; ``tx`` numbers
    transmissions in the order they left (a retransmission gets a new one).
    """

    __slots__ = (
        "app_limited",
        "delivered",
        "delivered_at",
        "end",
        "first_sent_at",
        "length",
        "lost",
        "retx",
        "sacked",
        "sent_at",
        "seq",
        "tx",
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
        first_sent_at: float | None = None,
        app_limited: bool = False,
        tx: int = 0,
    ) -> None:
        self.seq = seq
        self.length = length
        self.end = seq + length  # stored, not computed: read several times per ACK
        self.wire = wire
        self.sent_at = sent_at
        self.retx = retx
        self.sacked = False
        self.lost = False
        self.delivered = delivered
        self.delivered_at = delivered_at
        self.first_sent_at = sent_at if first_sent_at is None else first_sent_at
        self.app_limited = app_limited
        self.tx = tx

    def __repr__(self) -> str:
        return f"Segment(seq={self.seq}, length={self.length}, sent_at={self.sent_at})"


class Ack(NamedTuple):
    """A cumulative acknowledgement with SACK blocks and the echoed send time (RFC 7323).

    A named tuple, not a frozen dataclass: one is built per ACK, and a tuple is
    built in about half the time.
    """

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
    # Bytes the peer accepts before its first ACK: a new connection learns the peer's
    # receive window from the SYN-ACK, whose window field is never scaled (RFC 7323
    # §2.2), so at most 65,535 B go in the first flight. None: no such limit.
    first_flight: int | None = None

    def __post_init__(self) -> None:
        if self.mss <= 0 or self.header < 0:
            raise LocalProtocolError(
                f"mss must be > 0 and header ≥ 0, got {self.mss}, {self.header}"
            )
        if self.first_flight is not None and self.first_flight <= 0:
            raise LocalProtocolError(f"first_flight must be > 0, got {self.first_flight}")
        if isinstance(self.cc, str):
            self.cc = make_controller(self.cc, mss=self.mss, initial_window=self.initial_window)
        # Delivery-rate samples cost an object per ACK: build them only for a
        # controller that reads them (one that overrides on_rate_sample).
        self._samples = type(self.cc).on_rate_sample is not CongestionController.on_rate_sample
        self.app_limit = 0  # bytes the application has handed over
        self.snd_una = 0
        self.snd_nxt = 0
        self.flight = 0  # bytes outstanding, not SACKed, not marked lost
        # Unacknowledged segments by first byte; they tile [snd_una, snd_nxt), so the
        # next one after ``seg`` is ``_by_seq[seg.end]``.
        self._by_seq: dict[int, Segment] = {}
        self._sacked = RangeSet()  # SACKed bytes above snd_una (the scoreboard)
        self._by_send: deque[tuple[int, Segment]] = deque()  # (tx, seg) in send order
        self._lost: deque[Segment] = deque()
        self._tx = 0
        self._rack_tx = -1  # newest transmission known delivered
        self._recovery_point: int | None = None
        self.delivered = 0  # C.delivered: bytes delivered (cumulatively or SACKed)
        self.delivered_at = 0.0  # C.delivered_time
        self._first_sent_at = 0.0  # C.first_sent_time
        self._app_limited_until = 0  # C.app_limited: 0, or delivered count ending the mark
        self._newest: Segment | None = None  # most recently sent segment this ACK delivered
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

    def _window_open(self) -> bool:
        cwnd = self.cc.cwnd  # type: ignore[union-attr]
        return self.flight + self.mss <= cwnd or (self.flight == 0 and cwnd > 0)

    def segments_to_send(self, now: float) -> list[Segment]:
        """Segments the window (and pacing) allow now: retransmissions first.

        A segment is the sender's own record, not a copy: a record is never changed
        in what the receiver reads (``seq``, ``length``, ``sent_at``) once it is sent,
        because a retransmission gets a new record, so the original still on the wire
        keeps the send time it left with (its echo and RTT stay honest).
        """
        out: list[Segment] = []
        cc: CongestionController = self.cc  # type: ignore[assignment]
        mss = self.mss
        while True:
            cwnd, flight = cc.cwnd, self.flight  # _window_open, inline: per segment
            if not (flight + mss <= cwnd or (flight == 0 and cwnd > 0)):
                break
            rate = cc.pacing_rate
            if rate and now < self._next_send_at - _EPS_S:
                break
            if self.first_flight is not None and self._peer_window_full():
                break  # the receiver's window binds, not the application
            seg = self._next_segment(now)
            if seg is None:
                # Nothing to send with the window open: samples until this data is
                # delivered measure the application, not the path.
                self._app_limited_until = (self.delivered + self.flight) or 1
                break
            out.append(seg)
            if rate:
                self._next_send_at = max(now, self._next_send_at) + seg.length / rate
        return out

    def _peer_window_full(self) -> bool:
        """No retransmission due and the first flight's window is used up."""
        assert self.first_flight is not None
        if self.snd_nxt < self.first_flight:
            return False
        self._prune_lost()
        return not self._lost and self.snd_nxt < self.app_limit

    def _prune_lost(self) -> None:
        """Forget lost segments that were SACKed or acknowledged since."""
        while self._lost and (self._lost[0].sacked or self._lost[0].end <= self.snd_una):
            self._lost.popleft()

    def _next_segment(self, now: float) -> Segment | None:
        if self._lost:
            self._prune_lost()
        if self._lost:
            old = self._lost.popleft()  # stays marked lost: its send-order entry is stale
            seq, length, wire, retx = old.seq, old.length, old.wire, True
            self.stats.retransmissions += 1
            if seq == self.snd_una and self._rto_at is not None:
                # Linux tcp_xmit_retransmit_queue: resending the head restarts the
                # timer, so a lost fast retransmission is found by RACK, not by a timeout.
                self._rto_at = now + self.rto
        elif self.snd_nxt < self.app_limit:
            seq = self.snd_nxt
            length = self.app_limit - seq
            if self.mss < length:  # min(), spelled out: per segment
                length = self.mss
            if self.first_flight is not None:
                length = min(length, self.first_flight - seq)
            wire, retx = length + self.header, False
            self.snd_nxt = seq + length
        else:
            return None
        if self.flight == 0:
            self._first_sent_at = self.delivered_at = now
        tx = self._tx
        # A new record per transmission, with this send's delivery-rate snapshot.
        seg = Segment(
            seq,
            length,
            wire,
            now,
            retx,
            self.delivered,
            self.delivered_at,
            self._first_sent_at,
            bool(self._app_limited_until),
            tx,
        )
        self._by_seq[seq] = seg
        self._tx = tx + 1
        self.flight += length
        self._by_send.append((tx, seg))
        stats = self.stats
        stats.segments_sent += 1
        stats.bytes_on_wire += wire
        if self._rto_at is None:
            self._rto_at = now + self.rto
        return seg

    # ----------------------------------------------------------------------- input

    def receive_ack(self, ack: Ack, now: float) -> None:
        """Process an acknowledgement: advance, mark SACKed and lost, grow the window."""
        if ack.ack > self.snd_nxt:
            raise LocalProtocolError(f"ACK {ack.ack} beyond snd_nxt {self.snd_nxt}")
        cc: CongestionController = self.cc  # type: ignore[assignment]
        self.first_flight = None  # any ACK carries the peer's full, scaled window
        prior_flight = self.flight
        self._newest = None
        advanced = ack.ack > self.snd_una
        newly = self._cumulative(ack.ack, now)
        if ack.sack:
            newly += self._sack(ack.sack, now)
        rtt = now - ack.echo if ack.echo >= 0 else None
        if rtt is not None and newly:
            self._rtt_sample(rtt)
        if advanced:  # RFC 6298 §5.3, with the RTO this ACK's sample gave
            self._rto_at = now + self.rto if self.snd_una < self.snd_nxt else None
        by_send = self._by_send
        lost = self._detect_losses(now) if by_send and by_send[0][0] < self._rack_tx else 0
        rate = None
        if newly:
            if self._app_limited_until and self.delivered > self._app_limited_until:
                self._app_limited_until = 0
            if self._samples:
                sample = self._rate_sample(now, newly, lost, prior_flight, rtt)
                rate = sample.delivery_rate
                cc.on_rate_sample(sample=sample, now=now, in_flight=self.flight)
        if newly and (self._recovery_point is None or cc.grows_in_recovery):
            cc.on_ack(acked=newly, rtt=rtt, now=now, in_flight=self.flight, delivery_rate=rate)
        if self._recovery_point is not None and self.snd_una >= self._recovery_point:
            self._recovery_point = None
            cc.on_recovered(now=now)

    def _cumulative(self, ack: int, now: float) -> int:
        if ack <= self.snd_una:
            return 0
        newly = 0
        by_seq = self._by_seq
        seg = by_seq.get(self.snd_una)
        while seg is not None and seg.end <= ack:
            del by_seq[seg.seq]
            if not seg.sacked:
                newly += self._deliver(seg, now)
            seg = by_seq.get(seg.end)
        self.snd_una = ack
        self._sacked.subtract_below(ack)
        return newly

    def _sack(self, blocks: tuple[tuple[int, int], ...], now: float) -> int:
        """Mark segments in the blocks SACKed, walking only what the scoreboard lacks.

        Blocks start and end on segment boundaries (a receiver reports unions of
        whole segments), so each uncovered piece is walked segment by segment.
        """
        newly = 0
        for start, end in blocks:
            start = max(start, self.snd_una)
            if end <= start or self._sacked.covered(start, end):
                continue
            for lo, hi in self._sacked.uncovered(start, end):
                seg = self._by_seq.get(lo)
                while seg is not None and seg.end <= hi:
                    if not seg.sacked:
                        seg.sacked = True
                        newly += self._deliver(seg, now)
                    seg = self._by_seq.get(seg.end)
            self._sacked.add(start, end)
        return newly

    def _deliver(self, seg: Segment, now: float) -> int:
        if not seg.lost:
            self.flight -= seg.length
        seg.lost = False
        self.delivered += seg.length
        self.delivered_at = now
        # RFC 8985 §6.2 step 2: an ACK faster than min RTT for a retransmission was
        # for the original; it says nothing about what was sent after the retransmission.
        if not (seg.retx and now - seg.sent_at < self.min_rtt) and seg.tx > self._rack_tx:
            self._rack_tx = seg.tx
        if self._newest is None or seg.tx > self._newest.tx:
            self._newest = seg
            self._first_sent_at = seg.sent_at
        return seg.length

    def _detect_losses(self, now: float) -> int:
        """RACK with no reordering window: sent before something already delivered ⇒ lost."""
        lost = 0
        while self._by_send and self._by_send[0][0] < self._rack_tx:
            tx, seg = self._by_send.popleft()
            if seg.tx != tx or seg.sacked or seg.end <= self.snd_una or seg.lost:
                continue  # stale entry or already delivered
            seg.lost = True
            self.flight -= seg.length
            self._lost.append(seg)
            lost += seg.length
        if lost and self._recovery_point is None:
            self._recovery_point = self.snd_nxt
            self.stats.congestion_events += 1
            # RFC 5681 §3.1: halve FlightSize, the data sent but not cumulatively acknowledged
            flight_size = self.snd_nxt - self.snd_una
            self.cc.on_congestion(now=now, in_flight=flight_size)  # type: ignore[union-attr]
        return lost

    def _rtt_sample(self, rtt: float) -> None:
        """RFC 6298 §2.2–2.3 smoothing; the variance term floored at 200 ms, as Linux does
        (``srtt + max(4·rttvar, TCP_RTO_MIN)``), so a long steady RTT never makes the
        timer fire one RTT after a retransmission."""
        if rtt < self.min_rtt:
            self.min_rtt = rtt
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        var = 4 * self.rttvar
        rto = self.srtt + (var if var > RTO_MIN_S else RTO_MIN_S)
        self.rto = rto if rto < RTO_MAX_S else RTO_MAX_S

    def _rate_sample(
        self, now: float, acked: int, lost: int, prior_flight: int, rtt: float | None
    ) -> RateSample:
        """Delivery rate over the newest delivered segment's flight (draft-cheng).

        ``interval = max(send_elapsed, ack_elapsed)``; a sample whose interval is
        shorter than the minimum RTT is discarded (``delivery_rate`` None), as in Linux.
        """
        seg = self._newest
        assert seg is not None  # called only when this ACK delivered something
        interval = max(seg.sent_at - seg.first_sent_at, now - seg.delivered_at)
        delivered = self.delivered - seg.delivered
        rate = delivered / interval if interval > 0 and interval >= self.min_rtt else None
        return RateSample(
            delivery_rate=rate,
            delivered=delivered,
            interval_s=interval,
            prior_delivered=seg.delivered,
            total_delivered=self.delivered,
            app_limited=seg.app_limited,
            acked=acked,
            lost=lost,
            prior_in_flight=prior_flight,
            rtt=rtt,
        )

    # ---------------------------------------------------------------------- timers

    def get_timer(self) -> float | None:
        """The next deadline: the retransmission timer, or the pacing clock.

        The pacing clock counts only while there is something to send and both the
        congestion window and the peer's window would let it go; otherwise a stale
        pacing time would wake the caller again and again at the same instant.
        """
        rto_at = self._rto_at
        if not self.cc.pacing_rate or not self._could_send():  # type: ignore[union-attr]
            return rto_at
        pace = self._next_send_at
        return pace if rto_at is None or pace < rto_at else rto_at

    def _sendable(self) -> bool:
        self._prune_lost()
        return bool(self._lost) or self.snd_nxt < self.app_limit

    def _could_send(self) -> bool:
        """Whether only the pacer holds a segment back: data (or a retransmission) is
        waiting and neither the congestion window nor the peer's first-flight window
        binds. A pacing deadline set while the peer's window binds would be in the past
        and wake the caller at the same instant for ever: a busy loop."""
        if not (self._sendable() and self._window_open()):
            return False
        return self.first_flight is None or not self._peer_window_full()

    def _outstanding(self) -> Iterator[Segment]:
        """Unacknowledged segments in sequence order."""
        seg = self._by_seq.get(self.snd_una)
        while seg is not None:
            yield seg
            seg = self._by_seq.get(seg.end)

    def handle_timer(self, now: float) -> None:
        """Fire the retransmission timer if due: everything outstanding is lost (RFC 6298 §5)."""
        if self._rto_at is None or now < self._rto_at - _EPS_S:
            return
        self.stats.rtos += 1
        self.cc.on_rto(now=now, in_flight=self.flight)  # type: ignore[union-attr]
        self._lost.clear()
        for seg in self._outstanding():
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
    (RFC 5681 §4.2). SACK blocks follow RFC 2018 §4: the block holding the segment
    that triggered the ACK first, then the most recently reported blocks, then (to
    fill the three) the highest others. ``delivered`` counts bytes handed to the
    application in order.
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
        self._recent: list[int] = []  # a byte of each block in the last ACK, first first
        self.acks_sent = 0

    @property
    def delivered(self) -> int:
        return self.rcv_nxt

    def receive(self, seg: Segment, now: float) -> Ack | None:
        """A data segment arrives; return the ACK to send now, if any."""
        gap_before = bool(self._ooo)
        if not gap_before and seg.seq == self.rcv_nxt:
            # In order with nothing out of order: the common case, without the scoreboard.
            self.rcv_nxt = seg.end
            self._echo = seg.sent_at
            self._pending += 1
            if self._pending >= self.ack_every:
                self._pending = 0
                self._ack_at = None
                self.acks_sent += 1
                if self._recent:
                    self._recent = []
                return Ack(self.rcv_nxt, (), seg.sent_at, self.ack_wire)
            if self._ack_at is None:
                self._ack_at = now + self.ack_delay
            return None
        if seg.seq == self.rcv_nxt:
            self.rcv_nxt = seg.end
            end = self._ooo.pop_first_if_starts_at(self.rcv_nxt)
            while end is not None:
                self.rcv_nxt = end
                end = self._ooo.pop_first_if_starts_at(self.rcv_nxt)
            self._echo = seg.sent_at
        elif seg.seq > self.rcv_nxt:
            self._ooo.add(seg.seq, seg.end)
        if self._ooo:
            self._ooo.subtract_below(self.rcv_nxt)
        self._pending += 1
        if seg.seq != self.rcv_nxt - seg.length or gap_before or self._pending >= self.ack_every:
            return self._ack(seg.sent_at, seg.seq if seg.seq > self.rcv_nxt else None)
        if self._ack_at is None:
            self._ack_at = now + self.ack_delay
        return None

    def _ack(self, echo: float, trigger: int | None = None) -> Ack:
        self._pending = 0
        self._ack_at = None
        self.acks_sent += 1
        return Ack(self.rcv_nxt, self._sack_blocks(trigger), echo, self.ack_wire)

    def _sack_blocks(self, trigger: int | None) -> tuple[tuple[int, int], ...]:
        """RFC 2018 §4 order: the triggering segment's block, then recent ones, then highest.

        Each block is found by bisection and the highest are read from the top, so an
        ACK costs O(log n) in the number of out-of-order ranges, not a copy of them.
        """
        ooo = self._ooo
        if not ooo:
            self._recent = []
            return ()
        out: list[tuple[int, int]] = []
        for byte in ([] if trigger is None else [trigger]) + self._recent:
            r = ooo.range_containing(byte)
            if r is not None and r not in out:
                out.append(r)
                if len(out) == SACK_BLOCKS:
                    break
        if len(out) < SACK_BLOCKS:
            for r in reversed(ooo):
                if r not in out:
                    out.append(r)
                    if len(out) == SACK_BLOCKS:
                        break
        self._recent = [r[0] for r in out]
        return tuple(out)

    def get_timer(self) -> float | None:
        return self._ack_at

    def handle_timer(self, now: float) -> Ack | None:
        """The delayed-ACK timer: acknowledge what is pending."""
        if self._ack_at is None or now < self._ack_at - _EPS_S:
            return None
        return self._ack(self._echo)
