"""Several streams on one connection: sending order, delivery order, deadlines, cancel.

Two orders can change (§12.3.4): the sender's schedule decides when each
stream's bytes cross the link, and the receiver's ordering rule decides when
bytes that have arrived reach the application. §12.4.2 adds the value of time:
audio that misses its play slot is worth nothing, and a cancel has a local and
a remote path. Times are seconds on one clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tierwise.errors import ModelError
from tierwise.model._check import ArrayLike, nonneg, positive
from tierwise.model.stream import chunk_count

__all__ = [
    "DELIVERY_MODES",
    "POLICIES",
    "Cancel",
    "Delivery",
    "Flow",
    "Segment",
    "cancel",
    "delivery_times",
    "link_schedule",
    "media_arrivals_s",
    "on_time_content_s",
    "scheduled_play_s",
]


class Flow(NamedTuple):
    """One flow on a shared link: it becomes ready at ``arrival_s`` and needs ``send_s``.

    ``priority``: a smaller value is sent first (0 is the most urgent, like the
    urgency of RFC 9218 and the bands of Linux ``prio``).
    """

    name: str
    arrival_s: float
    send_s: float
    priority: int = 0


class Segment(NamedTuple):
    """A piece of one stream, in connection byte order, and when it arrived."""

    stream: str
    arrival_s: float


def link_schedule(flows: Iterable[Flow | Sequence], policy: str) -> dict[str, float]:
    """When each flow's last byte leaves one shared link (§12.3.4, exercise 12-4(c)).

    ``"fifo"``: by arrival, non-preemptive, ``f_i = max(a_i, f_{i−1}) + s_i``.
    ``"priority"``: preemptive and fluid; at every instant the most urgent waiting
    flow sends (ties by arrival, then by listing order). The image (arrives 0 s,
    5 s of sending) and the audio (2 s, 1 s): FIFO 5 s / 6 s; audio first
    3 s / 6 s.
    """
    table = _flows(flows)
    try:
        schedule = POLICIES[policy]
    except KeyError:
        raise ModelError(
            f"unknown link policy {policy!r}; known: {', '.join(sorted(POLICIES))}"
        ) from None
    return schedule(table)


def _fifo(flows: list[Flow]) -> dict[str, float]:
    done: dict[str, float] = {}
    last = -np.inf
    for flow in sorted(flows, key=lambda f: f.arrival_s):  # stable: ties keep listing order
        last = max(flow.arrival_s, last) + flow.send_s
        done[flow.name] = last
    return {f.name: done[f.name] for f in flows}


def _priority(flows: list[Flow]) -> dict[str, float]:
    left = [f.send_s for f in flows]
    done: dict[str, float] = {}
    now = min(f.arrival_s for f in flows)
    while len(done) < len(flows):
        waiting = [i for i, f in enumerate(flows) if f.name not in done and f.arrival_s <= now]
        later = [f.arrival_s for f in flows if f.arrival_s > now]
        if not waiting:
            now = min(later)
            continue
        i = min(waiting, key=lambda j: (flows[j].priority, flows[j].arrival_s, j))
        run = min(left[i], min(later, default=np.inf) - now)
        now += run
        left[i] -= run
        if left[i] <= 0:
            done[flows[i].name] = now
    return {f.name: done[f.name] for f in flows}


POLICIES: dict[str, Callable[[list[Flow]], dict[str, float]]] = {
    "fifo": _fifo,
    "priority": _priority,
}


def _flows(flows: Iterable[Flow | Sequence]) -> list[Flow]:
    try:
        table = [Flow(*f) for f in flows]
        table = [
            Flow(str(f.name), float(f.arrival_s), float(f.send_s), int(f.priority)) for f in table
        ]
    except (TypeError, ValueError) as exc:
        raise ModelError(f"a flow is (name, arrival_s, send_s, priority): {exc}") from exc
    if not table:
        raise ModelError("a link schedule needs at least one flow")
    names = [f.name for f in table]
    if len(set(names)) != len(names):
        raise ModelError(f"flow names must be unique, got {names}")
    for f in table:
        nonneg(f"arrival of {f.name!r}", f.arrival_s)
        nonneg(f"send time of {f.name!r}", f.send_s)
    return table


@dataclass(frozen=True, eq=False)
class Delivery:
    """When data reach the application, per segment and per stream."""

    segment_s: np.ndarray
    stream_s: dict[str, float]
    complete_s: dict[str, float]

    @property
    def wait_s(self) -> dict[str, float]:
        """How long each stream's complete data waited for another stream (head of line)."""
        return {s: self.stream_s[s] - self.complete_s[s] for s in self.stream_s}


DELIVERY_MODES = ("connection", "stream")


def delivery_times(segments: Iterable[Segment | Sequence], mode: str) -> Delivery:
    """Delivery under one ordered byte stream or per-stream ordering (§12.3.4, fig. 12-19/20).

    Segments are listed in connection byte order. ``"connection"`` (TCP, HTTP/2):
    segment ``i`` is delivered at ``max_{j≤i} a_j`` — a gap blocks everything
    behind it. ``"stream"`` (QUIC): ``max`` over earlier segments of the same
    stream only. A stream is delivered when its last segment is; ``complete_s``
    is when all its data had arrived. Audio complete at 3 s behind an image gap
    recovered at 7 s: connection-ordered 7 s, per-stream 3 s.
    """
    try:
        table = [Segment(str(stream), float(arrival)) for stream, arrival in segments]
    except (TypeError, ValueError) as exc:
        raise ModelError(f"a segment is (stream, arrival_s): {exc}") from exc
    if not table:
        raise ModelError("delivery needs at least one segment")
    if mode not in DELIVERY_MODES:
        raise ModelError(f"unknown delivery mode {mode!r}; known: {', '.join(DELIVERY_MODES)}")
    arrive = np.array([s.arrival_s for s in table], dtype=float)
    nonneg("segment arrival", arrive)
    keys = [s.stream for s in table] if mode == "stream" else [None] * len(table)
    delivered = np.empty_like(arrive)
    latest: dict[object, float] = {}
    for i, key in enumerate(keys):
        latest[key] = max(latest.get(key, -np.inf), arrive[i])
        delivered[i] = latest[key]
    stream_s: dict[str, float] = {}
    complete_s: dict[str, float] = {}
    for seg, when in zip(table, delivered, strict=True):
        stream_s[seg.stream] = float(when)
        complete_s[seg.stream] = max(complete_s.get(seg.stream, -np.inf), seg.arrival_s)
    return Delivery(delivered, stream_s, {k: float(v) for k, v in complete_s.items()})


def scheduled_play_s(chunks: int, first_play_s: float, period_s: float) -> np.ndarray:
    """Fixed-clock play slots ``first + i·τ`` (§12.4.2: eight 20 ms chunks from 0.4 s)."""
    chunks = chunk_count(chunks, 0)
    nonneg("first play time", first_play_s)
    positive("chunk period", period_s)
    return first_play_s + np.arange(chunks) * period_s


def on_time_content_s(arrive_s: ArrayLike, play_s: ArrayLike, period_s: ArrayLike) -> float:
    """Audio playable on time ``Σ_i τ_i·[a_i ≤ p_i]`` (§12.4.2).

    A fixed-clock player drops a chunk that arrives after its slot. Eight 20 ms
    chunks: FIFO behind a large image 0 s, media first 0.16 s. ``period_s`` is
    one value or one per chunk.
    """
    arrive = np.asarray(arrive_s, dtype=float)
    play = np.asarray(play_s, dtype=float)
    if arrive.shape != play.shape or arrive.ndim != 1:
        raise ModelError(
            f"arrivals and play slots must be 1-D and match, got {arrive.shape} and {play.shape}"
        )
    nonneg("arrival time", arrive)
    nonneg("play time", play)
    positive("chunk period", period_s)
    period = np.broadcast_to(np.asarray(period_s, dtype=float), arrive.shape)
    return float(period[arrive <= play].sum())


def media_arrivals_s(
    ready_s: ArrayLike,
    chunk_send_s: float,
    bulk_send_s: float,
    policy: str,
    propagation_s: float = 0.0,
    bulk_ready_s: float = 0.0,
) -> np.ndarray:
    """Arrival of media chunks sharing a link with one bulk transfer (§12.4.2).

    The bulk flow (an image) is ready at ``bulk_ready_s``; chunk ``i`` at
    ``ready_s[i]``. Under :func:`link_schedule` with ``policy`` (media more
    urgent than bulk), ``a_i = finish_i + d``.
    """
    ready = np.asarray(ready_s, dtype=float)
    if ready.ndim != 1:
        raise ModelError(f"ready times must be 1-D, got shape {ready.shape}")
    nonneg("propagation", propagation_s)
    flows = [Flow("bulk", bulk_ready_s, bulk_send_s, 1)]
    flows += [Flow(f"chunk {i}", float(r), chunk_send_s, 0) for i, r in enumerate(ready)]
    done = link_schedule(flows, policy)
    return np.array([done[f"chunk {i}"] for i in range(ready.size)]) + propagation_s


@dataclass(frozen=True)
class Cancel:
    """The two paths of one cancel (§12.4.2, figure 12-25)."""

    silent_s: float  # the user stops hearing audio
    remote_stop_s: float  # the remote stops generating and sending
    wasted_chunks: float  # chunks generated in vain before the control message lands


def cancel(
    t_cancel_s: float,
    buffered_chunks: int,
    period_s: float,
    control_delay_s: float,
    flush: bool = True,
) -> Cancel:
    """Cancel at ``t``: local silence at ``t`` (flush) or ``t + n·τ`` (drain), remote at ``t + c``.

    §12.4.2: three 20 ms chunks buffered play on for 60 ms unless flushed; the
    control message takes 100 ms, during which the remote keeps generating
    ``c/τ`` chunks (5 at one chunk per 20 ms; a mean, the exact count depends on
    the phase of the generation clock).
    """
    nonneg("cancel time", t_cancel_s)
    if isinstance(buffered_chunks, bool) or not isinstance(buffered_chunks, int | np.integer):
        raise ModelError(f"buffered chunks must be an integer ≥ 0, got {buffered_chunks!r}")
    nonneg("buffered chunks", buffered_chunks)
    positive("chunk period", period_s)
    nonneg("control delay", control_delay_s)
    silent = t_cancel_s if flush else t_cancel_s + buffered_chunks * period_s
    return Cancel(
        float(silent), float(t_cancel_s + control_delay_s), float(control_delay_s / period_s)
    )
