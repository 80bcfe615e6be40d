"""Datagram packetization layer path MTU discovery for one sending direction (RFC 8899).

As QUIC does it (RFC 9000 §14.3): the session starts at a safe base datagram size
(:data:`BASE_DATAGRAM_BYTES`, the relay's long-standing 1,350 B, or the configured
maximum if lower) and probes upward with padded, ack-eliciting probe packets that
carry no stream data (a PING and PADDING). An acknowledged probe of
``P`` bytes proves the path carries ``P``: the data datagram rises to ``P −``
:data:`REPAIR_EXTRA_BYTES`, so that a REPAIR built over the largest data datagram
of a block (and the ACK it carries) still fits. A probe that is lost is tried
:data:`MAX_PROBES` times (RFC 8899 §5.1.2: random loss must not end the search);
its loss is neither congestion nor a data loss: the packet-loss counters, the
retransmission queue and FEC never see it. The receiver sees only a gap in the
packet numbers and counts it in its raw loss measurement (:class:`.meter.LossMeter`),
which it reports back in every ACK and the sender sizes its repairs from; so the
sender takes the probes' share out of that report (:meth:`PmtuSearch.peer_loss`: the
meter is linear in the gaps, so their share is the meter's reading had they been the
only ones). The search waits for packet :data:`PROBE_AFTER_PACKETS`. The sizes tried are
:data:`PROBE_SIZES` (the UDP payloads of the common MTUs over IPv6 and IPv4: 1,500,
4,096, 9,000, 16,384, 65,535) up to the configured maximum, and the maximum
itself; a size that fails ends the search for it and every larger one (RFC 8899
SEARCH_COMPLETE once none is left),
and the search runs again after :data:`RAISE_S` (RFC 8899's PMTU_RAISE_TIMER).

Black holes (RFC 8899 §4.3): when :data:`BLACK_HOLE_LOSSES` datagrams larger than
the base are declared lost and none that large, sent after them, is acknowledged, the
sender suspects the path shrank and sends confirmation probes: one at the base size
and :data:`CONFIRM_LARGE_PROBES` at the current size. If the base one is acknowledged
and every large one lost, the path carries small datagrams and drops large ones: the
datagram falls back to the base and the search starts over
:data:`BLACK_HOLE_RESEARCH_S` later. A large one acknowledged means the run of losses
was something else — a queue that overflowed drops a run of large datagrams just as a
black hole does — and a lost base one means the path carries nothing (a blackout, not
a black hole): either way the suspicion is dropped. Each end's sender discovers its own
direction; nothing is negotiated.

All the sizes still to try are probed at once, one probe each, smallest first (a
jumbo path is found in one round trip, an Ethernet path in :data:`MAX_PROBES`); after a
loss only the smallest size lost is tried again until it is settled.
Sans-IO: the connection asks :meth:`PmtuSearch.due` for a probe size, reports
what it sent, what was acknowledged and what was lost; this object reads no clock.
The connection sends a due probe only between FEC blocks and while no request
(non-bulk stream) has data waiting, and probes take no room in the congestion
window (:attr:`PmtuSearch.flying_bytes`): a request never waits behind them.
(A black hole's confirmation probes go at once: the data waits on them.)
"""

from __future__ import annotations

from tierwise.proto.relay import wire
from tierwise.proto.relay.meter import (
    EARLY_PACKETS,
    LOSS_EWMA,
    LOSS_SLACK_PACKETS,
    LOSS_WINDOW_PACKETS,
)

__all__ = [
    "BASE_DATAGRAM_BYTES",
    "MAX_DATAGRAM_BYTES",
    "PROBE_SIZES",
    "REPAIR_EXTRA_BYTES",
    "PmtuSearch",
]

BASE_DATAGRAM_BYTES = 1350  # the relay's default data datagram: fits a 1,280 B+ IPv6 path's
# UDP payload with its repairs on any Ethernet path (1,452 B)
# A REPAIR datagram over a block whose largest data datagram is D bytes: header and tag,
# an ACK of two ranges, the REPAIR frame's head and the symbol's length prefix, then D.
REPAIR_EXTRA_BYTES = wire.DATA_HEADER_BYTES + wire.TAG_BYTES + (1 + 9 + 2 * 16) + (1 + 14) + 2  # 96
# The largest data datagram a config may ask for: its repair (REPAIR_EXTRA_BYTES more)
# still fits the largest UDP payload over IPv6 on a 65,535 B MTU (65,487 B; IPv4: 65,507 B),
# such as loopback's.
MAX_DATAGRAM_BYTES = 65_000
# UDP payloads of common MTUs, IPv6 (40 + 8 B of headers) before IPv4 (20 + 8 B):
# Ethernet 1,500; 4,096 (InfiniBand-style); 9,000 (jumbo frames); 16,384; 65,535 (loopback)
PROBE_SIZES = (1452, 1472, 4048, 4068, 8952, 8972, 16336, 16356, 65487)
MAX_PROBES = 3  # RFC 8899 MAX_PROBES
# The search starts at this packet number. Its first reason, the receiver's early loss
# estimate that a lost probe's gap skews most, is gone (peer_loss takes the probes' share
# out); it stays because probes sent from the session's start, or at the first RTT
# sample, upset a transfer's start-up in the simulator: a 20 MB upload on a 9,000-byte
# link overran its queue (5,964 tail drops, read as a black hole), a first download took
# 1.5 × as long (docs/benchmarks.md, "Sessions: cold and warm").
PROBE_AFTER_PACKETS = 256
GAP_LOSS_FLOOR = 1e-9  # the probes' share of the peer's loss below this is none
LOSS_QUANTUM = 1e-6  # the ACK frame carries the loss in ppm
RAISE_S = 600.0  # RFC 8899 PMTU_RAISE_TIMER
BLACK_HOLE_LOSSES = 6  # large datagrams lost with none acknowledged: suspect a black hole
# … then confirm with one probe of the base size and this many of the current size: a
# black hole passes the first and drops the others; a queue that overflowed (a run of
# tail drops looks the same to the counter) passes a large one too
CONFIRM_LARGE_PROBES = 2
BLACK_HOLE_RESEARCH_S = 60.0  # after a black hole, search again this much later


class PmtuSearch:
    """The probe schedule and the datagram size of one sending direction."""

    def __init__(self, max_datagram_bytes: int) -> None:
        self.base_bytes = min(BASE_DATAGRAM_BYTES, max_datagram_bytes)
        self.max_bytes = max_datagram_bytes
        self.datagram_bytes = self.base_bytes  # data datagrams are this large at most
        self.pmtu_bytes = self.base_bytes + REPAIR_EXTRA_BYTES  # the largest datagram allowed
        self.probes_sent = self.probes_acked = self.probes_lost = self.black_holes = 0
        self._targets = self._sizes()
        self._tries: dict[int, int] = {}  # probe size: probes of it lost
        self._probes: dict[int, int] = {}  # packet number: size, in flight
        self._next_at: float | None = 0.0 if self._targets else None
        self._big_lost = 0  # large datagrams lost since one was last acknowledged …
        self._big_acked_pn = -1  # … counting only those sent after the last one acknowledged
        self._confirm_pn: int | None = None  # the base-size probe of a suspected black hole
        self._confirm_large: set[int] = set()  # its probes of the current size in flight …
        self._confirm_large_lost = 0  # … and lost (one acknowledged ends the confirmation)
        self.flying_bytes = 0  # probes in flight: outside the congestion window
        # The probes' share of the peer's loss meter, kept as the meter keeps its own:
        # lost probes in windows it has not judged yet, and the EWMA over those it has.
        self._gaps: list[int] = []
        self._gap_judged = 0  # windows below this are folded into _gap_loss
        self._gap_windows = 0  # ... of which the meter judged this many (its first sets, no EWMA)
        self._gap_loss = 0.0

    def _sizes(self) -> list[int]:
        top = self.max_bytes + REPAIR_EXTRA_BYTES
        sizes = [s for s in PROBE_SIZES if self.pmtu_bytes < s < top]
        return [*sizes, top] if top > self.pmtu_bytes else sizes

    @property
    def black_hole_suspected(self) -> bool:
        """Large datagrams are being lost: :meth:`due` asks for a base-size confirmation."""
        return self._big_lost >= BLACK_HOLE_LOSSES

    @property
    def searching(self) -> bool:
        return bool(self._targets) or self._confirm_pn is not None or bool(self._confirm_large)

    def due(self, now: float, pn: int) -> int | None:
        """The size of a probe to send now, if one is due (``pn``: the next packet number).

        Every size still to try is in flight at once, one probe each (a jumbo path is
        found in one round trip, an Ethernet one in ``MAX_PROBES``), smallest first.
        """
        if self.black_hole_suspected:
            # a black hole is suspected: does a datagram of the base size get through, and
            # one of the current size not?
            if self._confirm_pn is None and not self._confirm_large_sent:
                return self.base_bytes
            if self._confirm_large_sent < CONFIRM_LARGE_PROBES:
                return self.pmtu_bytes
            return None
        if self._next_at is None or now < self._next_at or pn < PROBE_AFTER_PACKETS:
            return None
        if not self._targets:
            self._restart()
        flying = set(self._probes.values())
        for size in self._targets:
            if size not in flying:
                return size
            if self._tries.get(size):
                return None  # larger sizes wait until this one, lost before, is settled
        return None

    def on_sent(self, pn: int, size: int) -> None:
        """The probe :meth:`due` asked for left as packet ``pn`` of ``size`` bytes."""
        self._probes[pn] = size
        self.flying_bytes += size
        self.probes_sent += 1
        if self._big_lost >= BLACK_HOLE_LOSSES:
            if (
                size == self.base_bytes
                and self._confirm_pn is None
                and not self._confirm_large_sent
            ):
                self._confirm_pn = pn
            elif size == self.pmtu_bytes:
                self._confirm_large.add(pn)

    def on_acked(self, pn: int, size: int, now: float) -> None:
        """A packet was acknowledged (a probe, or any other ack-eliciting one)."""
        if self._probes.pop(pn, None) is not None:
            self.flying_bytes -= size
            self.probes_acked += 1
            if pn in self._confirm_large:  # the current size gets through
                self._end_confirmation()
                return
            if pn == self._confirm_pn:
                self._confirm_pn = None
                self._judge(now)
                return
            if size > self.pmtu_bytes:
                self.pmtu_bytes = size
                self.datagram_bytes = min(self.max_bytes, size - REPAIR_EXTRA_BYTES)
            self._targets = [s for s in self._targets if s > size]
            self._search_done(now)
            return
        if size > self.base_bytes + REPAIR_EXTRA_BYTES:
            self._big_lost = 0  # large datagrams get through: no black hole
            self._big_acked_pn = max(self._big_acked_pn, pn)

    def on_lost(self, pn: int, size: int, now: float) -> bool:
        """A packet was declared lost; True if it was a probe (not a data loss)."""
        if self._probes.pop(pn, None) is not None:
            self.flying_bytes -= size
            self.probes_lost += 1
            if pn // LOSS_WINDOW_PACKETS >= self._gap_judged:  # (else folded in already)
                self._gaps.append(pn)
            if pn == self._confirm_pn:  # the base is lost too: a blackout, not a black hole
                self._end_confirmation()
                return True
            if pn in self._confirm_large:
                self._confirm_large.discard(pn)
                self._confirm_large_lost += 1
                self._judge(now)
                return True
            self._tries[size] = self._tries.get(size, 0) + 1
            if self._tries[size] >= MAX_PROBES:  # it does not get through, nor anything larger
                self._targets = [s for s in self._targets if s < size]
                self._search_done(now)
            return True
        # A large datagram sent before one that got through was not lost to a black hole:
        # random loss declares a round's gaps together with the ACK that acknowledges the
        # packets after them (14 % of a round of jumbo datagrams is more than
        # BLACK_HOLE_LOSSES at once), which fell back to the base on 6 of 12 seeds.
        big = size > self.base_bytes + REPAIR_EXTRA_BYTES
        if big and self.datagram_bytes > self.base_bytes and pn > self._big_acked_pn:
            self._big_lost += 1
        return False

    def peer_loss(self, reported: float, largest: int) -> float:
        """The loss the peer ``reported`` for this direction, less its probes' share.

        ``largest``: the largest packet number the report's ACK acknowledges (the
        peer's meter has seen up to it). A lost probe is a gap in the numbers, which
        the peer's :class:`.meter.LossMeter` counts as a lost datagram. The meter is
        linear in its gaps (a fraction missing, then an EWMA of windows' fractions),
        so their share is what it would read had they been the only gaps: the probes
        declared lost, and those still in flight below ``largest`` (missing there
        now). Without a lost probe this is ``reported`` unchanged.
        """
        if not self._gaps and not self._probes and self._gap_loss == 0.0:
            return reported
        missing = [*self._gaps, *(pn for pn in self._probes if pn < largest)]
        ready = (largest - LOSS_SLACK_PACKETS) // LOSS_WINDOW_PACKETS  # windows it judged
        if ready > self._gap_judged:
            self._fold(missing, ready)
            missing = [pn for pn in missing if pn // LOSS_WINDOW_PACKETS >= ready]
        if self._gap_windows == 0:  # the meter's early estimate: missing below its largest
            span = largest + 1
            share = sum(pn < largest for pn in missing) / span if span >= EARLY_PACKETS else 0.0
        else:
            share = self._gap_loss
        if share <= 0.0:
            return reported
        left = reported - share  # the report is in ppm (wire): less than that is none
        return left if left >= LOSS_QUANTUM else 0.0

    def _fold(self, missing: list[int], ready: int) -> None:
        """The peer's meter judged windows up to ``ready``: fold the gaps in them.

        Windows without a gap only decay the EWMA (in one step however many there are),
        so this costs the windows with a gap, not the session's length."""
        per_window: dict[int, int] = {}
        for pn in missing:
            window = pn // LOSS_WINDOW_PACKETS
            if self._gap_judged <= window < ready:
                per_window[window] = per_window.get(window, 0) + 1
        at = self._gap_judged
        for window in sorted(per_window):
            self._decay(window - at)
            fraction = per_window[window] / LOSS_WINDOW_PACKETS
            if self._gap_windows == 0:  # the meter's first window sets its reading
                self._gap_loss = fraction
            else:
                self._gap_loss += LOSS_EWMA * (fraction - self._gap_loss)
            self._gap_windows += 1
            at = window + 1
        self._decay(ready - at)
        if self._gap_loss < GAP_LOSS_FLOOR:
            self._gap_loss = 0.0
        self._gap_judged = ready
        self._gaps = [pn for pn in self._gaps if pn // LOSS_WINDOW_PACKETS >= ready]

    def _decay(self, windows: int) -> None:
        """``windows`` judged windows without a probe's gap."""
        if windows > 0:
            first = self._gap_windows == 0
            self._gap_loss = 0.0 if first else self._gap_loss * (1 - LOSS_EWMA) ** windows
            self._gap_windows += windows

    def _search_done(self, now: float) -> None:
        if not self._targets:  # RFC 8899 SEARCH_COMPLETE: try again later
            self._tries.clear()
            self._next_at = now + RAISE_S

    @property
    def _confirm_large_sent(self) -> int:
        return len(self._confirm_large) + self._confirm_large_lost

    def _judge(self, now: float) -> None:
        """A confirmation probe settled: a black hole once the base got through and every
        probe of the current size was lost."""
        base_through = self._confirm_pn is None and self._confirm_large_sent > 0
        if (
            base_through
            and self._confirm_large_lost >= CONFIRM_LARGE_PROBES
            and self._big_lost >= BLACK_HOLE_LOSSES
        ):
            self._end_confirmation()
            self._black_hole(now)

    def _end_confirmation(self) -> None:
        """No black hole (a large probe got through, or nothing did): the suspicion ends."""
        self._big_lost = 0
        self._confirm_pn = None
        self._confirm_large.clear()
        self._confirm_large_lost = 0

    def _black_hole(self, now: float) -> None:
        self.black_holes += 1
        self._big_lost = 0
        self.datagram_bytes = self.base_bytes
        self.pmtu_bytes = self.base_bytes + REPAIR_EXTRA_BYTES
        self._targets = []
        self._tries.clear()
        self._next_at = now + BLACK_HOLE_RESEARCH_S

    def _restart(self) -> None:
        self._targets = self._sizes()
        self._tries.clear()
        if not self._targets:
            self._next_at = None
