"""A site's slots as the gateway sees them: who is being served, who waits, for how long.

A server such as llama.cpp's runs ``slots`` requests at once (one, by default) and
holds the rest in line. It says nothing of that line — no ``Server-Timing``, and its
``/v1/models`` waits behind the same lock — so the gateway keeps the line itself from
what it sent: each request sent to the site is a job, running while fewer than
``slots`` are ahead of it and waiting otherwise; a job that ends frees its slot for
the oldest waiting one. Two things follow:

- the wait a new request would have, by running the line forward with each job's
  predicted service time (:meth:`SlotQueue.wait_s`) — the queueing term of the
  prediction;
- when a finished job's service began (:meth:`SlotQueue.done`): its time in line is
  then known, and only the rest — time to first token, decode — is learned as the
  engine's, not folded into a queue or RTT estimate.

It knows only this gateway's requests; another client's are learned as slowness.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

__all__ = ["SlotQueue"]

STALE_S = 600.0  # a job this old has been lost (a bug or a killed task): drop it


@dataclass
class _Job:
    sent: float
    service_s: float  # predicted at dispatch
    started: float | None = None


class SlotQueue:
    """The line at one site (``slots`` served at once; see the module docstring)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.jobs: dict[int, _Job] = {}
        self._ids = itertools.count()

    def add(self, now: float, service_s: float) -> int:
        """A request sent at ``now``, predicted to take ``service_s`` once served."""
        self._drop_stale(now)
        job = _Job(now, max(service_s, 0.0))
        if self.running() < self.slots:
            job.started = now
        key = next(self._ids)
        self.jobs[key] = job
        return key

    def running(self) -> int:
        return sum(1 for j in self.jobs.values() if j.started is not None)

    def waiting(self) -> int:
        return sum(1 for j in self.jobs.values() if j.started is None)

    def done(self, key: int | None, now: float) -> float | None:
        """The job ended (answered, failed or cancelled) at ``now``: when it started
        service (None if unknown); the oldest waiting job takes its slot."""
        job = self.jobs.pop(key, None) if key is not None else None
        if job is None:
            return None
        if job.started is not None:
            for other in self.jobs.values():  # dicts keep the order jobs were added
                if other.started is None:
                    other.started = now
                    break
        return job.started if job.started is not None else now

    def wait_s(self, now: float) -> float:
        """How long a request sent now would wait for a slot (jobs run FIFO)."""
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
