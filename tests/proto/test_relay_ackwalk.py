"""The sender's ACK processing takes what each range newly acknowledges, by bisection.

``RelayConnection`` keeps its outstanding packets in a dict in packet-number order and
their numbers in a sorted list (with the numbers of packets declared lost since, until a
rebuild). These tests hold it to the plain rule it replaced: after any ACK frame, the
outstanding packets are those sent, less every number any range covers, less those
declared lost — for ranges in any order, overlapping, reaching below everything sent or
acknowledging packets already declared lost.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierwise.proto.relay import RelayConnection
from tierwise.proto.relay.connection import SENT_STALE_MIN
from tierwise.proto.relay.wire import Ack
from tierwise.sim.relay import Net, OneWayPath, payload


def _established() -> tuple[Net, RelayConnection]:
    net = Net(OneWayPath(delay_s=0.01), OneWayPath(delay_s=0.01))
    net.run(1.0, lambda: net.client.established and net.gateway.established)
    net.run(net.now + 0.1)
    return net, net.client


def _send(client: RelayConnection, now: float, count: int) -> list[int]:
    """Put up to ``count`` more ack-eliciting packets in flight (as many as the window
    takes; nothing is delivered), in 10 ms of pacing."""
    before = set(client._sent)
    sid = client.open_stream()
    client.send(sid, payload(f"s{now}", count * 1400))
    for step in range(10):
        client.datagrams_to_send(now + step * 0.001)
    return sorted(set(client._sent) - before)


def _consistent(client: RelayConnection) -> None:
    pns = client._sent_pns
    assert pns == sorted(pns) and len(set(pns)) == len(pns)
    assert [pn for pn in pns if pn in client._sent] == list(client._sent)
    assert len(pns) - len(client._sent) == client._sent_stale >= 0
    assert list(client._sent) == sorted(client._sent)


ranges = st.lists(
    st.tuples(st.integers(-5, 400), st.integers(0, 60)).map(lambda t: (t[0], t[0] + t[1])),
    min_size=1,
    max_size=32,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(ranges, st.booleans(), st.integers(0, 40)), min_size=1, max_size=8))
def test_an_ack_takes_exactly_the_outstanding_packets_its_ranges_cover(
    steps: list[tuple[list[tuple[int, int]], bool, int]],
) -> None:
    """Any ranges (unsorted, overlapping, empty, below the oldest, over lost packets): the
    outstanding set is the rule's, and the sorted numbers stay the dict's keys plus the
    stale ones counted."""
    net, client = _established()
    now = net.now
    expected = set(client._sent)
    for ack_ranges, lose, more in steps:
        if more:
            expected |= set(_send(client, now, more))
            now += 0.1
        # the largest must be a packet sent, or the frame is ignored as a whole
        top = max(expected | set(client._sent_pns), default=0)
        frame = Ack(((top, top + 1), *[(a, b) for a, b in ack_ranges if b > a]))
        lost_before = client.stats.packets_lost
        client._on_ack(frame, now)
        for a, b in frame.ranges:
            expected -= set(range(a, b))
        lost_now = expected - set(client._sent)  # declared lost by this ACK (RFC 9002 rules)
        assert len(lost_now) == client.stats.packets_lost - lost_before
        assert all(pn < client._largest_acked for pn in lost_now)
        expected -= lost_now
        assert set(client._sent) == expected
        _consistent(client)
        if lose and client._sent:
            client._on_pto(now + 60.0)  # everything in flight is presumed lost
            expected = set(client._sent)
            _consistent(client)


def test_lost_numbers_are_dropped_from_the_list_once_they_outnumber_the_rest() -> None:
    """A loss leaves its number in the list (no shift per loss); past SENT_STALE_MIN stale
    numbers, and more than the outstanding ones, the list is rebuilt from the dict."""
    net, client = _established()
    sent: list[int] = []
    now = net.now
    while len(sent) < 3 * SENT_STALE_MIN:  # declared lost as they go: the window reopens
        batch = _send(client, now, 3 * SENT_STALE_MIN - len(sent))
        for pn in batch:
            client._on_packet_lost(client._sent[pn])
            _consistent(client)
        sent += batch
        now += 0.1
    keep = _send(client, now, SENT_STALE_MIN // 2)
    assert len(keep) >= SENT_STALE_MIN // 2  # (with the lost bytes sent again)
    assert client._sent_stale > 0  # some lost numbers are still in the list
    for pn in keep[: SENT_STALE_MIN // 4]:
        client._on_packet_lost(client._sent[pn])
        _consistent(client)
    keep = keep[SENT_STALE_MIN // 4 :]
    # never more stale numbers than SENT_STALE_MIN or the outstanding ones
    assert client._sent_stale <= max(SENT_STALE_MIN, len(client._sent))
    # a packet declared lost and then acknowledged (it was late, not lost) is skipped
    late = sent[0]
    client._on_ack(Ack(((keep[-1], keep[-1] + 1), (late, late + 1))), now + 0.5)
    _consistent(client)
    assert late not in client._sent and keep[-1] not in client._sent


def test_a_range_reaching_far_below_the_window_costs_only_what_it_covers() -> None:
    """A range from 0 over a session's whole history acknowledges what is outstanding in it
    (the old walk stepped over every number from the oldest outstanding one up)."""
    net, client = _established()
    sent = _send(client, net.now, 200)
    top = sent[-1]
    client._on_ack(Ack(((top, top + 1), (0, top))), net.now + 0.05)
    assert client._sent == {} and client._sent_pns == []
