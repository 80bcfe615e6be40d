"""calc entries for real-time streaming (§12.1.2) and the propagation floor (§12.1.4)."""

from __future__ import annotations

from tierwise.calc._registry import Param, calc
from tierwise.errors import ScenarioError, UnitError, shown
from tierwise.model import path, stream
from tierwise.units import parse_quantity

BITS_PER_BYTE = 8


@calc(
    "stream",
    "Per-chunk compute, send, arrival and playback of a real-time audio stream",
    "§12.1.2",
    Param("chunks", "int", "number of chunks", 6),
    Param("period", "time", "audio per chunk τ (chunk i is ready at (i+1)·τ)", "20 ms"),
    Param("compute", "list:time", "model time per chunk m (one value or one per chunk)", "12 ms"),
    Param("send", "list:time", "send time per chunk s (one value or one per chunk)", "1 ms"),
    Param("propagation", "list:time", "one-way propagation d (one value or one per chunk)", "5 ms"),
    Param("override", "list:str", "per-chunk propagation, INDEX=TIME, 0-based ('2=50 ms')", ""),
    Param("buffer", "time", "initial playout buffer J", "40 ms"),
)
def stream_calc(chunks, period, compute, send, propagation, override, buffer):
    """p_0 = r_0 + J, p_i = max(r_i, p_{i−1} + τ), where r_i = u_i + d_i arrives.

    Upstream, ``c_i = max(a_i, c_{i−1}) + m_i`` (compute) and
    ``u_i = max(c_i, u_{i−1}) + s_i`` (send); chunk ``i`` is ready at
    ``a_i = (i+1)·τ``. Playback waits for late chunks: ``stall_s`` is the total
    wait and ``min_buffer_s`` the smallest ``J`` that avoids it.
    """
    ready = stream.capture_ready_s(chunks, period)
    delays = _with_overrides(propagation, override, chunks)
    pipe = stream.pipeline(ready, compute, send, delays)
    play = stream.playout(pipe.arrive_s, period, buffer)
    return {
        "first_play_s": play.first_play_s,
        "stall_s": play.total_stall_s,
        "end_s": play.end_s,
        "min_buffer_s": stream.min_buffer_s(pipe.arrive_s, period),
        "ready_s": pipe.ready_s.tolist(),
        "compute_done_s": pipe.compute_done_s.tolist(),
        "send_done_s": pipe.send_done_s.tolist(),
        "arrive_s": pipe.arrive_s.tolist(),
        "play_s": play.play_s.tolist(),
        "chunk_stall_s": play.stall_s.tolist(),
    }


def _with_overrides(propagation: list[float], override: list[str], chunks: int) -> list[float]:
    """Per-chunk propagation: ``propagation`` broadcast to ``chunks``, then ``INDEX=TIME`` items."""
    if len(propagation) not in (1, chunks):
        raise ScenarioError(
            f"--propagation: give one value or one per chunk ({chunks}), got {len(propagation)}",
            source="calc",
        )
    delays = list(propagation) * chunks if len(propagation) == 1 else list(propagation)
    seen: set[int] = set()
    for item in override:
        index, delay = _parse_override(item, chunks)
        if index in seen:
            raise ScenarioError(f"--override: chunk {index} given twice", source="calc")
        seen.add(index)
        delays[index] = delay
    return delays


def _parse_override(item: str, chunks: int) -> tuple[int, float]:
    text, eq, value = str(item).partition("=")
    if not eq or not text.strip().isdigit() or len(text.strip()) > 9:
        raise ScenarioError(
            f"--override: expected INDEX=TIME such as '2=50 ms', got {shown(item)}", source="calc"
        )
    index = int(text)
    if index >= chunks:
        raise ScenarioError(
            f"--override: chunk index {index} is outside 0..{chunks - 1}", source="calc"
        )
    try:
        return index, parse_quantity(value, "time")
    except UnitError as exc:
        raise ScenarioError(f"--override: {exc}", source="calc") from exc


@calc(
    "pcm-rate",
    "Data rate of PCM audio and the bytes in one chunk",
    "§12.1.2",
    Param("sample_rate", "frequency", "samples per second per channel f_s", "24 kHz"),
    Param("channels", "int", "number of channels", 1),
    Param("bits", "int", "bits per sample", 16),
    Param("chunk", "time", "audio per chunk", "20 ms"),
)
def pcm_rate(sample_rate, channels, bits, chunk):
    """P = f_s · channels · bits; chunk bytes = P · T / 8."""
    rate_bits = stream.pcm_rate_bits_per_s(sample_rate, channels, bits)
    return {
        "rate_bytes_per_s": rate_bits / BITS_PER_BYTE,
        "chunk_bytes": stream.chunk_bytes(chunk, sample_rate, channels, bits),
        "samples_per_chunk": sample_rate * chunk,
    }


@calc(
    "buffer-drain",
    "When a playout buffer runs dry if audio arrives slower than it plays",
    "§12.1.2, exercise 12-5(c)",
    Param("buffer", "time", "audio held in the buffer J", "60 ms"),
    Param("play", "rate", "rate playback consumes P", "256 kbit/s"),
    Param("receive", "rate", "rate the network delivers R", "130 kbit/s"),
)
def buffer_drain(buffer, play, receive):
    """T = J·P / (P − R); never (∞) when R ≥ P."""
    play_bits, receive_bits = play * BITS_PER_BYTE, receive * BITS_PER_BYTE
    held_bits = stream.buffer_bits(buffer, play_bits)
    return {
        "drain_s": stream.buffer_drain_s(buffer, play_bits, receive_bits),
        "buffered_bits": held_bits,
        "buffered_bytes": held_bits / BITS_PER_BYTE,
        "deficit_bytes_per_s": max(0.0, play - receive),
    }


@calc(
    "propagation",
    "Round-trip propagation floor over a one-way distance, and the reach of an RTT budget",
    "§12.1.4",
    Param("distance", "length", "one-way path length d", "10000 km"),
    Param("deadline", "time", "budget for the reply's round trip", "50 ms"),
    Param(
        "speed_m_per_s",
        "float",
        "signal speed v in m/s (light in fibre ≈ 2e8)",
        path.FIBRE_SPEED_M_PER_S,
    ),
)
def propagation(distance, deadline, speed_m_per_s):
    """RTT ≥ 2d / v; the farthest server a deadline allows is v·deadline / 2."""
    rtt = path.propagation_rtt_s(distance, speed_m_per_s)
    return {
        "rtt_s": rtt,
        "one_way_s": path.propagation_one_way_s(distance, speed_m_per_s),
        "meets_deadline": bool(rtt <= deadline),
        "max_distance_m": path.max_distance_m(deadline, speed_m_per_s),
    }
