"""Real-time streaming: a per-chunk pipeline feeding a playout buffer (§12.1.2).

Times are seconds counted from the start of capturing chunk 0. PCM rates and
buffer contents are in bits and bits/s, not the bytes used elsewhere, because the
reference reasons in bits ("256 kbit/s", "15,360 bits"); divide by 8 for bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tierwise.errors import ModelError
from tierwise.model._check import ArrayLike, nonneg, positive

__all__ = [
    "MAX_CHUNKS",
    "STALL_RESOLUTION_S",
    "Playout",
    "StreamPipeline",
    "buffer_bits",
    "buffer_drain_s",
    "capture_ready_s",
    "chunk_bytes",
    "chunk_count",
    "min_buffer_s",
    "pcm_rate_bits_per_s",
    "pipeline",
    "playout",
]

MAX_CHUNKS = 1_000_000  # a stream is modelled chunk by chunk: one array entry (or flow) each

STALL_RESOLUTION_S = (
    1e-12  # seconds; lateness below this is float rounding of the inputs, not a stall
)


@dataclass(frozen=True, eq=False)
class StreamPipeline:
    """Per-chunk event times of the streaming pipeline (seconds from the start of capture)."""

    ready_s: np.ndarray
    compute_done_s: np.ndarray
    send_done_s: np.ndarray
    arrive_s: np.ndarray


@dataclass(frozen=True, eq=False)
class Playout:
    """When each chunk starts to play and how long playback waited for it."""

    play_s: np.ndarray
    stall_s: np.ndarray
    period_s: float

    @property
    def first_play_s(self) -> float:
        """When chunk 0 starts to play."""
        return float(self.play_s[0])

    @property
    def total_stall_s(self) -> float:
        """Total time playback waited for late chunks."""
        return float(self.stall_s.sum())

    @property
    def end_s(self) -> float:
        """When the last chunk finishes playing."""
        return float(self.play_s[-1] + self.period_s)


def capture_ready_s(chunks: int, period_s: float) -> np.ndarray:
    """Ready times ``a_i = (i+1)·τ``: a chunk is ready when its capture ends (§12.1.2).

    Chunk 0 of 20 ms audio is ready at 20 ms.
    """
    chunks = chunk_count(chunks, 1)
    positive("chunk period", period_s)
    return np.arange(1, chunks + 1, dtype=float) * period_s


def chunk_count(chunks: int, low: int = 1) -> int:
    """A chunk count: an integer from ``low`` to :data:`MAX_CHUNKS`."""
    if isinstance(chunks, bool) or not isinstance(chunks, int | np.integer) or chunks < low:
        raise ModelError(f"chunk count must be an integer ≥ {low}, got {chunks!r}")
    if chunks > MAX_CHUNKS:
        raise ModelError(
            f"a stream of {chunks:,} chunks is over the model's limit of {MAX_CHUNKS:,} "
            "(it is evaluated chunk by chunk)"
        )
    return int(chunks)


def pipeline(
    ready_s: ArrayLike, compute_s: ArrayLike, send_s: ArrayLike, propagation_s: ArrayLike
) -> StreamPipeline:
    """Chunks computed, sent and delivered in order (§12.1.2, figure 12-5).

    ``c_i = max(a_i, c_{i−1}) + m_i``, ``u_i = max(c_i, u_{i−1}) + s_i``,
    ``r_i = u_i + d_i``: the processor and the outgoing link each serve one chunk
    at a time. ``ready_s`` holds ``a_i``; ``compute_s`` (``m``), ``send_s`` (``s``)
    and ``propagation_s`` (``d``) are one value or one per chunk.
    """
    ready = _chunk_times("ready time", ready_s)
    count = ready.size
    compute = _per_chunk("compute time", compute_s, count)
    send = _per_chunk("send time", send_s, count)
    propagation = _per_chunk("propagation", propagation_s, count)
    compute_done = _serve_in_order(ready, compute)
    send_done = _serve_in_order(compute_done, send)
    return StreamPipeline(ready, compute_done, send_done, send_done + propagation)


def playout(arrive_s: ArrayLike, period_s: float, buffer_s: float) -> Playout:
    """In-order playback behind an initial buffer ``J`` (§12.1.2, figure 12-6).

    ``p_0 = r_0 + J``, ``p_i = max(r_i, p_{i−1} + τ)``; chunk ``i`` stalls playback
    by ``max(0, r_i − (p_{i−1} + τ))``. Unrolled,
    ``p_i = iτ + max(r_0 + J, max_{1≤k≤i}(r_k − kτ))``. The player waits for a
    missing chunk rather than skipping it.
    """
    arrive = _chunk_times("arrival time", arrive_s)
    positive("chunk period", period_s)
    nonneg("initial buffer", buffer_s)
    index = np.arange(arrive.size)
    slack = arrive - index * period_s
    slack[0] += buffer_s
    latest = np.maximum.accumulate(slack)
    stall = np.diff(latest, prepend=latest[0])
    stall[stall < STALL_RESOLUTION_S] = 0.0
    play = latest[0] + index * period_s + np.cumsum(stall)
    return Playout(play, stall, float(period_s))


def min_buffer_s(arrive_s: ArrayLike, period_s: float) -> float:
    """Smallest initial buffer with no stall: ``J* = max(0, max_i(r_i − r_0 − iτ))`` (§12.1.2).

    Playback then never waits, and any ``J < J*`` stalls it by ``J* − J`` in total.
    """
    arrive = _chunk_times("arrival time", arrive_s)
    positive("chunk period", period_s)
    lateness = arrive - arrive[0] - np.arange(arrive.size) * period_s
    return max(0.0, float(lateness.max()))


def pcm_rate_bits_per_s(
    sample_rate_hz: ArrayLike, channels: ArrayLike, bits: ArrayLike
) -> ArrayLike:
    """PCM data rate ``f_s · channels · bits`` in bits/s (§12.1.2: 16 kHz mono 16-bit → 256 kbit/s).

    ``bits`` is the size of one sample in bits.
    """
    positive("sample rate", sample_rate_hz)
    positive("channel count", channels)
    positive("bits per sample", bits)
    return np.multiply(np.multiply(sample_rate_hz, channels), bits)


def chunk_bytes(
    duration_s: ArrayLike, sample_rate_hz: ArrayLike, channels: ArrayLike, bits: ArrayLike
) -> ArrayLike:
    """Bytes of PCM audio lasting ``duration_s``: ``f_s · channels · bits · T / 8`` (§12.1.2).

    24 kHz mono 16-bit, 20 ms → 960 bytes.
    """
    nonneg("audio duration", duration_s)
    return np.multiply(pcm_rate_bits_per_s(sample_rate_hz, channels, bits), duration_s) / 8


def buffer_bits(buffered_audio_s: ArrayLike, play_rate_bits_per_s: ArrayLike) -> ArrayLike:
    """Bits held by ``J`` seconds of buffered audio played at ``P`` bits/s: ``J · P`` (§12.1.2).

    60 ms of 256 kbit/s PCM → 15,360 bits.
    """
    nonneg("buffered audio", buffered_audio_s)
    positive("play rate", play_rate_bits_per_s)
    return np.multiply(buffered_audio_s, play_rate_bits_per_s)


def buffer_drain_s(
    buffered_audio_s: ArrayLike,
    play_rate_bits_per_s: ArrayLike,
    receive_rate_bits_per_s: ArrayLike,
) -> ArrayLike:
    """Time until the buffer runs dry under a sustained deficit: ``J·P / (P − R)`` (§12.1.2).

    ``J`` seconds of audio played at ``P`` bits/s while only ``R`` bits/s arrive
    (figure 12-7; exercise 12-5(c)). Infinite when ``R ≥ P``: the buffer never drains.
    """
    nonneg("receive rate", receive_rate_bits_per_s)
    held = buffer_bits(buffered_audio_s, play_rate_bits_per_s)
    deficit = np.subtract(play_rate_bits_per_s, receive_rate_bits_per_s)
    safe = np.where(deficit > 0, deficit, 1.0)
    drain = np.where(deficit > 0, np.divide(held, safe), np.inf)
    return drain[()] if drain.ndim == 0 else drain


def _chunk_times(name: str, value: ArrayLike) -> np.ndarray:
    arr = np.array(value, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ModelError(
            f"{name}s must be a 1-D array with one entry per chunk, got shape {arr.shape}"
        )
    nonneg(name, arr)
    return arr


def _per_chunk(name: str, value: ArrayLike, count: int) -> np.ndarray:
    nonneg(name, value)
    arr = np.asarray(value, dtype=float)
    try:
        return np.broadcast_to(arr, (count,)).astype(float)
    except ValueError:
        raise ModelError(
            f"{name} must be one value or one per chunk ({count}), got shape {arr.shape}"
        ) from None


def _serve_in_order(ready_s: np.ndarray, service_s: np.ndarray) -> np.ndarray:
    """One server, FIFO: ``f_i = max(ready_i, f_{i−1}) + service_i``.

    Unrolled with ``S_i = Σ_{j≤i} service_j``: ``f_i = S_i + max_{k≤i}(ready_k − S_{k−1})``.
    """
    served = np.cumsum(service_s)
    return served + np.maximum.accumulate(ready_s - (served - service_s))
