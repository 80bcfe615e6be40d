"""A lean discrete-event engine: a heap of ``(time, priority, seq, callback, args)``.

The sequence number breaks ties deterministically (SimPy's ``core.py``); callbacks
are plain functions, not generator processes, because this is the hot path.
Randomness comes from named ``numpy.random.Generator`` streams derived from one
seed, so adding a stream never changes another's draws.
"""

from __future__ import annotations

import heapq
import math
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tierwise.errors import SimulationError

if TYPE_CHECKING:  # numpy loads with the first random stream (a lossless run needs none)
    import numpy as np

__all__ = ["STALL_EVENTS", "Simulator"]

# Far above any real burst at one instant (a 64-flow start, a window of timers), far
# below a hang: 10^6 events take about a second.
STALL_EVENTS = 1_000_000


def _stall_message(time_s: float, callback: Callable[..., Any]) -> str:
    owner = getattr(callback, "__self__", None)
    state = f" ({owner!r})" if owner is not None else ""
    name = getattr(callback, "__qualname__", repr(callback))
    return (
        f"the simulation stalled at {time_s:.9f} s: over {STALL_EVENTS:,} events in a row "
        f"at that instant, the last one {name}{state} — a bug in the model, please report it"
    )


class Simulator:
    """Time in seconds; ``schedule`` callbacks, then ``run``."""

    __slots__ = ("_heap", "_seq", "_streams", "events", "now", "seed")

    def __init__(self, seed: int = 0) -> None:
        self.now = 0.0
        self.seed = seed
        self.events = 0
        self._heap: list[tuple[float, int, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = 0
        self._streams: dict[str, np.random.Generator] = {}

    def at(self, time: float, callback: Callable[..., Any], *args: Any, priority: int = 0) -> None:
        """Run ``callback(*args)`` at absolute ``time`` (never in the past)."""
        if time < self.now - 1e-12:
            raise SimulationError(f"cannot schedule at {time} s, before now ({self.now} s)")
        self._seq += 1
        heapq.heappush(self._heap, (time, priority, self._seq, callback, args))

    def post(self, time: float, callback: Callable[..., Any], arg: Any) -> None:
        """``at(time, callback, arg)`` for the per-packet path: ``time`` is known not
        to be in the past (a link's arrival time), priority 0."""
        self._seq = seq = self._seq + 1
        heapq.heappush(self._heap, (time, 0, seq, callback, (arg,)))

    def schedule(
        self, delay: float, callback: Callable[..., Any], *args: Any, priority: int = 0
    ) -> None:
        """Run ``callback(*args)`` after ``delay`` seconds."""
        self.at(self.now + delay, callback, *args, priority=priority)

    def run(self, until: float | None = None, max_events: int | None = None) -> int:
        """Process events in order until none are left (or ``until`` / ``max_events``).

        More than :data:`STALL_EVENTS` events in a row at one instant is a model that
        spins without advancing time (a timer re-armed in the past): it raises
        :class:`SimulationError` naming the time and the callback, instead of hanging.
        """
        heap, pop, push = self._heap, heapq.heappop, heapq.heappush
        limit = math.inf if until is None else until
        most = -1 if max_events is None else max(max_events, 1)
        processed = 0
        last, same = -1.0, 0
        while heap:
            event = pop(heap)
            time, _, _, callback, args = event
            if time > limit:
                push(heap, event)  # not due: back where it was
                self.now = limit
                break
            if time == last:
                same += 1
                if same > STALL_EVENTS:
                    self.events += processed
                    raise SimulationError(_stall_message(time, callback))
            else:
                last, same = time, 0
            self.now = time
            callback(*args)
            processed += 1
            if processed == most:
                break
        self.events += processed
        return processed

    def rng(self, name: str) -> np.random.Generator:
        """The named random stream (created on first use from the seed and the name)."""
        gen = self._streams.get(name)
        if gen is None:
            import numpy as np

            key = zlib.crc32(name.encode())
            gen = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(key,)))
            self._streams[name] = gen
        return gen
