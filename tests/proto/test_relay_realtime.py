"""What a real process does to the sans-IO relay connection: late timers, bunched ACKs.

The simulator fires every timer on time and delivers every ACK at its own instant; an
event loop on a busy host does neither. These drive a client and a gateway by hand,
with the times a loaded process would hand them (docs/validation.md).
"""

from __future__ import annotations

import pytest

from tests.proto.pair import drain
from tierwise.proto.relay import RelayConfig, RelayConnection
from tierwise.proto.relay.connection import (
    BURST_CALL_MIN_RTT_S,
    BURST_CALL_PACKETS,
    BURST_PACKETS,
    LATE_WAKE_CREDIT_S,
)
from tierwise.proto.relay.rate import INITIAL_CWND_PACKETS, STARTUP_GAIN
from tierwise.proto.relay.streams import BULK_BYTES

KEY = bytes(range(32))
RATE = 10e6  # bytes/s: the pacing rate the tests start from
GATEWAY, CLIENT = ("gw", 1), ("cl", 2)


def allowance(conn: RelayConnection, size: int) -> float:
    """Packets the pacer lets leave at once after a pause (its burst allowance)."""
    rate = conn.rate.pacing_rate_bytes_per_s
    return max(conn.config.pacing_quantum_s * rate / size, BURST_PACKETS) + 1


def established(
    config: RelayConfig | None = None, rtt: float = 0.1
) -> tuple[RelayConnection, RelayConnection]:
    """A client and a gateway whose handshake completed at t = ``rtt`` (0.1 s)."""
    client = RelayConnection(KEY, is_client=True, config=config)
    gateway = RelayConnection(KEY, is_client=False, config=config)
    client.connect(GATEWAY, 0.0)
    for data, _ in client.datagrams_to_send(0.0):
        gateway.receive_datagram(data, CLIENT, rtt / 2)
    for data, _ in gateway.datagrams_to_send(rtt / 2):
        client.receive_datagram(data, GATEWAY, rtt)
    assert client.established and gateway.established
    return client, gateway


def test_a_late_pacing_timer_sends_what_it_slept_through() -> None:
    """A timer that fires 6 ms late while bulk data waits sends ~6 ms of the pacing rate,
    not only the burst allowance (which held the lab's relay at a fifth of its rate)."""
    client, _ = established(RelayConfig(initial_rate_bytes_per_s=RATE))
    sid = client.open_stream(priority=5)
    client.send(sid, bytes(4_000_000))
    first = drain(client, 0.2)
    due = client.get_timer()
    assert due is not None and due < 0.21
    late = drain(client, due + 0.006)
    rate = client.rate.pacing_rate_bytes_per_s
    size = len(late[0][0])
    expected = 0.006 * rate / size
    assert 0.8 * expected <= len(late) <= 1.2 * expected + 2
    assert len(first) <= allowance(client, size)
    assert len(late) > 2 * allowance(client, size)  # what it sent before


def test_late_credit_is_bounded_and_not_given_after_idle() -> None:
    """A very late timer sends at most LATE_WAKE_CREDIT_S of the rate; a sender that
    was idle (nothing to send) gets only the burst allowance when data comes."""
    client, _ = established(RelayConfig(initial_rate_bytes_per_s=RATE))
    sid = client.open_stream(priority=5)
    client.send(sid, bytes(4_000_000))
    client.datagrams_to_send(0.2)
    due = client.get_timer()
    assert due is not None
    late = client.datagrams_to_send(due + 0.5)
    rate = client.rate.pacing_rate_bytes_per_s
    assert len(late) <= LATE_WAKE_CREDIT_S * rate / len(late[0][0]) + 2
    idle, _ = established(RelayConfig(initial_rate_bytes_per_s=RATE))
    assert not [d for d, _ in idle.datagrams_to_send(0.2) if len(d) > 1000]
    sid = idle.open_stream(priority=5)
    idle.send(sid, bytes(4_000_000))
    after_idle = idle.datagrams_to_send(0.7)
    assert len(after_idle) <= allowance(idle, len(after_idle[0][0]))


def _burst_and_acks(spacing_s: float) -> float:
    """The client's estimate after a 32-packet first flight whose ACKs arrive ``spacing_s`` apart.

    The gateway gets the burst at the path's rate (1,378 B per 0.5 ms ≈ 2.8 MB/s) and
    acknowledges as it does; the client hears the ACKs bunched or spread as told.
    """
    client, gateway = established()
    sid = client.open_stream(priority=5)
    client.send(sid, bytes(32 * 1300))
    burst = drain(client, 0.2)
    assert len(burst) >= 32
    acks = []
    for i, (data, _) in enumerate(burst):
        at = 0.25 + 0.0005 * i
        gateway.receive_datagram(data, CLIENT, at)
        acks += [d for d, _ in gateway.datagrams_to_send(at)]
    assert len(acks) >= 16
    for i, data in enumerate(acks):
        client.receive_datagram(data, GATEWAY, 0.3 + spacing_s * i)
    return client.rate.btl_bw_bytes_per_s


def test_bunched_acks_do_not_read_as_a_fast_path() -> None:
    """ACKs that a busy host hands over microseconds apart do not time a train: the
    estimate stays near the path's rate (spread ACKs measure it as before)."""
    path_rate = 1378 / 0.0005
    spread = _burst_and_acks(0.001)  # the ACKs keep the path's spacing
    assert 0.7 * path_rate <= spread <= 1.3 * path_rate
    bunched = _burst_and_acks(0.000002)  # the same ACKs, 2 µs apart
    assert bunched <= 1.3 * path_rate


def test_bulk_streams_of_one_priority_take_turns() -> None:
    """Two bulk streams with bytes waiting share the packets; the older one no longer
    takes them all once both have passed the bulk mark."""
    client, _ = established(RelayConfig(initial_rate_bytes_per_s=1e9))
    first, second = client.open_stream(priority=5), client.open_stream(priority=5)
    client.send(first, bytes(3_000_000))
    client.send(second, bytes(3_000_000))
    for stream in (first, second):  # both past the mark, as a probe and a transfer were
        client._streams[stream].send.next_offset = 1_000_000
    sent = {first: 0, second: 0}
    assert len(client.datagrams_to_send(0.2)) >= 40
    for packet in client._sent.values():
        for sid, start, end, _fin in packet.streams:
            sent[sid] += end - start
    assert min(sent.values()) >= 0.4 * sum(sent.values())


def _calls(conn: RelayConnection, now: float) -> list[int]:
    """Data datagrams per ``datagrams_to_send`` call at ``now`` while the timer says "now"."""
    sizes = []
    while not sizes or ((due := conn.get_timer()) is not None and due <= now):
        out = conn.datagrams_to_send(now)
        if not out:
            break
        sizes.append(sum(len(d) > 1000 for d, _ in out))
    return sizes


def test_a_new_sessions_first_flight_leaves_a_few_datagrams_per_call() -> None:
    """A process seals a call's datagrams before the first leaves: the unpaced first flight
    (the initial window) comes eight per call, each time with the timer due at once."""
    client, _ = established()
    client.send(client.open_stream(), bytes(354_640), end_stream=True)
    sizes = _calls(client, 0.2)
    assert max(sizes) == BURST_CALL_PACKETS and sum(sizes) >= INITIAL_CWND_PACKETS


def test_a_sub_millisecond_path_sends_a_request_in_one_call() -> None:
    """Below a millisecond of path (loopback, a rack) the ends' CPU sets a request's time:
    its flight is not cut into calls of eight, each of which would cost the sender a turn
    of its event loop and the receiver an ACK."""
    rtt = BURST_CALL_MIN_RTT_S / 2
    client, gateway = established(rtt=rtt)
    check = client.open_stream()  # a small exchange first: the path's least RTT is known
    client.send(check, bytes(4000), end_stream=True)  # a few datagrams: a prompt ACK
    for data, _ in drain(client, 0.01):
        gateway.receive_datagram(data, CLIENT, 0.01 + rtt / 2)
    for data, _ in drain(gateway, 0.01 + rtt / 2):
        client.receive_datagram(data, GATEWAY, 0.01 + rtt)
    assert client._rtt.min_s is not None and client._rtt.min_s < BURST_CALL_MIN_RTT_S
    client.send(client.open_stream(), bytes(354_640), end_stream=True)
    assert _calls(client, 0.02)[0] >= INITIAL_CWND_PACKETS


def test_bulk_keeps_the_pacers_quantum_per_call() -> None:
    """Bulk (a stream past the bulk mark) is not cut into calls of eight: a pacing timer
    6 ms late returns its ~6 ms of the pace in one call (fewer calls, less CPU per byte)."""
    client, _ = established(RelayConfig(initial_rate_bytes_per_s=RATE))
    sid = client.open_stream(priority=5)
    client.send(sid, bytes(4_000_000))
    client._streams[sid].send.next_offset = BULK_BYTES  # past the mark, as after 1 MB sent
    client.datagrams_to_send(0.2)
    due = client.get_timer()
    assert due is not None
    assert len(client.datagrams_to_send(due + 0.006)) > 4 * BURST_CALL_PACKETS


@pytest.mark.parametrize("first_batch", [3, 0])
def test_a_first_flight_read_in_one_batch_is_timed_by_the_peers_stamps(first_batch: int) -> None:
    """The gateway reads a new session's first flight in two batches (3 datagrams, then
    the rest 8 ms after the last arrived, as a process waiting for a core does), or all
    in one: two ACKs or one, too few to time. The client times the flight by the peer's
    arrival stamps (the ACKs' delays), finds the path's rate, and sends the rest of the
    request at once instead of growing its window as a slow start (the lab's 2.6–3.0 ×
    the floor). No opening probe: this flight is the one that times the path."""
    client, gateway = established(RelayConfig(open_probe_packets=0))
    check = client.open_stream()  # a small exchange first, as a forward's check at start
    client.send(check, b"check", end_stream=True)
    for data, _ in drain(client, 0.11):
        gateway.receive_datagram(data, CLIENT, 0.16)
    gateway.handle_timer(0.165)  # its ACK waits out the ACK delay
    for data, _ in gateway.datagrams_to_send(0.165):
        client.receive_datagram(data, GATEWAY, 0.215)
    client.send(client.open_stream(), bytes(354_640), end_stream=True)
    flight = [d for d, _ in drain(client, 0.3)]
    assert sum(len(d) > 1000 for d in flight) >= INITIAL_CWND_PACKETS
    spacing = 0.0005  # the path: 1,378 B per 0.5 ms
    arrivals = [0.35 + spacing * i for i in range(len(flight))]
    acks = []
    batches = [(slice(0, first_batch), arrivals[2])] if first_batch else []
    batches.append((slice(first_batch, None), arrivals[-1] + 0.008))
    for batch, read_at in batches:
        for data, at in zip(flight[batch], arrivals[batch], strict=True):
            gateway.receive_datagram(data, CLIENT, at)
        acks += [(d, read_at + 0.05) for d, _ in gateway.datagrams_to_send(read_at)]
    assert len(acks) == len(batches)
    for data, at in acks:
        client.receive_datagram(data, GATEWAY, at)
    path_rate = 1378 / spacing
    assert 0.8 * path_rate <= client.rate.btl_bw_bytes_per_s <= 1.25 * path_rate
    # the rest of the request fits the window and leaves at twice the estimate, a burst's
    # gain: the ACK's RTT less its reported delay (the 8 ms read) is no queue, so the brake
    # stays off (judged with that delay in, it paced the rest at 0.75 × the estimate)
    assert client.rate.cwnd_bytes >= 354_640
    drain(client, acks[-1][1])
    assert client.rate.gain == STARTUP_GAIN
    assert client.rate.pacing_rate_bytes_per_s >= 1.6 * path_rate


@pytest.mark.parametrize("before", [0.103, 0.01])
def test_a_packet_answered_during_the_first_flight_does_not_time_it(before: float) -> None:
    """A small packet sent ``before`` the request (the lab's forward check ends with a
    RESET) is answered while the request's first flight is out: its ACK ends a round and
    began the ACK train, so the flight's ACKs were timed from that packet's sending and
    read ≈ 1 MB/s. The train starts again at the flight's first ACK (a send gap over a
    quarter RTT, or the sender out of data between) and finds the path (100 Mbit/s)."""
    client, gateway = established(rtt=0.2)
    t0 = 1.0
    client.ping()
    for data, _ in client.datagrams_to_send(t0 - before):
        gateway.receive_datagram(data, CLIENT, t0 - before + 0.1)
    gateway.handle_timer(t0 - before + 0.105)  # its ACK waits out the ACK delay
    late = [d for d, _ in gateway.datagrams_to_send(t0 - before + 0.105)]
    client.send(client.open_stream(), bytes(354_640), end_stream=True)
    flight = [d for d, _ in drain(client, t0)]
    assert len(flight) >= INITIAL_CWND_PACKETS
    for data in late:
        client.receive_datagram(data, GATEWAY, t0 - before + 0.205)
    path_rate = 12.5e6
    at = t0 + 0.1
    acks = []
    for data in flight:
        at += (len(data) + 28) / path_rate  # the bottleneck spreads the flight
        gateway.receive_datagram(data, CLIENT, at)
        acks += [(d, at + 0.1) for d, _ in gateway.datagrams_to_send(at)]
    for data, when in acks:
        client.receive_datagram(data, GATEWAY, when)
    assert 0.8 * path_rate <= client.rate.btl_bw_bytes_per_s <= 1.25 * path_rate
    assert client.rate.pacing_rate_bytes_per_s < float("inf")
