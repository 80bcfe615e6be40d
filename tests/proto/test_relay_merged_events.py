"""A batch of datagrams read at once hands its owner one data event per stream, in order.

The I/O layer feeds a whole receive batch before it takes the connection's events
(``relay/session.py``); each event costs it a pass through its Python handlers, so the
in-order bytes of consecutive datagrams of one stream are joined into the event still
waiting for them. Order between streams and against resets is kept, and bytes are exact.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.proto.pair import drain
from tierwise.proto.relay import (
    RelayConnection,
    StreamDataReceived,
    StreamReset,
)
from tierwise.sim.relay import CLIENT, Net, payload


def _established() -> Net:
    net = Net()
    net.run(1.0, lambda: net.client.established and net.gateway.established)
    return net


def _feed(net: Net, conn: RelayConnection, datagrams: list[bytes]) -> None:
    for datagram in datagrams:
        conn.receive_datagram(datagram, CLIENT, net.now)


def _events(conn: RelayConnection) -> list:
    out = []
    while (event := conn.next_event()) is not None:
        out.append(event)
    return out


def _client_datagrams(net: Net) -> list[bytes]:
    return [d for d, _ in drain(net.client, net.now)]


def test_a_batch_of_one_streams_datagrams_is_one_event() -> None:
    net = _established()
    sid = net.client.open_stream()
    data = payload("batch", 12_000)
    net.client.send(sid, data, end_stream=True)
    datagrams = _client_datagrams(net)
    assert len(datagrams) >= 9  # a new session's first flight leaves at once
    _feed(net, net.gateway, datagrams)
    events = _events(net.gateway)
    assert [type(e) for e in events] == [StreamDataReceived]
    assert events[0].stream_id == sid and events[0].data == data and events[0].end_stream


def test_datagrams_taken_one_by_one_are_one_event_each() -> None:
    """The simulator's endpoints (and any owner that drains after each datagram) see the
    same events as before: nothing waits to be joined."""
    net = _established()
    sid = net.client.open_stream()
    data = payload("single", 6_000)
    net.client.send(sid, data)
    got = []
    for datagram in _client_datagrams(net):
        _feed(net, net.gateway, [datagram])
        got += _events(net.gateway)
    assert len(got) >= 4 and all(e.stream_id == sid for e in got)
    assert b"".join(e.data for e in got) == data


def test_streams_interleaved_keep_their_order_and_a_reset_stays_after_its_bytes() -> None:
    net = _established()
    a, b = net.client.open_stream(), net.client.open_stream()
    net.client.send(a, payload("a", 4_000))
    net.client.send(b, payload("b", 4_000))
    first = _client_datagrams(net)
    net.client.reset(a, code=7)
    net.client.send(b, payload("b2", 3_000), end_stream=True)
    later = _client_datagrams(net)
    _feed(net, net.gateway, first + later)
    events = _events(net.gateway)
    kinds = [(type(e).__name__, e.stream_id) for e in events]
    # each stream's bytes as few events as the order allows; the reset after a's bytes
    assert kinds.index(("StreamReset", a)) > kinds.index(("StreamDataReceived", a))
    data_a = b"".join(
        e.data for e in events if isinstance(e, StreamDataReceived) and e.stream_id == a
    )
    data_b = b"".join(
        e.data for e in events if isinstance(e, StreamDataReceived) and e.stream_id == b
    )
    assert data_a == payload("a", 4_000)
    assert data_b == payload("b", 4_000) + payload("b2", 3_000)
    assert [e.code for e in events if isinstance(e, StreamReset)] == [7]
    ends = [e for e in events if isinstance(e, StreamDataReceived) and e.end_stream]
    assert [e.stream_id for e in ends] == [b] and events[-1] is ends[0]
    # consecutive events never both carry data of one stream: each run became one event
    for e1, e2 in itertools.pairwise(events):
        assert not (
            isinstance(e1, StreamDataReceived)
            and isinstance(e2, StreamDataReceived)
            and e1.stream_id == e2.stream_id
        )


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5_000), min_size=1, max_size=4),
    cuts=st.lists(st.integers(0, 30), max_size=4),
)
def test_however_a_run_of_datagrams_is_cut_into_batches_the_bytes_are_exact(
    sizes: list[int], cuts: list[int]
) -> None:
    net = _established()
    sids = [net.client.open_stream() for _ in sizes]
    sent = {sid: payload(f"s{sid}", n) for sid, n in zip(sids, sizes, strict=True)}
    for sid, data in sent.items():
        net.client.send(sid, data, end_stream=True)
    datagrams = _client_datagrams(net)
    got: dict[int, bytes] = {sid: b"" for sid in sids}
    ended: set[int] = set()
    bounds = sorted({0, len(datagrams), *(c for c in cuts if c < len(datagrams))})
    for lo, hi in itertools.pairwise(bounds):
        _feed(net, net.gateway, datagrams[lo:hi])
        for event in _events(net.gateway):
            assert isinstance(event, StreamDataReceived) and event.stream_id not in ended
            got[event.stream_id] += event.data
            if event.end_stream:
                ended.add(event.stream_id)
    assert got == sent and ended == set(sids)
