"""Unit and property tests for the streaming pipeline and playout buffer (§12.1.2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tierwise.errors import ModelError
from tierwise.model import stream

MS = 1e-3

arrivals = st.lists(
    st.floats(min_value=0.0, max_value=1.0, allow_nan=False), min_size=1, max_size=30
).map(np.array)
periods = st.floats(min_value=1 * MS, max_value=100 * MS)
buffers = st.floats(min_value=0.0, max_value=0.5)


def test_capture_ready_is_end_of_each_chunk():
    """Chunk i is ready when its capture ends, (i+1)·τ."""
    assert stream.capture_ready_s(3, 20 * MS) == pytest.approx([0.02, 0.04, 0.06])


@pytest.mark.parametrize("chunks", [0, -1, 2.5, True])
def test_capture_ready_refuses_bad_chunk_count(chunks):
    """A chunk count must be an integer ≥ 1."""
    with pytest.raises(ModelError, match="chunk count"):
        stream.capture_ready_s(chunks, 20 * MS)


def test_pipeline_broadcasts_scalars():
    """Scalar compute/send/propagation equal the same value repeated per chunk."""
    ready = stream.capture_ready_s(4, 20 * MS)
    a = stream.pipeline(ready, 12 * MS, 1 * MS, 5 * MS)
    b = stream.pipeline(ready, [12 * MS] * 4, [1 * MS] * 4, [5 * MS] * 4)
    for field in ("ready_s", "compute_done_s", "send_done_s", "arrive_s"):
        np.testing.assert_allclose(getattr(a, field), getattr(b, field))
    np.testing.assert_allclose(a.arrive_s, [0.038, 0.058, 0.078, 0.098])


def test_pipeline_queues_behind_a_slow_chunk():
    """A chunk waits for the processor and then for the outgoing link."""
    p = stream.pipeline([0.0, 0.0, 0.0], [0.3, 0.1, 0.1], [0.05, 0.5, 0.05], 0.0)
    np.testing.assert_allclose(p.compute_done_s, [0.3, 0.4, 0.5])
    np.testing.assert_allclose(p.send_done_s, [0.35, 0.9, 0.95])


def test_pipeline_refuses_wrong_length():
    """A per-chunk list must have one entry per chunk."""
    with pytest.raises(ModelError, match="one per chunk"):
        stream.pipeline([0.02, 0.04], [0.01, 0.01, 0.01], 0.0, 0.0)


@pytest.mark.parametrize(
    "args",
    [
        ([-0.02], 0.01, 0.0, 0.0),
        ([0.02], -0.01, 0.0, 0.0),
        ([0.02], 0.01, -0.001, 0.0),
        ([0.02], 0.01, 0.0, [-0.005]),
        ([0.02], 0.01, 0.0, math.nan),
        ([], 0.01, 0.0, 0.0),
        ([[0.02]], 0.01, 0.0, 0.0),
    ],
)
def test_pipeline_refuses_out_of_domain(args):
    """Negative or non-finite times and empty or 2-D chunk lists are ModelErrors."""
    with pytest.raises(ModelError):
        stream.pipeline(*args)


@pytest.mark.parametrize(
    "args",
    [([0.01], 0.0, 0.0), ([0.01], -0.02, 0.0), ([0.01], 0.02, -0.001), ([-0.01], 0.02, 0.0)],
)
def test_playout_refuses_out_of_domain(args):
    """Zero or negative period, negative buffer or negative arrival are ModelErrors."""
    with pytest.raises(ModelError):
        stream.playout(*args)


def test_min_buffer_refuses_zero_period():
    """A zero period has no playback schedule."""
    with pytest.raises(ModelError, match="period"):
        stream.min_buffer_s([0.01, 0.02], 0.0)


def test_playout_waits_for_a_late_chunk():
    """p_i = max(r_i, p_{i−1} + τ); the stall is the difference when r_i wins."""
    play = stream.playout([0.0, 0.5, 0.1], 0.1, 0.2)
    np.testing.assert_allclose(play.play_s, [0.2, 0.5, 0.6])
    np.testing.assert_allclose(play.stall_s, [0.0, 0.2, 0.0])
    assert play.first_play_s == pytest.approx(0.2)
    assert play.total_stall_s == pytest.approx(0.2)
    assert play.end_s == pytest.approx(0.7)


def test_pcm_rate_and_chunk_bytes():
    """f_s · channels · bits, and bytes for a duration."""
    assert stream.pcm_rate_bits_per_s(48_000, 2, 16) == 1_536_000
    assert stream.chunk_bytes(0.01, 48_000, 2, 24) == pytest.approx(2880)


@pytest.mark.parametrize("args", [(0, 1, 16), (16_000, 0, 16), (16_000, 1, -16)])
def test_pcm_rate_refuses_non_positive(args):
    """Sample rate, channels and bits must all be > 0."""
    with pytest.raises(ModelError):
        stream.pcm_rate_bits_per_s(*args)


def test_buffer_drain_is_infinite_without_deficit():
    """When the network keeps up, the buffer never runs dry."""
    assert stream.buffer_drain_s(0.06, 256_000, 256_000) == math.inf
    assert stream.buffer_drain_s(0.06, 256_000, 1e6) == math.inf


def test_buffer_drain_vectorises():
    """Arrays of buffers and receive rates broadcast; each entry follows J·P/(P−R)."""
    got = stream.buffer_drain_s(np.array([0.06, 0.12, 0.06]), 256_000, np.array([0, 0, 300_000]))
    np.testing.assert_allclose(got, [0.06, 0.12, math.inf])


def test_buffer_drain_refuses_negative_buffer():
    """A negative amount of buffered audio is outside the model."""
    with pytest.raises(ModelError):
        stream.buffer_drain_s(-0.06, 256_000, 130_000)


@given(arrivals, periods, buffers, buffers)
def test_larger_buffer_never_adds_stall(arrive, period, small, extra):
    """Total stall is non-increasing in the initial buffer."""
    less = stream.playout(arrive, period, small).total_stall_s
    more = stream.playout(arrive, period, small + extra).total_stall_s
    assert more <= less + 1e-9


@given(arrivals, periods, buffers, st.data())
def test_later_arrival_never_plays_earlier(arrive, period, buffer, data):
    """Delaying one chunk's arrival never moves any playback start earlier."""
    index = data.draw(st.integers(0, arrive.size - 1))
    delay = data.draw(st.floats(0.0, 0.5))
    later = arrive.copy()
    later[index] += delay
    before = stream.playout(arrive, period, buffer).play_s
    after = stream.playout(later, period, buffer).play_s
    assert np.all(after >= before - 1e-9)


@given(arrivals, periods)
def test_min_buffer_is_exactly_enough(arrive, period):
    """min_buffer_s plays without stalls; 1 ms less stalls whenever it is positive."""
    need = stream.min_buffer_s(arrive, period)
    assert stream.playout(arrive, period, need).total_stall_s <= 1e-9
    assume(need >= 1 * MS)
    short = stream.playout(arrive, period, need - 1 * MS)
    assert short.total_stall_s == pytest.approx(1 * MS, abs=1e-9)


@given(arrivals, periods, buffers)
def test_total_stall_is_the_missing_buffer(arrive, period, buffer):
    """Total stall equals max(0, J* − J): every shortfall of buffer is paid once."""
    need = stream.min_buffer_s(arrive, period)
    stall = stream.playout(arrive, period, buffer).total_stall_s
    assert stall == pytest.approx(max(0.0, need - buffer), abs=1e-9)


@given(
    st.lists(st.floats(0.0, 0.1), min_size=1, max_size=20),
    st.lists(st.floats(0.0, 0.1), min_size=1, max_size=20),
)
def test_pipeline_matches_the_recursion(ready_gaps, service):
    """The vectorised servers agree with the literal recursion c_i = max(a_i, c_{i−1}) + m_i."""
    n = min(len(ready_gaps), len(service))
    ready = np.cumsum(ready_gaps[:n])
    compute = np.array(service[:n])
    expected, last = [], -math.inf
    for a, m in zip(ready, compute, strict=True):
        last = max(a, last) + m
        expected.append(last)
    got = stream.pipeline(ready, compute, 0.0, 0.0).compute_done_s
    np.testing.assert_allclose(got, expected, atol=1e-12)
