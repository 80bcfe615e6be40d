"""The fleet's state in Redis: one stream of observations, one hash of requests in flight.

Why a stream (``XADD`` / ``XREAD``) and not pub/sub plus a snapshot: the estimators are
rebuilt from observations (:mod:`tierwise.route.fleet`), so the state *is* the recent
observations; a stream keeps them (trimmed to :data:`STREAM_MAX`) and hands each reader
everything after the last id it saw — a replica that starts reads the whole stream
before it takes traffic, and one that was cut off reads what it missed when it comes
back. Pub/sub would drop whatever was sent while a replica was away, and a snapshot
(a filter's state) cannot be merged with the observations another replica made since.

Nothing on a request's path waits for Redis. The gateway hands an observation to
:meth:`FleetLink.publish` (an append to a bounded deque: when Redis is away the oldest
are dropped and counted); one background task writes the deque, reads the stream
and swaps in-flight counts. Any failure — refused, reset, timed out (a stopped server),
a reply that is not Redis, a wrong password — logs one line, closes the connection and
retries with back-off (0.1 s doubling to :data:`MAX_BACKOFF_S`), the replica carrying on
with its own estimates meanwhile; the line saying it is back is logged once too. A
Redis that restarted empty (a new ``run_id``) is read from its start and given back this
replica's kept observations, so the fleet's state is whole again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from tierwise.route.fleet import HISTORY, Fleet, Obs, decode, encode
from tierwise.route.fleetconf import StateTarget

__all__ = ["FleetLink"]

STREAM_MAX = 100_000  # entries the stream keeps (approximate trim)
OUTBOX_MAX = 20_000  # observations waiting for Redis; past this the oldest are dropped
BATCH = 500  # entries per write
READ_BATCH = 100  # entries per read (merging a read holds the event loop; keep it short)
READ_BLOCK_MS = 200  # a read waits this long for new entries
INFLIGHT_EVERY_S = 0.05  # in-flight counts are swapped this often
INFLIGHT_STALE_S = 3.0  # a replica's counts older than this are a replica gone
INFLIGHT_FORGET_S = 60.0  # ... and older than this are removed from the hash
MAX_BACKOFF_S = 1.0  # a returning Redis is found within a second (goal: back in 5 s)
SOCKET_TIMEOUT_S = 1.0  # a stopped (SIGSTOP) or partitioned server: given up on after this
LOAD_TIMEOUT_S = 3.0  # a starting replica waits at most this for the fleet's state
EVENTS = ("bench", "unbench")


class FleetLink:
    """A replica's connection to the fleet's state (see the module docstring)."""

    def __init__(
        self,
        fleet: Fleet,
        target: StateTarget,
        prefix: str = "tierwise:route",
        on_event: Callable[[str, str, dict[str, Any]], None] | None = None,
        inflight: Callable[[], dict[str, int]] | None = None,
        metrics: Any = None,
    ) -> None:
        self.fleet = fleet
        self.target = target
        self.stream = f"{prefix}:obs"
        self.inflight_key = f"{prefix}:inflight"
        self.on_event = on_event
        self.local_inflight = inflight or dict
        self.metrics = metrics
        self.outbox: collections.deque[dict[str, str]] = collections.deque(maxlen=OUTBOX_MAX)
        self.wake = asyncio.Event()
        self.last_id = "0-0"
        self.run_id: str | None = None
        self.up = False
        self.reported: str | None = None  # the failure last logged (once per outage)
        self.others_inflight: dict[str, int] = {}
        self.published = self.dropped = self.malformed = 0
        self.ever_up = False
        self._task: asyncio.Task | None = None
        self._closing = False

    # ----------------------------------------------------------- the request path

    def publish(self, obs: Obs) -> None:
        """Queue one of this replica's observations (never waits; drops the oldest if full)."""
        self._queue(encode(obs))

    def event(self, kind: str, site: str, **data: Any) -> None:
        """Queue a bench or un-bench of ``site`` for the others."""
        self._queue(
            {"ts": repr(time.time()), "replica": self.fleet.replica, "seq": "0", "site": site,
             "kind": kind, "data": json.dumps(data)}
        )  # fmt: skip

    def _queue(self, fields: dict[str, str]) -> None:
        if len(self.outbox) == self.outbox.maxlen:
            self.dropped += 1
            self._count("dropped")
        self.outbox.append(fields)
        self.wake.set()

    # ------------------------------------------------------------ the background

    async def start(self, load_timeout_s: float = LOAD_TIMEOUT_S) -> None:
        """Load the fleet's state (at most ``load_timeout_s``), then run in the background."""
        try:
            async with asyncio.timeout(load_timeout_s):
                client = self._client()
                try:
                    await self._connect(client)
                    await self._read_all(client)
                finally:
                    await client.aclose()
        except Exception as exc:
            self._down(exc)
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._closing = True
        # A cancel can be swallowed on its way down (by Python 3.11's TaskGroup, or by a
        # Redis client's call it lands in): cancel again until the task has ended. Each
        # loop also stops at its next turn, as the link is closing. (5 s at most.)
        for _ in range(50):
            if self._task is None or self._task.done():
                break
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=0.1)
        if self._task is not None and self._task.done() and not self._task.cancelled():
            with contextlib.suppress(Exception):
                self._task.result()  # retrieved: no "exception never retrieved" warning
        with contextlib.suppress(Exception):  # the others stop counting ours at once
            async with asyncio.timeout(0.5):
                client = self._client()
                try:
                    await client.hdel(self.inflight_key, self.fleet.replica)
                finally:
                    await client.aclose()

    def _client(self):
        import redis.asyncio as redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        t = self.target
        tls: dict[str, Any] = {}
        if t.tls:
            tls = {"ssl": True, "ssl_ca_certs": t.ca_file, "ssl_cert_reqs": "required"}
        return redis.Redis(
            host=t.host, port=t.port, db=t.db, username=t.username, password=t.password,
            socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S,
            decode_responses=True, retry=Retry(NoBackoff(), 0), client_name="tierwise-route",
            **tls,
        )  # fmt: skip

    async def _connect(self, client) -> None:
        """Check the server answers as Redis; a new server (restarted, empty) is read from
        its start and given this replica's kept observations back."""
        info = await client.info("server")
        run_id = info.get("run_id") if isinstance(info, dict) else None
        if not isinstance(run_id, str):
            raise ConnectionError("the server's INFO has no run_id: not Redis")
        if run_id != self.run_id:
            if self.run_id is not None:
                for obs in self.fleet.own():
                    self._queue(encode(obs))
            self.run_id, self.last_id = run_id, "0-0"
        self._back()

    async def _run(self) -> None:
        backoff = 0.1
        while not self._closing:
            client = self._client()
            try:
                if not self.up:
                    await self._connect(client)
                backoff = 0.1
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(self._reader(client))
                    tg.create_task(self._writer(client))
                    tg.create_task(self._inflight(client))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Python 3.11's TaskGroup answers a cancel that meets a child's failure
                # with the failure alone (and its own cancel count is not to be trusted):
                # a stop swallowed would keep this loop, and its logging, alive after the
                # gateway stopped, and hold up the gateway's shutdown.
                if self._closing:
                    raise asyncio.CancelledError from exc
                self._down(exc)
            finally:
                with contextlib.suppress(Exception):
                    await client.aclose()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _read_all(self, client) -> None:
        """Read the stream from :attr:`last_id` to its end (a starting replica's load):
        from its start, only the newest entries the sites' logs can keep (older ones
        would be dropped as too late anyway), oldest first."""
        if self.last_id == "0-0":
            keep = HISTORY * max(len(self.fleet.logs), 1)
            newest = await client.xrevrange(self.stream, count=keep)
            if not newest:
                return
            self._merge(list(reversed(newest)), live=False)
        while not self._closing:
            got = await client.xrange(self.stream, min=_after(self.last_id), count=BATCH)
            if not got:
                return
            self._merge(got, live=False)

    async def _reader(self, client) -> None:
        while not self._closing:
            got = await client.xread(
                {self.stream: self.last_id}, count=READ_BATCH, block=READ_BLOCK_MS
            )
            for _stream, entries in got or []:
                self._merge(entries)

    def _merge(self, entries: list[tuple[str, dict[str, str]]], live: bool = True) -> None:
        """Merge a read's entries: events at once, observations as one batch (``live``:
        as they come, each one's staleness measured; not the state loaded at start)."""
        me = self.fleet.replica
        batch: list[Obs] = []
        for entry_id, fields in entries:
            self.last_id = entry_id
            kind = fields.get("kind") if isinstance(fields, dict) else None
            if kind in EVENTS:
                if fields.get("replica") != me and self.on_event is not None:
                    self._event(kind, fields)
                continue
            obs = decode(fields) if isinstance(fields, dict) else None
            if obs is None:
                self.malformed += 1
                self._count("malformed")
                continue
            if obs.replica == me:
                self.fleet.resume_seq(obs.seq)
            batch.append(obs)
        now = time.time()
        for obs in self.fleet.merge_many(batch):
            if obs.replica == me:
                continue
            self._count("received")
            if self.metrics is not None and live:
                self.metrics.fleet_staleness.observe(max(now - obs.ts, 0.0))
            if self.on_event is not None:  # the site was just used: no probe needed
                self.on_event("used", obs.site, {})

    def _event(self, kind: str, fields: dict[str, str]) -> None:
        try:
            data = json.loads(fields.get("data", "{}"))
            assert self.on_event is not None
            self.on_event(kind, str(fields["site"]), data if isinstance(data, dict) else {})
        except (ValueError, KeyError, TypeError):
            self.malformed += 1

    async def _writer(self, client) -> None:
        while not self._closing:
            if not self.outbox:
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self.wake.wait()
                continue
            batch = [self.outbox.popleft() for _ in range(min(BATCH, len(self.outbox)))]
            try:
                pipe = client.pipeline(transaction=False)
                for fields in batch:
                    pipe.xadd(self.stream, fields, maxlen=STREAM_MAX, approximate=True)
                await pipe.execute()
            except BaseException:
                room = self.outbox.maxlen - len(self.outbox) if self.outbox.maxlen else len(batch)
                self.outbox.extendleft(reversed(batch[len(batch) - max(room, 0) :]))
                raise
            self.published += len(batch)
            self._count("published", len(batch))

    async def _inflight(self, client) -> None:
        """Swap in-flight counts: ours in, the others' (fresh ones) summed per site."""
        me = self.fleet.replica
        while not self._closing:
            mine = {"ts": time.time(), "sites": self.local_inflight()}
            await client.hset(self.inflight_key, me, json.dumps(mine))
            everyone = await client.hgetall(self.inflight_key)
            now, total = time.time(), {name: 0 for name in self.fleet.logs}
            gone = []
            for replica, text in everyone.items():
                if replica == me:
                    continue
                gone.append(replica)  # unless it proves fresh below
                with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError):
                    row = json.loads(text)
                    age_s = now - float(row["ts"])
                    if age_s < INFLIGHT_FORGET_S:
                        gone.pop()
                    if age_s > INFLIGHT_STALE_S:
                        continue
                    for site, n in row["sites"].items():
                        if site in total and isinstance(n, int) and 0 <= n < 1_000_000:
                            total[site] += n
            if gone:  # replicas long gone (or garbage): the hash does not grow forever
                await client.hdel(self.inflight_key, *gone)
            self.others_inflight = total
            if self.metrics is not None:
                for site, n in total.items():
                    self.metrics.fleet_inflight.labels(site).set(n)
            await asyncio.sleep(INFLIGHT_EVERY_S)

    # ---------------------------------------------------------------- reporting

    def _down(self, exc: BaseException) -> None:
        """Log an outage once — its first failure; retries that fail, however they fail,
        stay quiet until Redis is back — and carry on."""
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        reason = f"{type(exc).__name__}: {exc}".strip().rstrip(":.")
        if "auth" in reason.lower() or "WRONGPASS" in reason or "NOAUTH" in reason:
            reason = f"refused the password ({reason})"
        self.others_inflight = {}
        if self.up or self.reported is None:
            _log(f"fleet state at {self.target.url} unavailable: {reason}; carrying on with "
                 "this replica's own estimates, retrying with back-off")  # fmt: skip
            self.reported = reason
        self.up = False
        if self.metrics is not None:
            self.metrics.fleet_up.set(0)

    def _back(self) -> None:
        if not self.up:
            if self.ever_up or self.reported is not None:
                _log(f"fleet state at {self.target.url} is back; catching up")
            self.up = self.ever_up = True
            self.reported = None
            if self.metrics is not None:
                self.metrics.fleet_up.set(1)

    def _count(self, what: str, n: int = 1) -> None:
        if self.metrics is not None:
            self.metrics.fleet_observations.labels(what).inc(n)


def _after(entry_id: str) -> str:
    """XRANGE's exclusive start after ``entry_id`` (``(`` prefix), or the stream's start."""
    return "-" if entry_id == "0-0" else f"({entry_id}"


def _log(line: str) -> None:
    print(f"tierwise route: {line}", file=sys.stderr, flush=True)
