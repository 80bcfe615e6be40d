"""A Sender and a Receiver wired by hand, with synthetic time (h11's ConnectionPair).

Nothing moves unless a test moves it: the test says when segments leave, which
ones arrive and when, and when each ACK comes back.
"""

from __future__ import annotations

from collections.abc import Iterable

from tierwise.proto import Ack, Receiver, Segment, Sender
from tierwise.proto.congestion import CongestionController, RateSample
from tierwise.proto.relay import RelayConnection

MSS = 1000
HEADER = 40
ACK_WIRE = 40


class Pair:
    """``sender`` → ``receiver``; ``ack`` feeds the receiver's ACKs back."""

    def __init__(
        self,
        cc: str | CongestionController = "newreno",
        *,
        mss: int = MSS,
        header: int = HEADER,
        initial_window: int = 10,
        ack_every: int = 1,
        ack_delay: float = 0.0,
        nbytes: int | None = 100 * MSS,
    ) -> None:
        self.sender = Sender(mss=mss, header=header, initial_window=initial_window, cc=cc)
        self.receiver = Receiver(ack_every=ack_every, ack_delay=ack_delay, ack_wire=ACK_WIRE)
        if nbytes:
            self.sender.send(nbytes)

    def send(self, now: float) -> list[Segment]:
        return self.sender.segments_to_send(now)

    def arrive(self, segments: Iterable[Segment], now: float) -> list[Ack]:
        """Segments reach the receiver at ``now``; the ACKs it sends at once."""
        acks = [self.receiver.receive(seg, now) for seg in segments]
        return [a for a in acks if a is not None]

    def ack(self, acks: Iterable[Ack], now: float) -> None:
        for a in acks:
            self.sender.receive_ack(a, now)

    def round_trip(
        self, segments: list[Segment], sent: float, rtt: float, drop: Iterable[int] = ()
    ) -> list[Ack]:
        """Deliver ``segments`` (all but indexes ``drop``) at ``sent + rtt/2``, ACK at ``+ rtt``."""
        dropped = set(drop)
        kept = [s for i, s in enumerate(segments) if i not in dropped]
        acks = self.arrive(kept, sent + rtt / 2)
        self.ack(acks, sent + rtt)
        return acks


class Recorder(CongestionController):
    """A fixed window that records every hook call (not registered)."""

    name = "recorder"

    def __init__(self, *, mss: int = MSS, initial_window: int = 10, pacing_rate=None) -> None:
        super().__init__(mss=mss, initial_window=initial_window)
        self.pacing_rate = pacing_rate
        self.samples: list[RateSample] = []
        self.calls: list[tuple[str, dict]] = []

    def on_rate_sample(self, *, sample, now, in_flight) -> None:
        self.samples.append(sample)

    def on_ack(self, *, acked, rtt, now, in_flight, delivery_rate) -> None:
        self.calls.append(("ack", {"acked": acked, "rtt": rtt, "now": now}))

    def on_congestion(self, *, now, in_flight) -> None:
        self.calls.append(("congestion", {"now": now, "in_flight": in_flight}))

    def on_rto(self, *, now, in_flight) -> None:
        self.calls.append(("rto", {"now": now, "in_flight": in_flight}))

    def on_recovered(self, *, now) -> None:
        self.calls.append(("recovered", {"now": now}))

    def events(self, kind: str) -> list[dict]:
        return [kw for name, kw in self.calls if name == kind]


def drain(conn: RelayConnection, now: float) -> list[tuple[bytes, object]]:
    """Every datagram a relay connection has due at ``now``: calls again while its timer
    says "now" (a request's datagrams come a few per call), as the relay's event loop
    does."""
    out = conn.datagrams_to_send(now)
    while (
        (due := conn.get_timer()) is not None
        and due <= now
        and (more := conn.datagrams_to_send(now))
    ):
        out += more
    return out
