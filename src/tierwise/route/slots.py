"""A site's slots, kept by the gateway: who is being served, who waits, for how long.

A server such as llama.cpp's runs ``slots`` requests at once (one, by default) and
holds the rest — in no promised order (llama-cpp-python takes its lock at one point
for a stream and at another for a whole answer, so a later request can overtake) and
without saying so: no ``Server-Timing``, and its ``/v1/models`` waits behind the same
lock. So the gateway keeps the line itself: a request to such a site is a job that
is sent only once a slot is free (:meth:`SlotQueue.turn`), oldest first, and holds
the slot until its answer ends (:meth:`SlotQueue.done`). Then

- the wait a new request would have is the line run forward with each job's
  predicted service time (:meth:`SlotQueue.wait_s`) — the queueing term of the
  prediction, in the order the server will really serve;
- a job's time in line is known exactly, and only the rest — time to first token,
  decode — is learned as the engine's, not folded into a queue or RTT estimate;
- a request still waiting has cost the site nothing: the gateway may hedge it to
  another site while it waits.

It knows only this gateway's requests; another client's are learned as slowness.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass, field

__all__ = ["SlotQueue"]

STALE_S = 600.0  # a job this old has been lost (a bug or a killed task): drop it


@dataclass
class _Job:
    sent: float
    service_s: float  # predicted when it joined the line
    started: float | None = None
    turn: asyncio.Event = field(default_factory=asyncio.Event)


class SlotQueue:
    """The line at one site (``slots`` served at once; see the module docstring)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.jobs: dict[int, _Job] = {}  # in the order they joined
        self._ids = itertools.count()

    def add(self, now: float, service_s: float) -> int:
        """A request joins the line at ``now``, predicted to take ``service_s`` once served."""
        self._drop_stale(now)
        key = next(self._ids)
        self.jobs[key] = _Job(now, max(service_s, 0.0))
        self._admit(now)
        return key

    async def turn(self, key: int) -> float:
        """Wait until job ``key`` has a slot; the time it started (monotonic)."""
        job = self.jobs[key]
        await job.turn.wait()
        assert job.started is not None
        return job.started

    def progress(self, key: int | None, now: float, rest_s: float) -> None:
        """A running job says how much it still needs (a stream's tokens so far and their
        pace): the line ahead of a new request is judged from that, not from the
        prediction made before it started."""
        job = self.jobs.get(key) if key is not None else None
        if job is not None and job.started is not None:
            job.service_s = max(now - job.started + rest_s, 0.0)

    def done(self, key: int | None, now: float) -> float | None:
        """The job ended (answered, failed, cancelled, or gave up waiting) at ``now``: its
        slot goes to the oldest waiting job. Returns when it started (None if it never did)."""
        job = self.jobs.pop(key, None) if key is not None else None
        if job is None:
            return None
        self._admit(now)
        return job.started

    def _admit(self, now: float) -> None:
        running = sum(1 for j in self.jobs.values() if j.started is not None)
        for job in self.jobs.values():
            if running >= self.slots:
                break
            if job.started is None:
                job.started = now
                job.turn.set()
                running += 1

    def running(self) -> int:
        return sum(1 for j in self.jobs.values() if j.started is not None)

    def wait_s(self, now: float) -> float:
        """How long a request joining now would wait for a slot: the running jobs' rest,
        then each waiting one's service, first come first served."""
        if len(self.jobs) < self.slots:
            return 0.0
        lanes = [
            max(j.started + j.service_s, now) for j in self.jobs.values() if j.started is not None
        ]
        lanes += [now] * (self.slots - len(lanes))
        heapq.heapify(lanes)
        for j in self.jobs.values():
            if j.started is None:
                heapq.heapreplace(lanes, lanes[0] + j.service_s)
        return lanes[0] - now

    def _drop_stale(self, now: float) -> None:
        for key in [k for k, j in self.jobs.items() if now - j.sent > STALE_S]:
            self.done(key, now)
