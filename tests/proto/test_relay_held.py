"""Held streams: the owner's "I credit what my reader takes" mark lives with the stream.

A stream is forgotten by the connection when both ends are done with it, which can
happen while its last events still wait for the owner: the mark must outlast those
events (else they would be credited as delivered, and again by the reader) and then
go (else it accumulates over a long session). ``unconsumed_bytes`` is the balance an
owner can check: delivered minus credited, 0 once every stream has ended. And a
session's end is the end of its streams: no frame after the peer's CLOSE opens one.
"""

from __future__ import annotations

from tierwise.proto.relay import RelayConfig
from tierwise.sim.relay import Net, OneWayPath, payload


def held_net() -> Net:
    net = Net(OneWayPath(delay_s=0.02), OneWayPath(delay_s=0.02), seed=1,
              config=RelayConfig(credit_on_consume=True))  # fmt: skip
    net.gateway.hold_peer_streams = True
    net.run(1.0, lambda: net.client.established)
    return net


def test_a_forgotten_streams_mark_outlasts_its_last_event_then_goes() -> None:
    net = held_net()
    sid = net.client.open_stream()
    net.client.send(sid, payload("up", 5_000))
    net.run(net.now + 1.0, lambda: len(net.received["gateway"].get(sid, b"")) == 5_000)
    assert sid in net.gateway.held  # held from its first byte
    net.gateway.send(sid, b"answer", end_stream=True)  # the gateway's side ends first
    net.run(net.now + 1.0, lambda: sid in net.finished["client"])
    net.run(net.now + 0.2)  # the gateway's FIN acknowledged
    seen: list[tuple[bool, bool]] = []
    net.on_gateway_stream = lambda s, _: seen.append(
        (s in net.gateway.held, s in net.gateway.stream_ids)
    )
    net.client.send(sid, b"", end_stream=True)  # the last event forgets the stream
    net.run(net.now + 1.0, lambda: bool(seen))
    assert seen == [(True, False)]  # taken while forgotten, still held
    assert sid not in net.gateway.held  # gone once the events were drained
    net.gateway.hold(sid)  # a stream long gone is not marked again
    assert not net.gateway.held


def test_unconsumed_bytes_is_what_the_reader_has_not_reported() -> None:
    net = held_net()
    sid = net.client.open_stream()
    net.client.send(sid, payload("up", 30_000), end_stream=True)
    net.run(net.now + 2.0, lambda: sid in net.finished["gateway"])
    assert net.gateway.unconsumed_bytes == 30_000
    net.gateway.stream_consumed(sid, 20_000)
    assert net.gateway.unconsumed_bytes == 10_000
    net.gateway.stream_consumed(sid, 20_000)  # 10,000 B credited twice
    assert net.gateway.unconsumed_bytes == -10_000


def test_frames_after_a_close_open_no_stream() -> None:
    """A datagram carrying the peer's CLOSE and, after it, a new stream's first bytes:
    the session ends there; nothing after the CLOSE opens or feeds a stream."""
    from tierwise.proto.relay import ConnectionTerminated, StreamDataReceived
    from tierwise.sim.relay import CLIENT

    net = held_net()
    sid = net.client.open_stream()
    net.client.send(sid, payload("after the close", 600))
    net.client.close_session()
    datagrams = net.client.datagrams_to_send(net.now)
    assert datagrams
    for data, _ in datagrams:
        net.gateway.receive_datagram(data, CLIENT, net.now)
    events = []
    while (event := net.gateway.next_event()) is not None:
        events.append(type(event))
    assert ConnectionTerminated in events
    assert StreamDataReceived not in events, events
    assert not net.gateway.stream_ids


def test_a_reset_stream_evicted_unanswered_returns_its_bytes_to_the_window() -> None:
    """A stream this end reset waits for the peer's final size to settle the session's
    credit; past the bound on waiting streams the oldest is given up. What arrived of it
    (here out of order: its first packet lost) must still go back to the window, or a
    long session's window shrinks for good (here to nothing: a later upload stalls)."""
    from tierwise.proto.relay import RelayConfig
    from tierwise.proto.relay.connection import AWAIT_FINAL_MIN
    from tierwise.sim.relay import CLIENT, Net, OneWayPath

    window = 20_000  # the lost stream's bytes fill the session's window
    net = Net(OneWayPath(delay_s=0.01), OneWayPath(delay_s=0.01), seed=3,
              config=RelayConfig(session_window_bytes=window, max_streams=16))  # fmt: skip
    net.run(1.0, lambda: net.client.established)
    sid = net.client.open_stream()
    net.client.send(sid, payload("lost", window))
    flight = net.client.datagrams_to_send(net.now)
    for datagram, _ in flight[1:]:  # the stream's first packet is lost
        net.gateway.receive_datagram(datagram, CLIENT, net.now)
    net.run(net.now)
    assert sid not in net.received["gateway"]  # nothing in order yet
    net.gateway.reset(sid)
    for _ in range(AWAIT_FINAL_MIN):  # more resets wait than the bound (max 16 streams) keeps
        net.gateway.reset(net.gateway.open_stream())
    net.gateway.datagrams_to_send(net.now)  # lost: the peer's answers come a PTO later
    net.run(net.now + 2.0)
    big = net.client.open_stream()
    net.client.send(big, payload("after", 3 * window), end_stream=True)
    net.run(net.now + 10.0, lambda: big in net.finished["gateway"])
    assert len(net.received["gateway"].get(big, b"")) == 3 * window
