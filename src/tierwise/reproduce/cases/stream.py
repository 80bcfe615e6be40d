"""Every number §12.1.2, figures 12-5 to 12-7, exercise 12-5(c) and the §12.1.4
propagation floor print that follows from their inputs, recomputed.

One row per printed number: section, what it is, how it is computed (the CLI
``tierwise calc ... --json`` or the Python model), the printed value and a
tolerance matching the printed rounding. Chunks are numbered from 0 here; the
text's "first chunk" (第一块) is chunk 0.
"""

from __future__ import annotations

from tierwise.model import path, stream
from tierwise.reproduce._case import Row
from tierwise.reproduce._case import calc_json as cli

MS = 1e-3
KBIT_PER_S = 1e3  # bits/s
HALF_MS = 0.5 * MS


# §12.1.2 example: 24 kHz mono 16-bit, 20 ms chunks, compute 12 ms, send 1 ms,
# propagation 5 ms (50 ms for chunk 2 in the jitter case), initial buffer 40 ms.
def _pipe(jitter: bool = False) -> stream.StreamPipeline:
    ready = stream.capture_ready_s(6, 20 * MS)
    delays = [5 * MS] * 6
    if jitter:
        delays[2] = 50 * MS
    return stream.pipeline(ready, 12 * MS, 1 * MS, delays)


def _play(jitter: bool = False, buffer_s: float = 40 * MS) -> stream.Playout:
    return stream.playout(_pipe(jitter).arrive_s, 20 * MS, buffer_s)


def _drain(buffer_s: float, sample_rate_hz: float) -> float:
    play = stream.pcm_rate_bits_per_s(sample_rate_hz, 1, 16)
    return stream.buffer_drain_s(buffer_s, play, 130 * KBIT_PER_S)


JITTER = ("--override", "2=50 ms")


def _cli_shifts_s() -> list[float]:
    """How much later chunks 2.. play when chunk 2 takes 50 ms (figure 12-6 vs 12-5)."""
    late, on_time = cli("stream", *JITTER)["play_s"], cli("stream")["play_s"]
    return [j - b for j, b in zip(late[2:], on_time[2:], strict=True)]


# fmt: off
ROWS = [
    # --- §12.1.2, the jitter example (Python API) ---
    Row("§12.1.2", "16-bit sample = 2 bytes",
        lambda: stream.chunk_bytes(1 / 24_000, 24_000, 1, 16), 2, 1e-9),
    Row("§12.1.2", "24 kHz mono 16-bit, 20 ms chunk = 960 bytes",
        lambda: stream.chunk_bytes(20 * MS, 24_000, 1, 16), 960, 0.5),
    Row("§12.1.2", "chunk 0 captured (ready) at 20 ms",
        lambda: _pipe().ready_s[0], 20 * MS, HALF_MS),
    Row("§12.1.2", "chunk 0 arrives at 38 ms",
        lambda: _pipe().arrive_s[0], 38 * MS, HALF_MS),
    Row("§12.1.2", "chunk 0 plays at 78 ms after a 40 ms buffer",
        lambda: _play().play_s[0], 78 * MS, HALF_MS),
    Row("§12.1.2", "chunk 1 arrives at 58 ms",
        lambda: _pipe().arrive_s[1], 58 * MS, HALF_MS),
    Row("§12.1.2", "chunk 1 plays at 98 ms",
        lambda: _play().play_s[1], 98 * MS, HALF_MS),
    Row("§12.1.2", "processing is 8 ms shorter than the capture period (processor idle per chunk)",
        lambda: _pipe().ready_s[1] - _pipe().compute_done_s[0], 8 * MS, HALF_MS),
    Row("§12.1.2", "chunk 2 with 50 ms propagation arrives at 123 ms",
        lambda: _pipe(jitter=True).arrive_s[2], 123 * MS, HALF_MS),
    Row("§12.1.2", "chunk 2 was due to play at 118 ms",
        lambda: _play().play_s[2], 118 * MS, HALF_MS),
    Row("§12.1.2", "chunk 2 is 5 ms late",
        lambda: _play(jitter=True).stall_s[2], 5 * MS, HALF_MS),
    Row("§12.1.2", "chunk 3 has already arrived at 98 ms",
        lambda: _pipe(jitter=True).arrive_s[3], 98 * MS, HALF_MS),
    Row("§12.1.2", "chunk 3 still waits: its playback moves 5 ms later",
        lambda: _play(jitter=True).play_s[3] - _play().play_s[3], 5 * MS, HALF_MS),
    Row("§12.1.2", "buffer 45 ms: chunk 2's planned start moves to 123 ms",
        lambda: _play(buffer_s=45 * MS).play_s[2], 123 * MS, HALF_MS),
    Row("§12.1.2", "buffer 45 ms just avoids the stall",
        lambda: _play(jitter=True, buffer_s=45 * MS).total_stall_s, 0.0, 1e-9),
    Row("§12.1.2", "45 ms is the smallest stall-free buffer",
        lambda: stream.min_buffer_s(_pipe(jitter=True).arrive_s, 20 * MS), 45 * MS, HALF_MS),
    Row("§12.1.2", "buffer 45 ms: the first chunk plays 5 ms later",
        lambda: _play(buffer_s=45 * MS).first_play_s - _play().first_play_s, 5 * MS, HALF_MS),
    # --- §12.1.2, the sustained deficit example (Python API) ---
    Row("§12.1.2", "16 kHz mono 16-bit PCM plays at 256 kbit/s",
        lambda: stream.pcm_rate_bits_per_s(16_000, 1, 16), 256 * KBIT_PER_S, 0.5 * KBIT_PER_S),
    Row("§12.1.2", "16 kHz: 20 ms = 640 bytes",
        lambda: stream.chunk_bytes(20 * MS, 16_000, 1, 16), 640, 0.5),
    Row("§12.1.2", "receiving 130 kbit/s, the buffer loses 126 kbit each second",
        lambda: stream.pcm_rate_bits_per_s(16_000, 1, 16) - 130 * KBIT_PER_S,
        126 * KBIT_PER_S, 0.5 * KBIT_PER_S),
    Row("§12.1.2", "60 ms of buffered audio = 15,360 bits",
        lambda: stream.buffer_bits(60 * MS, stream.pcm_rate_bits_per_s(16_000, 1, 16)),
        15_360, 0.5),
    Row("§12.1.2", "60 ms buffer drains in ≈ 0.12 s",
        lambda: _drain(60 * MS, 16_000), 0.12, 0.005),
    # --- figure 12-5 (CLI: tierwise calc stream) ---
    Row("fig. 12-5", "chunk 0 ready at 20 ms",
        lambda: cli("stream")["ready_s"][0], 20 * MS, HALF_MS),
    Row("fig. 12-5", "chunk 0 computed at 32 ms",
        lambda: cli("stream")["compute_done_s"][0], 32 * MS, HALF_MS),
    Row("fig. 12-5", "chunk 0 sent at 33 ms",
        lambda: cli("stream")["send_done_s"][0], 33 * MS, HALF_MS),
    Row("fig. 12-5", "chunk 0 arrives at 38 ms",
        lambda: cli("stream")["arrive_s"][0], 38 * MS, HALF_MS),
    Row("fig. 12-5", "chunk 0 plays at 78 ms after the 40 ms buffer",
        lambda: cli("stream")["first_play_s"], 78 * MS, HALF_MS),
    # --- figure 12-6 (CLI) ---
    Row("fig. 12-6", "chunk 2 arrives at 123 ms",
        lambda: cli("stream", *JITTER)["arrive_s"][2], 123 * MS, HALF_MS),
    Row("fig. 12-6", "playback waits 5 ms in total",
        lambda: cli("stream", *JITTER)["stall_s"], 5 * MS, HALF_MS),
    Row("fig. 12-6", "every chunk from 2 on plays 5 ms later (smallest shift)",
        lambda: min(_cli_shifts_s()), 5 * MS, HALF_MS),
    Row("fig. 12-6", "every chunk from 2 on plays 5 ms later (largest shift)",
        lambda: max(_cli_shifts_s()), 5 * MS, HALF_MS),
    Row("fig. 12-6", "a 45 ms buffer is the smallest without the stall",
        lambda: cli("stream", *JITTER)["min_buffer_s"], 45 * MS, HALF_MS),
    Row("§12.1.2", "with a 45 ms buffer there is no stall (CLI)",
        lambda: cli("stream", *JITTER, "--buffer", "45 ms")["stall_s"], 0.0, 1e-9),
    # --- figure 12-7 (CLI: tierwise calc buffer-drain, pcm-rate) ---
    Row("fig. 12-7", "PCM playback needs 256 kbit/s",
        lambda: cli("pcm-rate", "--sample-rate", "16 kHz")["rate_bytes_per_s"] * 8,
        256 * KBIT_PER_S, 0.5 * KBIT_PER_S),
    Row("fig. 12-7", "both lines fall at 126 kbit/s",
        lambda: cli("buffer-drain")["deficit_bytes_per_s"] * 8, 126 * KBIT_PER_S, 0.5 * KBIT_PER_S),
    Row("fig. 12-7", "60 ms buffer runs dry at ≈ 0.12 s",
        lambda: cli("buffer-drain", "--buffer", "60 ms")["drain_s"], 0.12, 0.005),
    Row("fig. 12-7", "120 ms buffer runs dry at ≈ 0.24 s",
        lambda: cli("buffer-drain", "--buffer", "120 ms")["drain_s"], 0.24, 0.005),
    # --- exercise 12-5(c) ---
    Row("ex. 12-5(c)", "16 kHz, 60 ms buffer, 130 kbit/s: drains at ≈ 0.12 s",
        lambda: _drain(60 * MS, 16_000), 0.12, 0.005),
    Row("ex. 12-5(c)", "24 kHz mono 16-bit plays at 384 kbit/s",
        lambda: stream.pcm_rate_bits_per_s(24_000, 1, 16), 384 * KBIT_PER_S, 0.5 * KBIT_PER_S),
    Row("ex. 12-5(c)", "24 kHz: 60 ms buffer holds 23,040 bits",
        lambda: cli("buffer-drain", "--play", "384 kbit/s")["buffered_bits"], 23_040, 0.5),
    Row("ex. 12-5(c)", "24 kHz: the buffer drains at ≈ 0.091 s",
        lambda: _drain(60 * MS, 24_000), 0.091, 0.0005),
    Row("ex. 12-5(c)", "24 kHz: the buffer drains at ≈ 0.091 s (CLI)",
        lambda: cli("buffer-drain", "--play", "384 kbit/s")["drain_s"], 0.091, 0.0005),
    # --- §12.1.4 propagation floor ---
    Row("§12.1.4", "10,000 km of fibre: RTT ≥ ≈ 100 ms",
        lambda: path.propagation_rtt_s(10_000e3), 100 * MS, HALF_MS),
    Row("§12.1.4", "10,000 km: RTT ≈ 100 ms (CLI)",
        lambda: cli("propagation", "--distance", "10000 km")["rtt_s"], 100 * MS, HALF_MS),
    Row("§12.1.4", "a 50 ms reply budget is already exceeded by propagation alone",
        lambda: float(cli("propagation", "--deadline", "50 ms")["meets_deadline"]), 0.0, 0.0),
]
# fmt: on
