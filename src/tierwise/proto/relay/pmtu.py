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
retransmission queue and FEC never see it (the receiver, which sees only a gap in
the packet numbers, counts it in its raw loss measurement, so the search waits
for :data:`PROBE_AFTER_PACKETS` and retries only one size at a time). The sizes tried are
:data:`PROBE_SIZES` (the UDP payloads of the common MTUs over IPv6 and IPv4: 1,500,
4,096, 9,000, 16,384, 65,535) up to the configured maximum, and the maximum
itself; a size that fails ends the search for it and every larger one (RFC 8899
SEARCH_COMPLETE once none is left),
and the search runs again after :data:`RAISE_S` (RFC 8899's PMTU_RAISE_TIMER).

Black holes (RFC 8899 §4.3): when :data:`BLACK_HOLE_LOSSES` datagrams larger than
the base are declared lost and none that large is acknowledged in between, the
sender suspects the path shrank and sends one confirmation probe at the base size.
If it is acknowledged while the large datagrams still are not, the path carries
small datagrams and drops large ones: the datagram falls back to the base and
the search starts over :data:`BLACK_HOLE_RESEARCH_S` later. A lost confirmation
means the path carries nothing (a blackout, not a black hole): the suspicion is
dropped. Each end's sender discovers its own direction; nothing is negotiated.

All the sizes still to try are probed at once, one probe each, smallest first (a
jumbo path is found in one round trip, an Ethernet path in :data:`MAX_PROBES`); after a
loss only the smallest size lost is tried again until it is settled.
Sans-IO: the connection asks :meth:`PmtuSearch.due` for a probe size, reports
what it sent, what was acknowledged and what was lost; this object reads no clock.
"""

from __future__ import annotations

from tierwise.proto.relay import wire

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
REPAIR_EXTRA_BYTES = wire.HEADER_BYTES + wire.TAG_BYTES + (1 + 9 + 2 * 16) + (1 + 14) + 2  # 92
# The largest data datagram a config may ask for: its repair (REPAIR_EXTRA_BYTES more)
# still fits the largest UDP payload over IPv6 on a 65,535 B MTU (65,487 B; IPv4: 65,507 B),
# such as loopback's.
MAX_DATAGRAM_BYTES = 65_000
# UDP payloads of common MTUs, IPv6 (40 + 8 B of headers) before IPv4 (20 + 8 B):
# Ethernet 1,500; 4,096 (InfiniBand-style); 9,000 (jumbo frames); 16,384; 65,535 (loopback)
PROBE_SIZES = (1452, 1472, 4048, 4068, 8952, 8972, 16336, 16356, 65487)
MAX_PROBES = 3  # RFC 8899 MAX_PROBES
# The search starts at this packet number: past the receiver's first loss windows
# (meter.LOSS_WINDOW_PACKETS + LOSS_SLACK_PACKETS = 192), whose early estimate a lost
# probe would skew most (its gap is all the receiver sees of it).
PROBE_AFTER_PACKETS = 256
RAISE_S = 600.0  # RFC 8899 PMTU_RAISE_TIMER
BLACK_HOLE_LOSSES = 6  # large datagrams lost with none acknowledged: suspect a black hole
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
        self._big_lost = 0  # large datagrams lost since one was last acknowledged
        self._confirm_pn: int | None = None  # the base-size probe of a suspected black hole

    def _sizes(self) -> list[int]:
        top = self.max_bytes + REPAIR_EXTRA_BYTES
        sizes = [s for s in PROBE_SIZES if self.pmtu_bytes < s < top]
        return [*sizes, top] if top > self.pmtu_bytes else sizes

    @property
    def searching(self) -> bool:
        return bool(self._targets) or self._confirm_pn is not None

    def due(self, now: float, pn: int) -> int | None:
        """The size of a probe to send now, if one is due.

        Every size still to try is in flight at once, one probe each (a jumbo path is
        found in one round trip, an Ethernet one in ``MAX_PROBES``), smallest first.
        """
        if self._big_lost >= BLACK_HOLE_LOSSES:
            # a black hole is suspected: does a datagram of the base size get through?
            return self.base_bytes if self._confirm_pn is None else None
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
        self.probes_sent += 1
        if self._big_lost >= BLACK_HOLE_LOSSES and self._confirm_pn is None:
            self._confirm_pn = pn

    def on_acked(self, pn: int, size: int, now: float) -> None:
        """A packet was acknowledged (a probe, or any other ack-eliciting one)."""
        if self._probes.pop(pn, None) is not None:
            self.probes_acked += 1
            if pn == self._confirm_pn:
                self._confirm_pn = None
                if self._big_lost >= BLACK_HOLE_LOSSES:
                    self._black_hole(now)
                return
            if size > self.pmtu_bytes:
                self.pmtu_bytes = size
                self.datagram_bytes = min(self.max_bytes, size - REPAIR_EXTRA_BYTES)
            self._targets = [s for s in self._targets if s > size]
            self._search_done(now)
            return
        if size > self.base_bytes + REPAIR_EXTRA_BYTES:
            self._big_lost = 0  # large datagrams get through: no black hole

    def on_lost(self, pn: int, size: int, now: float) -> bool:
        """A packet was declared lost; True if it was a probe (not a data loss)."""
        if self._probes.pop(pn, None) is not None:
            self.probes_lost += 1
            if pn == self._confirm_pn:  # the base is lost too: a blackout, not a black hole
                self._confirm_pn = None
                self._big_lost = 0
                return True
            self._tries[size] = self._tries.get(size, 0) + 1
            if self._tries[size] >= MAX_PROBES:  # it does not get through, nor anything larger
                self._targets = [s for s in self._targets if s < size]
                self._search_done(now)
            return True
        if size > self.base_bytes + REPAIR_EXTRA_BYTES and self.datagram_bytes > self.base_bytes:
            self._big_lost += 1
        return False

    def _search_done(self, now: float) -> None:
        if not self._targets:  # RFC 8899 SEARCH_COMPLETE: try again later
            self._tries.clear()
            self._next_at = now + RAISE_S

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
