"""Every number §12.3.4, §12.4.2, §12.4.3, figures 12-19, 12-20, 12-26, 12-27 and
exercises 12-4(c) and 12-6 print that follows from their inputs, recomputed.

One row per printed number: section, what it is, how it is computed (the Python
model or ``tierwise calc ... --json``), the printed value and a tolerance
matching the printed rounding.

Stated inputs where the text gives only results:

- §12.3.4 sending: the image is ready at 0 s and needs 5 s of the link, the audio
  is ready at 2 s and needs 1 s. The four printed completions (FIFO 5 s / 6 s,
  audio first 3 s / 6 s) force the audio's 2 s and 1 s and the image's end at 5 s;
  the image starting at 0 s is the natural reading.
- §12.3.4 delivery: the same schedule cut into 1 s segments in connection byte
  order — image 0–1 s arrives at 1 s, image 1–2 s is lost and recovered at 7 s,
  audio at 3 s, the rest of the image at 4, 5, 6 s.
- §12.4.2 deadlines: eight 20 ms chunks of 640 B, each ready 12 ms after its
  capture, share a 20 Mbit/s link with a 30 MB image ready at 0 s; one-way
  propagation 50 ms; play slots every 20 ms from 0.4 s.
"""

from __future__ import annotations

import numpy as np

import tierwise.calc.network  # noqa: F401  (registers the entries)
from tierwise.model import multipath, multiplex
from tierwise.reproduce._case import Row
from tierwise.reproduce._case import calc_json as cli

MBIT = 1e6 / 8
MB = 1e6
MS = 1e-3

IMAGE_AUDIO = [("image", 0.0, 5.0, 1), ("audio", 2.0, 1.0, 0)]
SEGMENTS = [
    ("image", 1.0),
    ("image", 7.0),
    ("audio", 3.0),
    ("image", 4.0),
    ("image", 5.0),
    ("image", 6.0),
]


def sched(policy: str) -> dict[str, float]:
    return multiplex.link_schedule(IMAGE_AUDIO, policy)


def deliver(mode: str) -> multiplex.Delivery:
    return multiplex.delivery_times(SEGMENTS, mode)


def on_time_s(policy: str) -> float:
    """§12.4.2 with the stated inputs through the Python API."""
    ready = (np.arange(1, 9) * 20 + 12) * MS
    arrive = multiplex.media_arrivals_s(
        ready, 640 / (20 * MBIT), 30 * MB / (20 * MBIT), policy, 50 * MS
    )
    return multiplex.on_time_content_s(arrive, multiplex.scheduled_play_s(8, 0.4, 20 * MS), 20 * MS)


S, FAST, SLOW, EXIT = 30 * MB, 20 * MBIT, 10 * MBIT, 24 * MBIT


# fmt: off
ROWS = [
    # --- §12.3.4 sending order ---
    Row("§12.3.4", "FIFO: image done at 5 s", lambda: sched("fifo")["image"], 5, 0),
    Row("§12.3.4", "FIFO: audio done at 6 s", lambda: sched("fifo")["audio"], 6, 0),
    Row("§12.3.4", "audio first: audio done at 3 s", lambda: sched("priority")["audio"], 3, 0),
    Row("§12.3.4", "audio first: image done at 6 s", lambda: sched("priority")["image"], 6, 0),
    Row("§12.3.4", "audio 3 s earlier", lambda: sched("fifo")["audio"] - sched("priority")["audio"],
        3, 0),
    Row("§12.3.4", "image 1 s later", lambda: sched("priority")["image"] - sched("fifo")["image"],
        1, 0),
    Row("§12.3.4", "FIFO image 5 s (CLI link-schedule)",
        lambda: cli("link-schedule")["fifo_completion_s"]["image"], 5, 0),
    Row("§12.3.4", "FIFO audio 6 s (CLI)",
        lambda: cli("link-schedule")["fifo_completion_s"]["audio"], 6, 0),
    Row("§12.3.4", "audio first: audio 3 s (CLI)",
        lambda: cli("link-schedule")["priority_completion_s"]["audio"], 3, 0),
    Row("§12.3.4", "audio first: image 6 s (CLI)",
        lambda: cli("link-schedule")["priority_completion_s"]["image"], 6, 0),
    # --- §12.3.4 delivery order, figures 12-19 and 12-20 ---
    Row("§12.3.4", "audio data complete at 3 s",
        lambda: deliver("stream").complete_s["audio"], 3, 0),
    Row("§12.3.4", "image data complete at 7 s",
        lambda: deliver("stream").complete_s["image"], 7, 0),
    Row("fig. 12-19", "connection-ordered: audio delivered at 7 s",
        lambda: deliver("connection").stream_s["audio"], 7, 0),
    Row("fig. 12-19", "connection-ordered: image delivered at 7 s",
        lambda: deliver("connection").stream_s["image"], 7, 0),
    Row("fig. 12-20", "per-stream: audio delivered at 3 s",
        lambda: deliver("stream").stream_s["audio"], 3, 0),
    Row("fig. 12-20", "per-stream: image still at 7 s",
        lambda: deliver("stream").stream_s["image"], 7, 0),
    Row("§12.3.4", "per-stream delivery saves the audio 4 s",
        lambda: deliver("connection").stream_s["audio"] - deliver("stream").stream_s["audio"],
        4, 0),
    Row("§12.3.4", "audio head-of-line wait 4 s (CLI delivery)",
        lambda: cli("delivery")["connection_wait_s"]["audio"], 4, 0),
    Row("§12.3.4", "connection-ordered audio 7 s (CLI)",
        lambda: cli("delivery")["connection_delivery_s"]["audio"], 7, 0),
    Row("§12.3.4", "per-stream audio 3 s (CLI)",
        lambda: cli("delivery")["stream_delivery_s"]["audio"], 3, 0),
    Row("§12.3.4", "per-stream image 7 s (CLI)",
        lambda: cli("delivery")["stream_delivery_s"]["image"], 7, 0),
    # --- exercise 12-4(c): priority moves link time, per-stream delivery removes a wait ---
    Row("ex. 12-4(c)", "priority: audio uses the link 3 s earlier",
        lambda: -cli("link-schedule")["priority_change_s"]["audio"], 3, 0),
    Row("ex. 12-4(c)", "priority: the image pays 1 s for it",
        lambda: cli("link-schedule")["priority_change_s"]["image"], 1, 0),
    Row("ex. 12-4(c)", "per-stream delivery: audio waits 4 s less",
        lambda: cli("delivery")["saved_s"]["audio"], 4, 0),
    Row("ex. 12-4(c)", "per-stream delivery: the image pays nothing",
        lambda: cli("delivery")["saved_s"]["image"], 0, 0),
    # --- §12.4.2 deadlines and cancel ---
    Row("§12.4.2", "eight 20 ms chunks are 0.16 s of audio",
        lambda: cli("on-time")["scheduled_s"], 0.16, 1e-9),
    Row("§12.4.2", "FIFO behind the image: 0 s on time", lambda: on_time_s("fifo"), 0.0, 0),
    Row("§12.4.2", "media first: 0.16 s on time", lambda: on_time_s("priority"), 0.16, 1e-9),
    Row("§12.4.2", "FIFO: 0 s on time (CLI on-time)",
        lambda: cli("on-time")["fifo_on_time_s"], 0.0, 0),
    Row("§12.4.2", "media first: 0.16 s on time (CLI on-time)",
        lambda: cli("on-time")["media_first_on_time_s"], 0.16, 1e-9),
    Row("§12.4.2", "FIFO: every chunk still arrives (just late)",
        lambda: len(cli("on-time")["fifo_arrive_s"]), 8, 0),
    Row("§12.4.2", "three buffered 20 ms chunks play on for 60 ms",
        lambda: multiplex.cancel(0.0, 3, 20 * MS, 100 * MS, flush=False).silent_s / MS, 60, 1e-9),
    Row("§12.4.2", "flushing the buffer silences at once",
        lambda: multiplex.cancel(0.0, 3, 20 * MS, 100 * MS).silent_s, 0.0, 0),
    Row("§12.4.2", "the remote stops when the control message lands, 100 ms later",
        lambda: multiplex.cancel(0.0, 3, 20 * MS, 100 * MS).remote_stop_s / MS, 100, 1e-9),
    Row("§12.4.2", "60 ms drain (CLI cancel)",
        lambda: cli("cancel")["drain_silent_s"] / MS, 60, 1e-9),
    Row("§12.4.2", "100 ms remote stop (CLI cancel)",
        lambda: cli("cancel")["remote_stop_s"] / MS, 100, 1e-9),
    # --- §12.4.3 split, figures 12-26, 12-27, exercise 12-6(a)(b) ---
    Row("§12.4.3", "x = B1/(B1+B2) = 2/3", lambda: multipath.split_fraction(FAST, SLOW), 2 / 3,
        1e-12),
    Row("§12.4.3", "fast path carries 20 MB", lambda: cli("multipath-split")["fast_bytes"] / MB,
        20, 1e-9),
    Row("§12.4.3", "slow path carries 10 MB", lambda: cli("multipath-split")["slow_bytes"] / MB,
        10, 1e-9),
    Row("§12.4.3", "fast part takes 8 s",
        lambda: multipath.split_time_s(20 * MB, FAST, SLOW, 1.0), 8, 1e-9),
    Row("§12.4.3", "slow part takes 8 s",
        lambda: multipath.split_time_s(10 * MB, FAST, SLOW, 0.0), 8, 1e-9),
    Row("§12.4.3", "split: 8 s", lambda: multipath.split_time_s(S, FAST, SLOW), 8, 1e-9),
    Row("§12.4.3", "fast path alone: 12 s", lambda: multipath.split_time_s(S, FAST, SLOW, 1.0),
        12, 1e-9),
    Row("§12.4.3", "splitting saves 4 s", lambda: cli("multipath-split")["saved_s"], 4, 1e-9),
    Row("§12.4.3", "split 8 s (CLI multipath-split)", lambda: cli("multipath-split")["time_s"],
        8, 1e-9),
    Row("§12.4.3", "24 Mbit/s shared exit: at least 10 s",
        lambda: multipath.shared_exit_time_s(S, FAST, SLOW, EXIT), 10, 1e-9),
    Row("§12.4.3", "the access paths still need 8 s each",
        lambda: multipath.split_time_s(S, FAST, SLOW), 8, 1e-9),
    Row("fig. 12-27", "shared exit 10 s (CLI)",
        lambda: cli("multipath-split")["shared_exit_time_s"], 10, 1e-9),
    Row("ex. 12-6(b)", "the exit, not the access paths, is the bottleneck",
        lambda: float(cli("multipath-split")["bottleneck"] == "exit"), 1, 0),
    Row("ex. 12-6(b)", "faster access paths leave the 10 s bound",
        lambda: multipath.shared_exit_time_s(S, 10 * FAST, 10 * SLOW, EXIT), 10, 1e-9),
    # --- §12.4.3 replication, exercise 12-6(c)(d) ---
    Row("§12.4.3", "both access paths fail: 0.1 × 0.05 = 0.5 %",
        lambda: 100 * multipath.replication_failure(0.0, 0.1, 0.05), 0.5, 1e-9),
    Row("§12.4.3", "with q = 0.02: ≈ 2.5 % (0.0249)",
        lambda: 100 * multipath.replication_failure(0.02, 0.1, 0.05), 2.5, 0.05),
    Row("§12.4.3", "of which 2 percentage points are the shared endpoint",
        lambda: 100 * (multipath.replication_failure(0.02, 0.1, 0.05)
                       - multipath.replication_failure(0.0, 0.1, 0.05)), 2, 0.05),
    Row("§12.4.3", "perfectly reliable access paths: still 2 %",
        lambda: 100 * multipath.replication_failure(0.02, 0.0, 0.0), 2, 1e-9),
    Row("ex. 12-6(c)", "≈ 2.5 % (CLI replication)",
        lambda: 100 * cli("replication")["fail_probability"], 2.5, 0.05),
    Row("ex. 12-6(c)", "reliable access: 2 % (CLI replication)",
        lambda: 100 * cli("replication")["reliable_access_fail_probability"], 2, 1e-9),
    Row("§12.4.3", "one copy of eight 640 B chunks: 5,120 B",
        lambda: cli("replication")["original_bytes"], 5120, 0),
    Row("§12.4.3", "full replication: 10,240 B",
        lambda: multipath.replicated_bytes(8, 640), 10_240, 0),
    Row("ex. 12-6(d)", "replication adds 5,120 B",
        lambda: multipath.duplicate_bytes(8, 640), 5120, 0),
    Row("ex. 12-6(d)", "replication adds 5,120 B (CLI)",
        lambda: cli("replication")["duplicate_bytes"], 5120, 0),
]
# fmt: on
