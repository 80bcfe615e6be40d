"""Streaming playout (§12.1.2) and agent rounds (§12.1.3, §12.3.2) simulated vs the closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from tierwise.errors import SimulationError
from tierwise.model import loop, stream
from tierwise.model import transport as tm
from tierwise.sim.streaming import run_rounds, run_stream
from tierwise.sim.workloads import PathSpec, TcpSpec

MS = 1e-3
# §12.1.2: 20 ms chunks of 960 bytes (24 kHz mono 16-bit), 12 ms of compute, 1 ms of
# sending (960 bytes at 960,000 B/s), 5 ms one-way, 40 ms initial buffer.
CHUNKS, TAU, CHUNK, COMPUTE, BUFFER = 8, 20 * MS, 960, 12 * MS, 40 * MS
AUDIO_PATH = PathSpec(up_rate=960_000, down_rate=960_000, rtt=10 * MS)
BARE = TcpSpec(mss=1448, header=0)
LATE = {2: 50 * MS}  # chunk 2 (the text's third) takes 50 ms


def _model(propagation_s, send_s=1 * MS, buffer_s=BUFFER):
    pipe = stream.pipeline(stream.capture_ready_s(CHUNKS, TAU), COMPUTE, send_s, propagation_s)
    return pipe, stream.playout(pipe.arrive_s, TAU, buffer_s)


def _delays(late: bool) -> np.ndarray:
    d = np.full(CHUNKS, 5 * MS)
    if late:
        d[2] = 50 * MS
    return d


# ---------------------------------------------------------------------- playout


@pytest.mark.parametrize("transport", ["datagram", "tcp"])
def test_clean_path_matches_pipeline_and_playout(transport):
    """§12.1.2 / figure 12-5: ready 20, computed 32, sent 33, arrives 38, plays at 78 ms."""
    r = run_stream(AUDIO_PATH, BARE, CHUNKS, TAU, CHUNK, COMPUTE, BUFFER, transport=transport)
    pipe, play = _model(_delays(False))
    np.testing.assert_allclose(r.compute_done_s, pipe.compute_done_s, atol=1e-12)
    np.testing.assert_allclose(r.send_done_s, pipe.send_done_s, atol=1e-12)
    np.testing.assert_allclose(r.arrive_s, pipe.arrive_s, atol=1e-12)
    np.testing.assert_allclose(r.play_s, play.play_s, atol=1e-12)
    assert r.first_play_s == pytest.approx(78 * MS)
    assert r.arrive_s[1] == pytest.approx(58 * MS)
    assert r.play_s[1] == pytest.approx(98 * MS)
    assert r.total_stall_s == 0.0


def test_one_late_chunk_stalls_playback_5_ms():
    """§12.1.2 / figure 12-6: chunk 2 at 50 ms arrives at 123 ms, 5 ms after its slot."""
    r = run_stream(
        AUDIO_PATH, BARE, CHUNKS, TAU, CHUNK, COMPUTE, BUFFER, propagation_overrides_s=LATE
    )
    pipe, play = _model(_delays(True))
    np.testing.assert_allclose(r.arrive_s, pipe.arrive_s, atol=1e-12)
    np.testing.assert_allclose(r.play_s, play.play_s, atol=1e-12)
    assert r.arrive_s[2] == pytest.approx(123 * MS)
    assert r.arrive_s[3] == pytest.approx(98 * MS)  # early, but must wait for chunk 2
    assert r.total_stall_s == pytest.approx(5 * MS)
    assert r.stall_s[2] == pytest.approx(5 * MS)
    np.testing.assert_allclose(r.play_s[2:] - (78 * MS + np.arange(2, CHUNKS) * TAU), 5 * MS)


def test_a_45_ms_buffer_absorbs_the_late_chunk():
    """§12.1.2: a 45 ms buffer plays chunk 2 at 123 ms — no stall, first play 5 ms later."""
    r = run_stream(
        AUDIO_PATH, BARE, CHUNKS, TAU, CHUNK, COMPUTE, 45 * MS, propagation_overrides_s=LATE
    )
    assert r.total_stall_s == 0.0
    assert r.first_play_s == pytest.approx(83 * MS)
    assert r.play_s[2] == pytest.approx(123 * MS)


def test_tcp_holds_later_chunks_behind_the_late_one():
    """In one byte stream chunks 3 and 4 wait for chunk 2 (123 ms); playback stalls the same 5 ms.

    Chunk 3's SACK makes the sender retransmit chunk 2 (the RACK rule); the copy
    takes the same slow path, so the first copy still lands first.
    """
    r = run_stream(
        AUDIO_PATH,
        BARE,
        CHUNKS,
        TAU,
        CHUNK,
        COMPUTE,
        BUFFER,
        propagation_overrides_s=LATE,
        transport="tcp",
    )
    np.testing.assert_allclose(r.arrive_s[2:5], 123 * MS, atol=1e-12)
    assert r.total_stall_s == pytest.approx(5 * MS)
    assert r.retransmissions >= 1


def test_packetisation_error_is_the_headers_on_the_wire():
    """500-byte payloads with 40-byte headers: 2 packets, 80 extra bytes per chunk.

    The model with ``s = chunk/rate`` is early by the headers' sending time; with
    ``s = wire/rate`` it is exact (the link never saturates).
    """
    tcp = TcpSpec(mss=500, header=40)
    r = run_stream(AUDIO_PATH, tcp, CHUNKS, TAU, CHUNK, COMPUTE, BUFFER)
    pipe, _ = _model(_delays(False))
    header_s = 2 * 40 / 960_000
    np.testing.assert_allclose(r.arrive_s - pipe.arrive_s, header_s, atol=1e-12)
    exact, _ = _model(_delays(False), send_s=(CHUNK + 80) / 960_000)
    np.testing.assert_allclose(r.arrive_s, exact.arrive_s, atol=1e-12)


def test_a_lost_datagram_stops_a_waiting_player_loudly():
    """A player that waits forever for a lost chunk is an error, not a silent result."""
    lossy = PathSpec(up_rate=960_000, down_rate=960_000, rtt=10 * MS, down_loss=0.5)
    with pytest.raises(SimulationError, match="never played"):
        run_stream(lossy, BARE, CHUNKS, TAU, CHUNK, COMPUTE, BUFFER, seed=1)


@pytest.mark.parametrize(
    "kwargs",
    [{"transport": "quic"}, {"direction": "sideways"}, {"propagation_overrides_s": {2: 1 * MS}}],
)
def test_bad_stream_parameters_are_refused(kwargs):
    """Unknown transport or direction, or an override faster than the path, is refused."""
    with pytest.raises(SimulationError):
        run_stream(AUDIO_PATH, BARE, CHUNKS, TAU, CHUNK, COMPUTE, BUFFER, **kwargs)


# ------------------------------------------------------------------------- rounds

# §12.1.3 screenshot agent: 0.8 MB up at 6.4 Mbit/s, 0.3 s client, 2.0 s model, 200 ms RTT.
UP = 6.4e6 / 8
DOWN = 100e6 / 8
AGENT_PATH = PathSpec(up_rate=UP, down_rate=DOWN, rtt=0.2)
AGENT_TCP = TcpSpec(cc="newreno", mss=1448, header=0, ack_bytes=52)
IW_BYTES = 10 * 1448


def _stalled_rounds(size, rate, rtt, window):
    """Rounds ``slow_start_send_s`` charges a full RTT for (the ``k`` of its docstring)."""
    sent, k, bdp = 0.0, 0, rate * rtt
    while window < bdp and size - sent > window:
        sent, k, window = sent + window, k + 1, 2 * window
    return k


def _slow_start_s(size, rate, reverse_rate, start_window=IW_BYTES):
    """Closed-form window wait plus its packetisation error.

    Each stalled round lasts one RTT plus the first segment's and its ACK's sending
    time (the model's round is exactly one RTT).
    """
    wait = tm.window_wait_s(size, rate, 0.2, 10, 1448, start_window_bytes=start_window)
    k = _stalled_rounds(size, rate, 0.2, start_window)
    return wait + k * (1448 / rate + 52 / reverse_rate)


def test_kept_window_pays_slow_start_once():
    """Round 1 = 3.5 s + the slow-start wait; later rounds are §12.1.3's 3.5 s exactly."""
    r = run_rounds(AGENT_PATH, AGENT_TCP, 5, 800_000, 0, 0.3, 2.0)
    base = loop.round_time_s(0.3, 2.0, 800_000 / UP, 0.2)
    assert base == pytest.approx(3.5)
    assert r.round_s[0] == pytest.approx(base + _slow_start_s(800_000, UP, DOWN), abs=1e-9)
    np.testing.assert_allclose(r.round_s[1:], base, atol=1e-9)
    assert r.time_s == pytest.approx(float(r.round_s.sum()))
    assert np.all(np.diff(r.window_bytes) > 0)  # the window only grows: no restart


def test_idle_restart_pays_slow_start_every_round():
    """RFC 5681 restart after > 1 RTO idle: every round starts from IW and waits again."""
    r = run_rounds(AGENT_PATH, AGENT_TCP, 4, 800_000, 2_000_000, 0.3, 2.0, idle_restart=True)
    base = loop.round_time_s(0.3, 2.0, 800_000 / UP, 0.2, 2_000_000 / DOWN)
    start = tm.window_after_idle(4e6, 2.5, 0.25, IW_BYTES, restart=True)
    assert start == IW_BYTES
    waits = _slow_start_s(800_000, UP, DOWN) + _slow_start_s(2_000_000, DOWN, UP)
    np.testing.assert_allclose(r.round_s, base + waits, atol=1e-9)
    np.testing.assert_array_equal(r.window_bytes, IW_BYTES)
    np.testing.assert_array_equal(r.server_window_bytes, IW_BYTES)


def test_headers_add_their_sending_time_to_each_round():
    """52-byte headers on 553 segments add 553 × 52 B / 0.8 MB/s = 36 ms to a kept-window round."""
    tcp = TcpSpec(cc="newreno", mss=1448, header=52, ack_bytes=52)
    r = run_rounds(AGENT_PATH, tcp, 3, 800_000, 0, 0.3, 2.0)
    assert r.round_s[1] == pytest.approx(3.5 + 553 * 52 / UP, abs=1e-9)


def test_rounds_refuse_nonsense():
    """Zero rounds is refused."""
    with pytest.raises(SimulationError):
        run_rounds(AGENT_PATH, AGENT_TCP, 0, 800_000, 0, 0.3, 2.0)
