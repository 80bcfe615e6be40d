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

__all__ = ["SlotLearner", "SlotQueue"]

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


HOLDS = 3  # requests seen waiting for another's end before the site's slots are taken as known
SEEN_KEEP = 256  # ended requests remembered (for the requests that began before they ended)


@dataclass
class _Seen:
    begin: float
    first: float | None = None
    end: float | None = None


class SlotLearner:
    """How many requests a site serves at once, learned from its streams when the
    config does not say (``slots`` unset) and the engine does not either (llama.cpp's
    C++ server has ``/slots``; llama-cpp-python's has neither that nor ``/props``).

    Two things are watched in the requests this gateway sends: how many streams
    produce tokens at the same time (the most seen, ``served``, is a lower bound of
    the slots), and whether a stream sent while ``served`` others were in flight got
    its first token only after one of them ended, having waited most of its time
    before that end and far longer than its predicted time to first token (a
    *hold*: it waited for a slot). After :data:`HOLDS` holds the site has ``served``
    slots (:attr:`value`); a later stream seen beside more raises it. A server that
    serves everyone at once shows overlaps and never a hold: it keeps no slots.

    The gateway then keeps the site's line (:class:`SlotQueue`). From then on it sends
    no more than :attr:`value` at once, so it cannot see more: a server given more
    slots later is not noticed until restart (set ``slots`` to say it).
    """

    def __init__(self) -> None:
        self.jobs: dict[int, _Seen] = {}
        self.served = 0
        self.holds = 0
        self.value: int | None = None
        self._ids = itertools.count()

    def begin(self, now: float) -> int:
        """A request was sent to the site at ``now``."""
        key = next(self._ids)
        self.jobs[key] = _Seen(now)
        if len(self.jobs) > SEEN_KEEP:  # the oldest ended ones (a lost one after STALE_S)
            for k in [k for k, j in self.jobs.items() if j.end is not None][: -SEEN_KEEP // 2]:
                del self.jobs[k]
            for k in [k for k, j in self.jobs.items() if now - j.begin > STALE_S]:
                del self.jobs[k]
        return key

    def first(self, key: int | None, now: float, first_token_s: float) -> int | None:
        """Request ``key``'s first token came at ``now`` (its predicted time to first token
        once served: ``first_token_s``). The site's slots if this settles or raises them."""
        job = self.jobs.get(key) if key is not None else None
        if job is None or job.first is not None:
            return None
        job.first = now
        others = [j for k, j in self.jobs.items() if k != key]
        serving = 1 + sum(1 for j in others if j.first is not None and j.end is None)
        before = self.value
        if serving > self.served:
            self.served = serving
            if self.value is not None:
                self.value = serving
        ahead = [j for j in others if j.begin < job.begin and (j.end is None or j.end > job.begin)]
        ends = [j.end for j in ahead if j.end is not None and j.end <= now]
        if len(ahead) >= self.served and ends:
            waited_s = max(ends) - job.begin  # until the last end before its first token
            if waited_s >= 0.5 * (now - job.begin) and waited_s > max(2 * first_token_s, 0.02):
                self.holds += 1
        if self.value is None and self.holds >= HOLDS:
            self.value = self.served
        return self.value if self.value != before else None

    def end(self, key: int | None, now: float) -> None:
        """Request ``key``'s answer ended (or it failed) at ``now``."""
        job = self.jobs.get(key) if key is not None else None
        if job is not None and job.end is None:
            job.end = now
