"""Several streams on one connection: sans-IO scheduler and delivery, and simulated (§12.3.4).

The §12.3.4 example is scaled by ``U`` (one "second" of the text is 1/16 s here)
so that a 100 ms-class RTT keeps the recovery of a lost segment within the run:
the image needs 5 U of sending from 0, the audio 1 U from 2 U. Segments of
1,024 bytes at 1,048,576 B/s make every link departure an exact binary fraction.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierwise.errors import LocalProtocolError, SimulationError
from tierwise.model import multiplex as model
from tierwise.proto.rangeset import RangeSet
from tierwise.proto.streams import Chunk, StreamData, StreamDelivery, StreamScheduler
from tierwise.sim.streaming import StreamWrite, run_streams
from tierwise.sim.workloads import PathSpec, TcpSpec

SEG = 1024  # bytes per segment
RATE = 1024 * 1024  # bytes/s: one segment per 1/1024 s
U = 1 / 16  # seconds per "second" of the §12.3.4 example
D = 3 / 64  # one-way propagation (RTT 93.75 ms: the 200 ms RTO floor never fires spuriously)
IMAGE, AUDIO = int(5 * U * RATE), int(U * RATE)
PATH = PathSpec(up_rate=RATE, down_rate=RATE, rtt=2 * D)
# A window that never binds and never shrinks: the fluid setting of link_schedule.
FLUID = TcpSpec(cc="slowstart", mss=SEG, header=0, ack_bytes=40, initial_window=100_000)
WRITES = [StreamWrite(0.0, "image", IMAGE, 1), StreamWrite(2 * U, "audio", AUDIO, 0)]
FLOWS = [model.Flow("image", 0.0, 5 * U, 1), model.Flow("audio", 2 * U, U, 0)]
LAST_IMAGE_BEFORE_AUDIO = (int(2 * U * RATE) // SEG - 1) * SEG  # stream offset


# ------------------------------------------------------------------ sans-IO scheduler


def test_fifo_serves_writes_in_order_whatever_the_priority():
    """FIFO drains the first write before the second, even if the second is more urgent."""
    s = StreamScheduler("fifo")
    s.write("image", 2500, priority=1)
    s.write("audio", 1000, priority=0)
    chunks = [s.next_chunk(1000) for _ in range(4)]
    assert [(c.stream, c.start, c.end) for c in chunks] == [
        ("image", 0, 1000),
        ("image", 1000, 2000),
        ("image", 2000, 2500),
        ("audio", 2500, 3500),
    ]
    assert s.next_chunk(1000) is None
    assert s.pending_bytes == 0 and s.offset == 3500


def test_priority_preempts_at_the_next_chunk_and_resumes():
    """An urgent write takes the next chunk; the bulk stream resumes at its own offset."""
    s = StreamScheduler("priority")
    s.write("image", 3000, priority=1)
    first = s.next_chunk(1000)
    s.write("audio", 1500, priority=0)
    rest = [s.next_chunk(1000) for _ in range(4)]
    assert first == Chunk("image", 0, 0, 1000)
    assert rest == [
        Chunk("audio", 0, 1000, 2000),
        Chunk("audio", 1000, 2000, 2500),
        Chunk("image", 1000, 2500, 3500),
        Chunk("image", 2000, 3500, 4500),
    ]
    assert s.ranges("image") == [(0, 1000), (2500, 4500)]
    assert s.ranges("audio") == [(1000, 2500)]
    assert s.written == {"image": 3000, "audio": 1500}


def test_priority_ties_go_to_the_oldest_write_and_writes_reprioritise():
    """Equal urgency: the stream waiting longest; a later write changes the stream's urgency."""
    s = StreamScheduler("priority")
    s.write("a", 100, priority=2)
    s.write("b", 100, priority=2)
    assert s.next_chunk(50).stream == "a"
    s.write("b", 0, priority=1)  # a zero-byte write only re-prioritises
    assert [s.next_chunk(50).stream for _ in range(3)] == ["b", "b", "a"]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: StreamScheduler("wfq"), "known: fifo, priority"),
        (lambda: StreamScheduler().write("a", -1), "bytes written"),
        (lambda: StreamScheduler().write("a", 1, priority=True), "priority"),
        (lambda: StreamScheduler().next_chunk(0), "chunk size"),
        (lambda: StreamDelivery("packet"), "known: connection, stream"),
        (lambda: Chunk("a", 0, 5, 5), "start < end"),
    ],
)
def test_misuse_is_a_local_protocol_error(call, match):
    """Bad policies, sizes and chunks raise LocalProtocolError naming the problem."""
    with pytest.raises(LocalProtocolError, match=match):
        call()


# ------------------------------------------------------------------- sans-IO delivery


def _three_chunks(order: str) -> StreamDelivery:
    d = StreamDelivery(order)
    for c in (Chunk("a", 0, 0, 10), Chunk("b", 0, 10, 20), Chunk("a", 10, 20, 30)):
        d.expect(c)
    return d


def test_a_gap_blocks_every_stream_in_connection_order():
    """Head of line: b's complete chunk waits behind a's missing first bytes."""
    d = _three_chunks("connection")
    assert d.update(RangeSet([(10, 30)]), 1.0) == []
    events = d.update(RangeSet([(0, 30)]), 2.0)
    assert events == [
        StreamData("a", 0, 10, 2.0),
        StreamData("b", 0, 10, 2.0),
        StreamData("a", 10, 20, 2.0),
    ]
    assert d.delivered_s == [2.0, 2.0, 2.0]


def test_a_gap_blocks_only_its_own_stream_in_stream_order():
    """Per stream: b goes at once; a's second chunk still waits for a's first."""
    d = _three_chunks("stream")
    assert d.update(RangeSet([(10, 30)]), 1.0) == [StreamData("b", 0, 10, 1.0)]
    assert d.update(RangeSet([(0, 30)]), 2.0) == [
        StreamData("a", 0, 10, 2.0),
        StreamData("a", 10, 20, 2.0),
    ]
    assert d.delivered == {"a": 20, "b": 10}
    assert d.delivered_s == [2.0, 1.0, 2.0]


def test_contiguous_prefix_counts_as_arrived():
    """A TCP receiver's rcv_nxt plus its out-of-order ranges describe what arrived."""
    d = _three_chunks("connection")
    assert len(d.update(RangeSet([(20, 30)]), 1.0, contiguous=20)) == 3


def test_expect_refuses_a_chunk_out_of_place():
    """Chunks must continue both the connection and their stream."""
    d = StreamDelivery()
    d.expect(Chunk("a", 0, 0, 10))
    with pytest.raises(LocalProtocolError, match="does not continue"):
        d.expect(Chunk("a", 0, 10, 20))
    with pytest.raises(LocalProtocolError, match="does not continue"):
        d.expect(Chunk("b", 0, 11, 20))


@given(
    st.lists(st.sampled_from("abc"), min_size=1, max_size=12),
    st.data(),
)
def test_delivery_matches_the_closed_form_for_any_arrival_order(streams, data):
    """Fed arrivals one by one, both orders equal model.multiplex.delivery_times exactly."""
    n = len(streams)
    arrivals = data.draw(st.lists(st.integers(0, 20), min_size=n, max_size=n))
    for order in ("connection", "stream"):
        d, sched = StreamDelivery(order), StreamScheduler()
        for s in streams:
            sched.write(s, 10)
            d.expect(sched.next_chunk(10))
        arrived = RangeSet()
        for i in sorted(range(n), key=lambda k: arrivals[k]):
            arrived.add(10 * i, 10 * i + 10)
            d.update(arrived, float(arrivals[i]))
        expected = model.delivery_times(list(zip(streams, arrivals, strict=True)), order)
        assert d.delivered_s == expected.segment_s.tolist()


# --------------------------------------------------------------------- simulated


@pytest.mark.parametrize(
    ("policy", "image_u", "audio_u"), [("fifo", 5.0, 6.0), ("priority", 6.0, 3.0)]
)
def test_link_schedule_of_section_12_3_4_is_reproduced_exactly(policy, image_u, audio_u):
    """§12.3.4: FIFO image 5 / audio 6; audio first 3 / 6 — as link_schedule gives."""
    r = run_streams(PATH, FLUID, WRITES, policy)
    assert r.sent_done_s == model.link_schedule(FLOWS, policy)
    assert r.sent_done_s == {"image": image_u * U, "audio": audio_u * U}
    assert r.complete_s == {"image": image_u * U + D, "audio": audio_u * U + D}
    assert r.retransmissions == 0


def test_priority_needs_the_decision_at_the_bottleneck():
    """With every byte queued at the link at once, 'priority' degenerates to FIFO."""
    r = run_streams(PATH, FLUID, WRITES, "priority", notsent_lowat_bytes=float("inf"))
    assert r.sent_done_s == model.link_schedule(FLOWS, "fifo")


def test_off_boundary_priority_is_within_one_segment_of_the_fluid_schedule():
    """A write between segment boundaries waits for the segment on the link, no more."""
    writes = [StreamWrite(0.0, "image", IMAGE, 1), StreamWrite(2 * U + 0.3 / 1024, "audio", AUDIO)]
    flows = [FLOWS[0], model.Flow("audio", 2 * U + 0.3 / 1024, U, 0)]
    r = run_streams(PATH, FLUID, writes, "priority")
    fluid = model.link_schedule(flows, "priority")
    for name, t in r.sent_done_s.items():
        assert fluid[name] - 1e-12 <= t <= fluid[name] + 1 / 1024 + 1e-12


@pytest.mark.parametrize("order", ["connection", "stream"])
def test_one_lost_image_segment_matches_delivery_times_exactly(order):
    """Simulated hand-over times equal delivery_times() of the simulated arrivals."""
    r = run_streams(PATH, FLUID, WRITES, "priority", order, lose=[("image", 1_000)])
    assert r.retransmissions == 1
    expected = model.delivery_times(r.segments(), order)
    np.testing.assert_array_equal(r.deliver_s, expected.segment_s)


def test_head_of_line_blocking_of_section_12_3_4():
    """The audio is complete at 3 U + d; in connection order it waits for the image's gap.

    The image segment sent just before the audio is lost and recovered one RTT
    after the audio's first segment is acknowledged: figures 12-19 and 12-20.
    """
    lose = [("image", LAST_IMAGE_BEFORE_AUDIO)]
    hol = run_streams(PATH, FLUID, WRITES, "priority", "connection", lose=lose)
    per_stream = run_streams(PATH, FLUID, WRITES, "priority", "stream", lose=lose)
    audio_complete = 3 * U + D
    assert hol.complete_s["audio"] == per_stream.complete_s["audio"] == audio_complete
    assert per_stream.delivered_s["audio"] == audio_complete
    lost = next(i for i, c in enumerate(hol.chunks) if c.stream_offset == lose[0][1])
    recovered = hol.arrive_s[lost]
    assert hol.chunks[lost].stream == "image"
    # Detected when the first audio segment's SACK returns (2U + 1 segment + RTT + the
    # ACK's 40 bytes); resent after the segment then on the link; one-way propagation.
    assert recovered == 2 * U + 3 / 1024 + 3 * D
    assert hol.delivered_s["audio"] == recovered > audio_complete
    assert hol.delivered_s["image"] == per_stream.delivered_s["image"]


def test_same_seed_same_run():
    """Deterministic: two runs give identical per-chunk times."""
    a = run_streams(PATH, FLUID, WRITES, "priority", "stream", seed=3)
    b = run_streams(PATH, FLUID, WRITES, "priority", "stream", seed=3)
    np.testing.assert_array_equal(a.deliver_s, b.deliver_s)
    assert a.events == b.events


def test_run_streams_refuses_nothing_to_send():
    """No writes is a SimulationError, not an empty result."""
    with pytest.raises(SimulationError, match="at least one write"):
        run_streams(PATH, FLUID, [])
