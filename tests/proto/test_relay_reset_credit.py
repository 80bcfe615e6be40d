"""Session flow control across resets: a stream's final size counts, nothing leaks (RFC 9000 §4.5).

Every byte a sender counted against the session's credit must come back to it once
the stream is over, delivered or not: bytes received out of order and bytes still in
flight when the stream is reset (by the peer, by the application, or refused) are
credited at the stream's final size. Otherwise the session's window shrinks for good
and, after enough resets, a healthy session stalls.
"""

from __future__ import annotations

from tierwise.proto.relay import RelayConfig
from tierwise.sim.relay import Net, OneWayPath, payload

WINDOW = 256_000


def settled(net: Net) -> bool:
    """The gateway has credited, and counted, every stream byte the client sent."""
    sent = net.client._sent_new
    return net.gateway._delivered_total == sent and net.gateway._recv_total == sent


def transfer_completes(net: Net, nbytes: int, until_s: float) -> None:
    sid = net.client.open_stream()
    data = payload(f"after {sid}", nbytes)
    net.client.send(sid, data, end_stream=True)
    net.run(net.now + until_s, lambda: sid in net.finished["gateway"])
    assert bytes(net.received["gateway"].get(sid, b"")) == data, (
        f"{len(net.received['gateway'].get(sid, b''))} of {nbytes} B by t={net.now:.1f} s"
    )


def test_peer_reset_returns_undelivered_and_in_flight_bytes() -> None:
    """Streams reset with bytes lost, out of order and in flight leave the session window whole."""
    config = RelayConfig(stream_window_bytes=WINDOW, session_window_bytes=WINDOW)
    net = Net(
        OneWayPath(delay_s=0.05, loss=0.2),
        OneWayPath(delay_s=0.05, loss=0.2),
        seed=3,
        config=config,
    )
    net.run(1.0, lambda: net.client.established)
    for _ in range(12):
        sids = [net.client.open_stream() for _ in range(8)]
        for sid in sids:
            net.client.send(sid, payload(f"doomed {sid}", 64_000))
        net.run(net.now + 0.08)  # part arrived, part is lost or still on the path
        for sid in sids:
            net.client.reset(sid, code=7)
    net.run(net.now + 3.0, lambda: settled(net) and not net.gateway.stream_ids)
    assert net.client._sent_new > 3 * WINDOW  # the resets would have eaten the window
    assert settled(net)
    assert not net.gateway.stream_ids and not net.client.stream_ids
    transfer_completes(net, 4 * WINDOW, until_s=20.0)


def test_abandoned_stream_returns_the_peers_in_flight_bytes() -> None:
    """A stream the receiving application abandons is settled at the sender's final size."""
    config = RelayConfig(
        stream_window_bytes=WINDOW, session_window_bytes=WINDOW, credit_on_consume=True
    )
    net = Net(
        OneWayPath(delay_s=0.05, loss=0.1),
        OneWayPath(delay_s=0.05, loss=0.1),
        seed=5,
        config=config,
    )
    net.run(1.0, lambda: net.client.established)
    for _ in range(10):
        sids = [net.client.open_stream() for _ in range(4)]
        for sid in sids:
            net.client.send(sid, payload(f"unread {sid}", 100_000))
        net.run(net.now + 0.09)
        for sid in sids:
            if sid in net.gateway.stream_ids:
                held = len(net.received["gateway"].get(sid, b""))
                net.gateway.stream_consumed(sid, held)  # the application drops what it held
                net.gateway.reset(sid, code=1)
            else:  # none of its bytes got there yet: the client gives up on it
                net.client.reset(sid, code=1)
        net.run(net.now + 0.5)
        assert not set(sids) & set(net.client.stream_ids)
    net.run(net.now + 3.0, lambda: settled(net))
    assert settled(net)
    transfer_completes_consumed(net, 3 * WINDOW)


def transfer_completes_consumed(net: Net, nbytes: int) -> None:
    """A transfer whose reader consumes everything it gets completes byte-exact."""
    sid = net.client.open_stream()
    data = payload("consumed", nbytes)
    net.client.send(sid, data, end_stream=True)
    consumed = 0
    deadline = net.now + 20.0
    while sid not in net.finished["gateway"] and net.now < deadline:
        got = len(net.received["gateway"].get(sid, b""))
        net.gateway.stream_consumed(sid, got - consumed)
        consumed = got
        net.run(net.now + 0.05)
    assert bytes(net.received["gateway"].get(sid, b"")) == data


def test_refused_streams_are_credited_at_their_final_size() -> None:
    """Bytes of streams refused for the stream limit come back to the session's window."""
    config = RelayConfig(stream_window_bytes=WINDOW, session_window_bytes=WINDOW, max_streams=1)
    net = Net(OneWayPath(delay_s=0.05), OneWayPath(delay_s=0.05), config=config)
    net.run(1.0, lambda: net.client.established)
    keep = net.client.open_stream()
    net.client.send(keep, b"open")
    net.run(net.now + 0.2)
    refused = [net.client.open_stream() for _ in range(20)]
    for sid in refused:
        net.client.send(sid, payload(f"refused {sid}", 20_000))
    net.run(net.now + 2.0, lambda: settled(net) and not set(refused) & set(net.client.stream_ids))
    assert net.gateway.stats.streams_refused == 20
    assert settled(net)
    data = payload("keep", 3 * WINDOW)
    net.client.send(keep, data, end_stream=True)
    net.run(net.now + 20.0, lambda: keep in net.finished["gateway"])
    assert bytes(net.received["gateway"][keep]) == b"open" + data


def test_reset_before_any_byte_opens_no_stream_later() -> None:
    """A reset that overtakes all of its stream's bytes settles it; a late frame opens nothing."""
    net = Net(OneWayPath(delay_s=0.05), OneWayPath(delay_s=0.05))
    net.run(1.0, lambda: net.client.established)
    held: list[bytes] = []
    net.tap = lambda name, d: (held.append(d), None)[1] if name == "up" else d
    sid = net.client.open_stream()
    net.client.send(sid, payload("overtaken", 5_000))
    net.run(net.now + 0.01)
    net.tap = None
    net.client.reset(sid, code=4)
    net.run(net.now + 1.0, lambda: settled(net))
    assert held and settled(net)
    assert sid not in net.gateway.stream_ids and sid not in net.client.stream_ids
    assert net.resets["gateway"] == []  # its application never heard of the stream
    for datagram in held:
        net.inject("up", datagram, net.now + 0.01)
    net.run(net.now + 0.5)
    assert net.gateway.stats.packets_received > 0 and sid not in net.gateway.stream_ids
    assert settled(net)  # the late bytes are not counted twice


def test_receiver_enforces_the_session_window() -> None:
    """A peer that sends past the session's credit has the excess dropped, not buffered."""
    config = RelayConfig(
        stream_window_bytes=4 * WINDOW, session_window_bytes=WINDOW, credit_on_consume=True
    )
    net = Net(OneWayPath(delay_s=0.05), OneWayPath(delay_s=0.05), config=config)
    net.run(1.0, lambda: net.client.established)
    net.client._peer_max_data = 1 << 40  # a peer that ignores the session window
    sids = [net.client.open_stream() for _ in range(3)]
    for sid in sids:
        net.client.send(sid, payload(f"greedy {sid}", 2 * WINDOW))
    net.run(net.now + 3.0)
    buffered = sum(len(net.received["gateway"].get(sid, b"")) for sid in sids)
    assert net.client._sent_new > 2 * WINDOW
    assert buffered <= WINDOW
    assert net.gateway.stats.dropped_flow_control > 0
