"""Measuring what one direction of the path does to packets: raw loss, RTT and the rate
it delivers (§12.3.3)."""

from __future__ import annotations

from collections import defaultdict

__all__ = ["LossMeter", "ReceiveRate", "RttEstimator"]

LOSS_WINDOW_PACKETS = 128
LOSS_SLACK_PACKETS = 64  # reordering allowance before a window is judged
LOSS_EWMA = 0.125
EARLY_PACKETS = 16  # the provisional estimate needs this many packet numbers
RTT_ALPHA, RTT_BETA = 0.125, 0.25  # RFC 6298
RATE_WINDOW_PACKETS = 64
RATE_KEEP_S = 10.0  # the receive rate is the largest of the windows judged this recently


class LossMeter:
    """Raw datagram loss of the incoming direction, from gaps in packet numbers.

    Windows of :data:`LOSS_WINDOW_PACKETS` numbers are judged once the largest
    number is :data:`LOSS_SLACK_PACKETS` past their end; ``loss`` is an EWMA of
    the windows' loss fractions. Until the first window is judged, ``loss`` is
    the fraction missing below the largest number (from :data:`EARLY_PACKETS`
    on), so a new session's first retransmissions already carry repairs.
    Datagrams recovered by FEC count as lost here: FEC must be sized from what
    the path drops, not from what FEC repaired.
    """

    def __init__(self) -> None:
        self._counts: dict[int, int] = defaultdict(int)
        self._judged = 0  # windows below this index are judged
        self.loss: float = 0.0
        self.windows = 0
        self._early_got, self._early_largest = 0, -1

    def on_packet(self, pn: int) -> None:
        window = pn // LOSS_WINDOW_PACKETS
        if window < self._judged:
            return
        self._counts[window] += 1
        if self.windows == 0:
            self._early_got += 1
            self._early_largest = max(self._early_largest, pn)
            span = self._early_largest + 1
            if span >= EARLY_PACKETS:
                self.loss = max(0.0, 1.0 - self._early_got / span)
        ready = (pn - LOSS_SLACK_PACKETS) // LOSS_WINDOW_PACKETS
        while self._judged < ready:
            got = self._counts.pop(self._judged, 0)
            fraction = 1.0 - min(got, LOSS_WINDOW_PACKETS) / LOSS_WINDOW_PACKETS
            self.loss = (
                fraction if self.windows == 0 else self.loss + LOSS_EWMA * (fraction - self.loss)
            )
            self.windows += 1
            self._judged += 1


class RttEstimator:
    """Smoothed RTT, variation and minimum (RFC 6298 §2; min as in RFC 9002 §5.2)."""

    def __init__(self, initial_rtt_s: float = 0.1) -> None:
        self.smoothed_s: float | None = None
        self.var_s = initial_rtt_s / 2
        self.latest_s = initial_rtt_s
        self.min_s: float | None = None
        self._initial = initial_rtt_s

    def update(self, rtt_s: float, ack_delay_s: float) -> None:
        self.min_s = rtt_s if self.min_s is None else min(self.min_s, rtt_s)
        if rtt_s - ack_delay_s >= self.min_s:
            rtt_s -= ack_delay_s
        self.latest_s = rtt_s
        if self.smoothed_s is None:
            self.smoothed_s, self.var_s = rtt_s, rtt_s / 2
            return
        self.var_s += RTT_BETA * (abs(self.smoothed_s - rtt_s) - self.var_s)
        self.smoothed_s += RTT_ALPHA * (rtt_s - self.smoothed_s)

    @property
    def srtt_s(self) -> float:
        return self.smoothed_s if self.smoothed_s is not None else self._initial

    def pto_s(self, max_ack_delay_s: float) -> float:
        """RFC 9002 §6.2.1: ``srtt + max(4·rttvar, 1 ms) + max_ack_delay``."""
        return self.srtt_s + max(4 * self.var_s, 0.001) + max_ack_delay_s


class ReceiveRate:
    """The rate the incoming direction delivers: bytes per window of
    :data:`RATE_WINDOW_PACKETS` datagrams over the time they took, the largest window of
    the last :data:`RATE_KEEP_S` (a bulk transfer shows the path; an idle session keeps
    the last it showed). What the router reads from the relay client's stats: the
    sender's own estimate lives at the other end."""

    def __init__(self) -> None:
        self._start_s: float | None = None
        self._bytes = self._packets = 0
        self._windows: list[tuple[float, float]] = []  # (end time, rate), rates decreasing

    def on_datagram(self, size: int, now: float) -> None:
        if self._start_s is None:
            self._start_s = now
            return  # the window's time starts at its first datagram: that one is not timed
        self._bytes += size
        self._packets += 1
        if self._packets < RATE_WINDOW_PACKETS:
            return
        span = now - self._start_s
        if span > 0:
            rate = self._bytes / span
            w = self._windows
            while w and w[-1][1] <= rate:
                w.pop()
            w.append((now, rate))
            while w[0][0] < now - RATE_KEEP_S and len(w) > 1:
                w.pop(0)
        self._start_s, self._bytes, self._packets = now, 0, 0

    @property
    def bytes_per_s(self) -> float:
        """The largest recent window's rate (0 before the first window)."""
        return self._windows[0][1] if self._windows else 0.0
