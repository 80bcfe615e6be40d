"""The sender's per-packet shortcuts give the bytes and marks the general code gave.

The relay's CPU cut: STREAM frames are encoded straight into the
packet's payload (``wire.append_stream_frame``) instead of as frame objects, and a FEC
block closed without repairs clears the open-block mark on its own packets only
instead of scanning every packet in flight. These tests hold both to what they
replaced: the frame's bytes equal ``encode_frame`` of the frame object (and parse back
to it), and at every step of lossy runs no packet outside the block still open (or
whose repairs wait to leave) carries the mark the old full scan would have cleared.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierwise.proto.relay import wire
from tierwise.proto.relay.connection import _OPEN_BLOCK, RelayConnection
from tierwise.sim.relay import Net, OneWayPath, payload


@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**40),
    st.binary(max_size=1400),
    st.booleans(),
    st.integers(0, 255),
    st.booleans(),
)
def test_a_stream_frame_appended_is_the_frame_encoded(
    sid: int, offset: int, data: bytes, fin: bool, priority: int, later: bool
) -> None:
    frame = wire.StreamFrame(sid, offset, data, fin, priority, later)
    out = bytearray(b"\x01")  # after a PING, as in a packet with other frames before it
    wire.append_stream_frame(out, sid, offset, data, fin, priority, later)
    assert bytes(out) == b"\x01" + wire.encode_frame(frame)
    assert wire.parse_frames(bytes(out)) == [wire.Ping(), frame]


def _stray_marks(conn: RelayConnection) -> list[int]:
    """Packets with the open-block mark that the old scan-all clear would have missed:
    outside the open block and outside a block whose repairs are still queued."""
    fec = conn._fec
    block = range(fec.first_pn, fec.first_pn + fec.size) if fec.open else range(0)
    waiting = {
        pn for r in conn._repairs for pn in range(r.first_pn, r.first_pn + r.k)
    }  # closed with repairs: marked until the last repair leaves
    return [
        pn
        for pn, p in conn._sent.items()
        if p.protect_until == _OPEN_BLOCK and pn not in block and pn not in waiting
    ]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([0.0, 0.01, 0.14]),
    st.integers(0, 2**16),
    st.lists(st.integers(1, 400_000), min_size=1, max_size=5),
)
def test_only_the_open_block_carries_the_open_block_mark(
    loss: float, seed: int, sizes: list[int]
) -> None:
    net = Net(OneWayPath(loss=loss, reorder=0.02), OneWayPath(loss=loss), seed=seed)
    net.run(5, lambda: net.client.established)
    sids = []
    for i, size in enumerate(sizes):
        sid = net.client.open_stream(priority=i % 2)
        net.client.send(sid, payload(f"s{i}", size), end_stream=True)
        sids.append(sid)
    end = net.now + 30
    while net.now < end and not set(sids) <= net.finished["gateway"]:
        net.run(net.now + 0.01)
        assert _stray_marks(net.client) == []
        assert _stray_marks(net.gateway) == []
    assert set(sids) <= net.finished["gateway"]
