"""The gateway: accepts relay sessions and connects their streams to allowed destinations.

It never acts as an open proxy: a stream's destination must be in ``allow``
exactly as the client named it (host and port; IP literals compared in their
canonical form, names case-insensitively): a name that merely resolves to an
allowed address, another port, another spelling of the address family (an
IPv4-mapped IPv6 literal) all get status ``NOT_ALLOWED``; the DNS of a name the
operator allowed is trusted. UDP ASSOCIATE streams (:mod:`.udp`) follow the
same rule per datagram, and at most ``MAX_ASSOCIATIONS`` are open at once.
Bounds: ``max_sessions`` sessions (a HELLO beyond it is
dropped), each session's streams by :class:`RelayConfig.max_streams`, each
stream's buffers by the flow-control windows. A datagram that names no known
session and is not a valid HELLO costs one header parse and one AEAD check (a
failed HELLO leaves its connection object unused, and the next HELLO reuses it); a
HELLO undated, dated more than ``HELLO_WINDOW_S`` off, without a current admission tag,
or seen before (a recorded one replayed: :class:`HelloLedger`) costs the parse alone.
Clients' clocks must be within two minutes of the gateway's.

:meth:`Gateway.snapshot` is what an operator observes (``--stats``, :mod:`.metrics`):
totals over every session since the start (ended ones included, so counters only grow)
plus the ``STATS_SESSIONS`` busiest sessions; it reads, never changes, a session.

Floods (:meth:`Gateway.guard`, :mod:`.kfilter`): the kernel decides what is worth
reading before anything reaches a socket queue. Three sockets share the port
(``SO_REUSEPORT``) and a steering program picks one per datagram: a session's DATA from
that session's own address goes to the session socket; other DATA to the moved socket,
whose filter keeps DATA naming a session (a client that moved, or a replay or forgery
from elsewhere), read ``HELLO_BATCH`` at a time and then not for ``MOVED_PAUSE_S``;
the rest to the HELLO socket, whose filter keeps HELLOs carrying an admission tag of the
gateway's key for the windows within ``HELLO_WINDOW_S`` of its clock (swapped at each
window's start, :meth:`Gateway._rotate_tags`), read the same way (``HELLO_PAUSE_S``).
Garbage and HELLOs from anyone without the key cost the sender's CPU, not the
gateway's; a flood of anything else fills its own queue, not the sessions'. A tag an
on-path observer copied and floods with shows in failed HELLOs: after
``HELLO_STRIKE_FAILS`` of them it is struck from the HELLO socket's list (each window
has ``ADMIT_SLOTS`` tags and a client draws one per HELLO, so the others still admit),
and the kernel drops that flood too. A HELLO naming an open session (its client missed
the WELCOME) is answered only if dated after the session's newest: copies of one are
replays, dropped before any AEAD check. The
programs are rebuilt as sessions open, end and move. The kernel's drops (``SO_MEMINFO``,
``SO_RXQ_OVFL``) are ``dropped_kernel`` in the stats; while drops of any reason exceed
``FLOOD_RATE`` a second, one line a minute says so (:meth:`Gateway.watch_flood`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import ipaddress
import logging
import operator
import socket
import time
from collections import Counter
from dataclasses import dataclass, field

from tierwise.addresses import format_address
from tierwise.proto.relay import (
    ConnectionTerminated,
    Event,
    RelayConfig,
    RelayConnection,
    RelayStats,
    StreamDataReceived,
    StreamReset,
    wire,
)
from tierwise.proto.relay.connection import hello_admit_tag, hello_sent_s
from tierwise.proto.relay.crypto import ADMIT_WINDOW_S, admission_key, admission_tags
from tierwise.relay import kfilter, trace
from tierwise.relay.batchudp import BULK_READ_PAUSE_S, MAX_BATCH, BatchTransport, kernel_drops
from tierwise.relay.pathmemory import SAVE_EVERY_S, PathMemory
from tierwise.relay.pipe import NOT_ALLOWED, OK, REFUSED, UNREACHABLE, Pipe, parse_target
from tierwise.relay.reset import abort_with_rst
from tierwise.relay.session import Session
from tierwise.relay.udp import UDP_HOST, GatewayAssociation

__all__ = ["Gateway"]

log = logging.getLogger("tierwise.relay.gateway")
CONNECT_TIMEOUT_S = 10.0
HAPPY_EYEBALLS_S = 0.25  # RFC 8305 §5: try the next address after 250 ms
MAX_HEADER_BYTES = 258  # host length u8, up to 255 bytes of host, port u16 (pipe.py)
MAX_ASSOCIATIONS = 256  # UDP ASSOCIATE streams at once (each holds two sockets)
UDP_BUFFER_BYTES = 1 << 20
GENERAL_FAILURE = 1
# A client says something at least every keep-alive (5 s): this much silence means it is
# gone, and its streams are reset towards the services (not after the proto's 30 s).
IDLE_TIMEOUT_S = 12.0
# Sessions listed one by one in the stats (the busiest by bytes carried): a gateway with
# thousands of sessions answers in bounded work; the totals still count every session.
STATS_SESSIONS = 32
# Datagrams the gateway drops before any session sees them, by reason (its own counters).
GATEWAY_DROPS = ("dropped_malformed", "dropped_unknown_session", "dropped_auth", "dropped_replay")
# A HELLO dated further than this from the gateway's clock is refused (as unauthentic):
# a recorded HELLO can be replayed within it at most, and the ledger below refuses that.
HELLO_WINDOW_S = 120.0
HELLO_LEDGER_MAX = 65536  # HELLOs remembered (an entry is a session id and a time)
# HELLOs dated before the gateway started (less this, for the client's clock) are refused:
# a restarted gateway remembers nothing, and a replay of an old HELLO must not pass then.
HELLO_RESTART_SLACK_S = 2.0
CLOCK_WARN_EVERY_S = 60.0  # at most one log line a minute for HELLOs dated off the clock
# Floods: drops a second (every reason, the kernel's too) that make a log line, at most
# one a minute while they last (and one when they end); HELLOs read per wake-up.
FLOOD_RATE = 1000.0
FLOOD_WARN_EVERY_S = 60.0
HELLO_BATCH = 16
# after a full batch from the moved socket (a session's DATA from another address than
# its own: a client that moved, or a replay), no read for this long: at most 4,000 a
# second, what a replay or forgery flood can cost; a moving client needs one through
MOVED_PAUSE_S = 0.004
# the same for the HELLO socket: what passes its filter has the key's admission tag, so a
# flood there replays a tag seen on the path; at most 16,000 AEAD checks a second (6.7 µs
# of Python each, and the read: some 15 % of the gateway's core under such a flood). A
# new client's HELLO gets into a flooded queue in proportion to what is read: admission
# is worth more here than the moved socket's few percent (a moved client sends on).
HELLO_PAUSE_S = 0.001
# A tag that has been in this many failed HELLOs (forged, replayed, refused by their date)
# was copied from the path: it is struck from the HELLO socket's list until its window
# leaves the clock tolerance, and the kernel drops its flood. A client's own HELLOs never
# fail; a client that drew the struck slot draws another with its next HELLO.
HELLO_STRIKE_FAILS = 16
STRIKE_WARN_EVERY_S = 60.0
STAT_NAMES = tuple(f.name for f in dataclasses.fields(RelayStats))
_stat_values = operator.attrgetter(*STAT_NAMES)


class HelloLedger:
    """The HELLOs that opened sessions, so that a recorded one replayed opens none.

    A HELLO is dated by its client (authenticated with it). One dated more than
    ``HELLO_WINDOW_S`` off the gateway's clock is refused; within that window each
    session id is taken once. Memory is bounded: entries older than the window go (the
    window refuses them), and past ``HELLO_LEDGER_MAX`` entries the oldest goes and
    the watermark rises to its date: HELLOs dated at or below it are refused.
    """

    def __init__(self, started_wall_s: float, max_entries: int = HELLO_LEDGER_MAX) -> None:
        self.watermark_s = started_wall_s - HELLO_RESTART_SLACK_S
        self.max_entries = max_entries
        self._seen: dict[bytes, float] = {}  # session id: its HELLO's date, oldest admitted first

    def __len__(self) -> int:
        return len(self._seen)

    def refuse(self, cid: bytes, sent_s: float | None, wall_s: float) -> str | None:
        """Why a HELLO naming no session is refused before its AEAD check: "auth" (undated,
        or dated outside the window), "replay" (seen, or dated at or below the watermark);
        None if it may go on to the check."""
        if sent_s is None or abs(sent_s - wall_s) > HELLO_WINDOW_S:
            return "auth"
        if sent_s <= self.watermark_s or cid in self._seen:
            return "replay"
        return None

    def admit(self, cid: bytes, sent_s: float, wall_s: float) -> None:
        """An authentic HELLO opened a session: remember it, within the bounds."""
        seen = self._seen
        seen[cid] = sent_s
        while seen:
            oldest, date = next(iter(seen.items()))
            if len(seen) > self.max_entries:
                self.watermark_s = max(self.watermark_s, date)
            elif date >= wall_s - HELLO_WINDOW_S:
                break
            del seen[oldest]


@dataclass
class _Pending:
    buf: bytearray = field(default_factory=bytearray)
    pipe: Pipe | GatewayAssociation | None = None
    connecting: bool = False
    early: list[tuple[bytes, bool]] = field(default_factory=list)
    # refused or unreachable: its status went out with our FIN, and the bytes the client
    # sent before it heard are dropped here, never read as a new stream's header
    answered: bool = False


class Gateway(asyncio.DatagramProtocol):
    """The gateway's UDP endpoint and its sessions."""

    def __init__(
        self,
        key: bytes,
        allow: set[tuple[str, int]],
        config: RelayConfig | None = None,
        max_sessions: int = 64,
    ) -> None:
        config = config or RelayConfig(idle_timeout_s=IDLE_TIMEOUT_S)
        # its pipes report what the services' sockets took (a slow service holds the window)
        config = dataclasses.replace(config, credit_on_consume=True)
        self.key, self.allow, self.config = key, allow, config
        self._allow = {(canonical_host(host), port) for host, port in allow}
        self.counters: Counter[str] = Counter()
        self.associations = 0
        self.max_sessions = max_sessions
        self.sessions: dict[bytes, Session] = {}
        self._streams: dict[tuple[bytes, int], _Pending] = {}
        self._tasks: set[asyncio.Task] = set()
        self.transport: asyncio.DatagramTransport | None = None
        self._spare: RelayConnection | None = None
        self.ended: Counter[str] = Counter()  # RelayStats summed over sessions that ended
        self.started: dict[bytes, float] = {}  # session id: when it was established (loop)
        self.started_wall_s = time.time()
        self.hellos = HelloLedger(self.started_wall_s)
        self._clock_warned_s = 0.0  # no warning of a HELLO's date before this (Unix time)
        self._filtered: socket.socket | None = None  # the session socket, filtered (guard)
        self._hello_transport: BatchTransport | None = None  # HELLOs (guard)
        self._moved_transport: BatchTransport | None = None  # DATA from elsewhere (guard)
        self._peers: dict[bytes, tuple] = {}  # session id: address, as the steering has it
        self._flood = (0.0, 0)  # (when, drops) at the last watch_flood
        self._flood_warned_s = -FLOOD_WARN_EVERY_S  # the last flood line (watch's clock)
        self.flooded = False  # the last line said a flood is on
        self._admit_key = admission_key(key)
        self._admit_window = -1  # the window the tags below were made in
        self.admit_tags: frozenset[bytes] = frozenset()  # HELLOs' admission tags accepted
        self.struck: set[bytes] = set()  # admitted tags copied by a flooder (see the module)
        self._tag_fails: Counter[bytes] = Counter()  # failed HELLOs by their (listed) tag
        self._strike_warned_s = -STRIKE_WARN_EVERY_S
        self._hello_dates: dict[bytes, float] = {}  # session id: its newest authentic HELLO
        self._admit_timer: asyncio.TimerHandle | None = None
        # what sessions measured of each client's path (by its address), for its next one;
        # written at most every SAVE_EVERY_S as sessions end, and at close (pathmemory.py)
        self.memory: PathMemory | None = None
        self._memory_saved_s = 0.0

    @property
    def dropped(self) -> int:
        """Datagrams dropped before reaching a session (every reason, and refused HELLOs)."""
        return sum(self.counters[k] for k in (*GATEWAY_DROPS, "sessions_refused"))

    def kernel_drops(self) -> int:
        """Datagrams the kernel dropped before the gateway read them: its filters' drops
        and its queues' overflows, on the session and the HELLO socket."""
        total = 0
        for transport in (self.transport, self._hello_transport, self._moved_transport):
            sock = transport.get_extra_info("socket") if transport is not None else None
            if isinstance(sock, socket.socket) and sock.fileno() >= 0:
                drops = kernel_drops(sock)
                total += max(drops, getattr(transport, "kernel_drops", 0))
        return total

    def guard(self) -> bool:
        """Let the kernel drop what is not worth reading (see the module). If the session
        socket was bound with ``SO_REUSEPORT``, the HELLO and the moved sockets join it on
        the same port, and the steering program sends them all but a session's DATA from
        its own address.
        Whether the kernel filters (False where it refuses: every datagram is read)."""
        assert self.transport is not None
        sock = self.transport.get_extra_info("socket")
        if not isinstance(sock, socket.socket):
            return False
        self._filtered = sock
        slow = None
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT):
            slow = _slow_sockets(sock)
        if slow is not None:
            loop = asyncio.get_running_loop()
            inbox = _HelloInbox(self)
            self._hello_transport = BatchTransport(
                loop, slow[0], inbox, max_batch=HELLO_BATCH, pause_s=HELLO_PAUSE_S
            )
            self._moved_transport = BatchTransport(
                loop, slow[1], inbox, max_batch=HELLO_BATCH, pause_s=MOVED_PAUSE_S
            )
        if not self._refilter():
            self._filtered = None
            return False
        self._rotate_tags()
        return True

    def _admission(self, wall_s: float) -> bool:
        """The admission tags for ``wall_s`` (Unix time): those of every window within
        ``HELLO_WINDOW_S`` of it (a client's clock may be that far off); whether they
        changed."""
        window = int(wall_s // ADMIT_WINDOW_S)
        if window == self._admit_window:
            return False
        self._admit_window = window
        self.admit_tags = frozenset(admission_tags(self._admit_key, wall_s, HELLO_WINDOW_S))
        self.struck &= self.admit_tags
        self._tag_fails = Counter(
            {t: n for t, n in self._tag_fails.items() if t in self.admit_tags}
        )
        return True

    @property
    def open_tags(self) -> frozenset[bytes]:
        """The admission tags the kernel passes: the window's, less those struck."""
        return self.admit_tags - self.struck

    def _hello_failed(self, data: bytes) -> None:
        """A HELLO failed (forged, replayed, refused by its date): a listed tag seen in
        ``HELLO_STRIKE_FAILS`` of them is struck, and the kernel drops its flood."""
        tag = hello_admit_tag(data)
        if tag is None or tag not in self.admit_tags or tag in self.struck:
            return
        self._tag_fails[tag] += 1
        if self._tag_fails[tag] < HELLO_STRIKE_FAILS:
            return
        self.struck.add(tag)
        self.counters["hello_tags_struck"] += 1
        self._refilter_hellos()
        now = time.monotonic()
        if now - self._strike_warned_s >= STRIKE_WARN_EVERY_S:
            self._strike_warned_s = now
            log.warning(
                "an admission tag was copied from the path and flooded (%d failed HELLOs): "
                "struck, %d so far; the kernel drops its HELLOs",
                HELLO_STRIKE_FAILS, self.counters["hello_tags_struck"],
            )  # fmt: skip

    def _rotate_tags(self) -> None:
        """At each window's start: the HELLO socket's filter takes the new window's tag
        and leaves the oldest (one program swap every ``ADMIT_WINDOW_S``)."""
        wall_s = time.time()
        if self._admission(wall_s):
            self._refilter_hellos()
        wait_s = (self._admit_window + 1) * ADMIT_WINDOW_S - wall_s + 0.001
        self._admit_timer = asyncio.get_running_loop().call_later(wait_s, self._rotate_tags)

    def _refilter_hellos(self) -> None:
        if self._hello_transport is not None:
            sock = self._hello_transport.get_extra_info("socket")
            tagged = kfilter.hello_program(tags=self.open_tags)
            kfilter.attach_or_loosen(sock, tagged, kfilter.hello_program())  # never stale tags
        elif self._filtered is not None:
            self._refilter()

    def _refilter(self) -> bool:
        """The kernel's programs for the sessions now open and their addresses: the moved
        socket's filter (DATA naming a session), then the steering (a session's DATA from
        its address to the session socket); or, unsplit, the one socket's filter. Each
        swap is atomic; the order lets no session's datagram be dropped."""
        sock = self._filtered
        if sock is None:
            return False
        ids = list(self.sessions)
        if self._hello_transport is None:
            self._admission(time.time())
            tags = self.open_tags
            return kfilter.attach_or_loosen(
                sock,
                kfilter.gateway_program(ids, tags=tags),
                kfilter.gateway_program(ids, tags=tags, loose=True),
            )
        assert self._moved_transport is not None
        moved = self._moved_transport.get_extra_info("socket")
        peers = {cid: s.conn.peer_addr for cid, s in self.sessions.items() if s.conn.peer_addr}
        self._peers = peers
        loose = kfilter.moved_program(ids, loose=True)
        ok = kfilter.attach_or_loosen(moved, kfilter.moved_program(ids), loose)
        steer = kfilter.steer_program(peers.items())
        loose = kfilter.steer_program(loose=True)
        return kfilter.attach_or_loosen(sock, steer, loose, steering=True) and ok

    def slow_received(self, batch: list[tuple[bytes, tuple]], arrivals: list[float] | None) -> None:
        """A batch from the HELLO or moved socket (sessions' DATA from another address):
        as any batch, then the steering follows a session that moved (or one that opened)."""
        self.datagrams_received(batch, arrivals)
        peers = self._peers
        if len(peers) != len(self.sessions) or any(
            peers.get(cid) != s.conn.peer_addr for cid, s in self.sessions.items()
        ):
            self._refilter()

    def watch_flood(self, now: float) -> None:
        """Called about once a second (``now``: a monotonic clock): a warning while drops
        exceed ``FLOOD_RATE`` a second, at most one a minute; one line when it ends."""
        drops = self.dropped + self.kernel_drops()
        then, before = self._flood
        self._flood = (now, drops)
        if now <= then:
            return
        rate = (drops - before) / (now - then)
        if rate >= FLOOD_RATE and now - self._flood_warned_s >= FLOOD_WARN_EVERY_S:
            self._flood_warned_s, self.flooded = now, True
            totals = self.counters
            log.warning(
                "flood: %.0f datagrams/s dropped unread (kernel %d, malformed %d, "
                "unknown session %d, auth %d, replay %d so far); %d sessions open",
                rate, self.kernel_drops(), totals["dropped_malformed"],
                totals["dropped_unknown_session"], totals["dropped_auth"],
                totals["dropped_replay"], len(self.sessions),
            )  # fmt: skip
        elif rate < FLOOD_RATE and self.flooded:
            self.flooded = False
            log.info("flood over: %.0f datagrams/s dropped", rate)

    @property
    def busy(self) -> bool:
        """Streams still open: what a drain (SIGTERM) waits for. A stream counts until
        its connection forgets it (every byte and FIN both ways acknowledged), not only
        until its record goes: a service's answer read to its end may still be unsent."""
        return bool(self._streams) or any(s.conn.stream_ids for s in self.sessions.values())

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.datagrams_received([(data, addr)])

    def datagrams_received(
        self, batch: list[tuple[bytes, tuple]], arrivals: list[float] | None = None
    ) -> None:
        """Feed a batch to its sessions, then let each session that got some send once."""
        if arrivals and trace.enabled():  # kernel arrival stamps: the wake-up's lateness
            trace.event("rxb", len(batch), f"{arrivals[0]:.6f}", f"{arrivals[-1]:.6f}")
        busy: dict[int, Session] = {}
        acked: set[int] = set()  # sessions whose prompt ACK left mid-batch (once a batch each)
        last = len(batch) - 1
        try:
            now: float | None = asyncio.get_running_loop().time()  # the clock, once a batch
        except RuntimeError:  # fed outside a loop (no session can be in it)
            now = None
        for i, (data, addr) in enumerate(batch):
            session = self._receive(data, addr, arrivals[i] if arrivals else now, now)
            if session is not None:
                key = id(session)
                busy[key] = session
                if i < last and key not in acked and session.send_prompt_ack(now):
                    acked.add(key)
        for session in busy.values():
            session.transmit()
        # every session this batch fed is receiving a bulk flight or pacing one out: what
        # comes next is read in a millisecond at once, or with the first pacing timer if that
        # fires sooner (a request of another session waits that long at most)
        if (
            busy
            and len(batch) < MAX_BATCH
            and all(s.read_delay_s >= BULK_READ_PAUSE_S for s in busy.values())
        ):
            pause = getattr(self.transport, "pause_reading_until", None)
            if pause is not None:
                timers = [t for s in busy.values() if (t := s.timer_at) is not None]
                pause(min(timers) if timers else 0.0, BULK_READ_PAUSE_S)

    def _receive(
        self, data: bytes, addr: tuple, at: float | None = None, now: float | None = None
    ) -> Session | None:
        """One datagram; the session it fed, if it still has to transmit. ``now``: the
        loop's clock, if the caller read it (once a batch)."""
        try:
            kind, cid, pn = wire.parse_header(data)
        except wire.FrameError:
            self.counters["dropped_malformed"] += 1
            return None
        session = self.sessions.get(cid)
        if session is None:
            if kind != wire.HELLO:
                self.counters["dropped_unknown_session"] += 1
                return None
            if len(self.sessions) >= self.max_sessions:
                self.counters["sessions_refused"] += 1
                return None
            self._hello(data, cid, addr)
            return None
        if kind == wire.HELLO and not self._hello_again(session, data, cid, addr):
            return None
        now = session.now() if now is None else now
        session.receive_parsed(data, kind, cid, pn, addr, now if at is None else at, now)
        return session

    def _hello_again(self, session: Session, data: bytes, cid: bytes, addr: tuple) -> bool:
        """A HELLO naming a session (its client did not hear the WELCOME): whether it is
        to be answered. A client dates each HELLO anew, so one dated no later than the
        session's newest is a copy (a replay flood would cost an AEAD check and a WELCOME
        each): dropped before the check, and its tag counted towards a strike."""
        sent_s = hello_sent_s(data)
        newest = self._hello_dates.get(cid)
        if sent_s is None or newest is None or sent_s <= newest:
            self.counters["dropped_replay"] += 1
            self._hello_failed(data)
            return False
        before = session.conn.stats.dropped_auth + session.conn.stats.dropped_malformed
        session.receive(data, addr)
        if session.conn.stats.dropped_auth + session.conn.stats.dropped_malformed == before:
            self._hello_dates[cid] = sent_s
        else:
            self._hello_failed(data)
        session.transmit()
        return False

    def _hello(self, data: bytes, cid: bytes, addr: tuple) -> None:
        """A HELLO naming no session: a new session if it is authentic, else one drop.

        A HELLO that fails its check leaves a connection untouched: keep it for the next
        one, so forged HELLOs cost an AEAD check, not a new connection (~80 µs).
        """
        wall_s = time.time()
        sent_s = hello_sent_s(data)
        refused = self.hellos.refuse(cid, sent_s, wall_s)
        if refused is not None:  # before the AEAD check: a replay costs no more than a parse
            self.counters["dropped_" + refused] += 1
            self._hello_failed(data)
            if sent_s is not None and refused == "auth" and wall_s >= self._clock_warned_s:
                self._clock_warned_s = wall_s + CLOCK_WARN_EVERY_S  # unauthenticated: rate-bound
                log.warning(
                    "a HELLO from %s:%s is dated %+.0f s from this clock and was refused "
                    "(clients' clocks must be within %g s of the gateway's; or it is a replay)",
                    *addr[:2], sent_s - wall_s, HELLO_WINDOW_S,
                )  # fmt: skip
            return
        if self._admission(wall_s):  # a new window (the timer may be late): the kernel too
            self._refilter_hellos()
        # no key, or another version; a struck tag still passes here: its HELLOs queued
        # before the strike include the one it was copied from
        if hello_admit_tag(data) not in self.admit_tags:
            self.counters["dropped_auth"] += 1
            return
        conn = self._spare or RelayConnection(self.key, is_client=False, config=self.config)
        # every stream is held from its first byte: what the gateway takes (a header, bytes
        # written to the service, bytes it drops) it credits, each byte once
        conn.hold_peer_streams = True
        self._spare = None
        before = conn.stats.dropped_auth, conn.stats.dropped_malformed
        now = asyncio.get_running_loop().time()
        conn.receive_datagram(data, addr, now)
        if not conn.established:
            self._spare = conn
            self.counters["dropped_auth"] += 1
            self._hello_failed(data)
            return
        # the forged HELLOs this spare connection rejected are counted above, not twice
        conn.stats.dropped_auth -= before[0]
        conn.stats.dropped_malformed -= before[1]
        prior = self.memory.recall(addr[0], wall_s) if self.memory is not None else None
        if prior is not None:
            conn.use_prior(prior)
        assert sent_s is not None  # refuse() took the undated
        self.hellos.admit(cid, sent_s, wall_s)
        self._hello_dates[cid] = sent_s
        session = Session(conn, self.transport, self._on_event)  # type: ignore[arg-type]
        self.sessions[cid] = session
        self._refilter()  # its DATA passes the kernel's filter before its WELCOME leaves
        self.started[cid] = now
        self.counters["sessions_opened"] += 1
        log.info("session %s from %s:%s", cid.hex(), *addr[:2])
        session.transmit()

    def _on_event(self, session: Session, event: Event) -> None:
        cid = session.conn.connection_id
        if self.sessions.get(cid) is not session:
            # its session ended: a datagram's frames after its CLOSE (or rebuilt from its
            # repairs) still come as events, and must not open or feed a stream
            return
        if isinstance(event, StreamDataReceived):
            self._on_data(session, event)
        elif isinstance(event, StreamReset):
            pending = self._streams.pop((cid, event.stream_id), None)
            if pending is not None and pending.pipe is not None:
                _break(pending.pipe)
            elif pending is not None:  # what it sent before a pipe took it: dropped
                dropped = len(pending.buf) + sum(len(data) for data, _ in pending.early)
                session.conn.stream_consumed(event.stream_id, dropped)
        elif isinstance(event, ConnectionTerminated):
            log.info("session %s ended: %s", cid.hex(), event.reason)
            self.remember(session, save=False)
            if self.sessions.pop(cid, None) is not None:
                self.ended.update(vars(session.conn.stats))
                self.counters["sessions_ended"] += 1
                self._refilter()
            self.started.pop(cid, None)
            self._hello_dates.pop(cid, None)
            session.close()
            for key in [k for k in self._streams if k[0] == cid]:
                pipe = self._streams.pop(key).pipe
                if isinstance(pipe, Pipe):
                    pipe.lose()  # a stream that had ended in full still drains into its socket
                elif pipe is not None:
                    pipe.abort()

    def _on_data(self, session: Session, event: StreamDataReceived) -> None:
        key = (session.conn.connection_id, event.stream_id)
        pending = self._streams.get(key)
        if pending is None:
            conn = session.conn
            if not conn.has_stream(event.stream_id):
                # no record and gone from the connection (reset here while its later bytes
                # waited in the same batch): its bytes are not a new stream's header
                if event.stream_id in conn.held:  # (not credited on arrival)
                    conn.stream_consumed(event.stream_id, len(event.data))
                return
            pending = self._streams[key] = _Pending()
        if pending.pipe is not None:
            pending.pipe.deliver(event.data, event.end_stream)
        elif pending.answered:  # credited on arrival (not held): dropped
            if event.end_stream:
                self._streams.pop(key, None)
        elif pending.connecting:
            pending.early.append((event.data, event.end_stream))
        else:
            # a header is at most MAX_HEADER_BYTES: the buffer holds less until it parses
            # (the event that completes it may carry much more: a chunk that waited for a
            # lost first packet)
            pending.buf += event.data
            target = parse_target(bytes(pending.buf))
            if target is None:
                if event.end_stream:  # ended before its header did: no stream to serve
                    session.conn.stream_consumed(event.stream_id, len(pending.buf))
                    session.conn.reset(event.stream_id, code=1)
                    self._streams.pop(key, None)
                return
            host, port, used = target
            pending.connecting = True
            # the header is taken; until a pipe writes them, the stream's other bytes wait
            # here uncredited: its window bounds them while the gateway connects (up to
            # CONNECT_TIMEOUT_S)
            session.conn.stream_consumed(event.stream_id, used)
            pending.early.append((bytes(pending.buf[used:]), event.end_stream))
            pending.buf.clear()
            task = asyncio.get_running_loop().create_task(self._connect(session, key, host, port))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connect(
        self, session: Session, key: tuple[bytes, int], host: str, port: int
    ) -> None:
        sid = key[1]
        conn = session.conn
        if host == UDP_HOST:
            await self._associate(session, key)
            return
        if not self.allowed(host, port):
            log.warning("refused %s:%s (not in --allow)", host, port)
            self.counters["refused"] += 1
            self._answer(session, sid, NOT_ALLOWED)
            return
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(
                    host, port, happy_eyeballs_delay=_eyeballs_delay(host)
                )
        except (OSError, TimeoutError) as exc:
            code = REFUSED if isinstance(exc, ConnectionRefusedError) else UNREACHABLE
            log.warning("cannot reach %s:%s: %s", host, port, exc)
            self._answer(session, sid, code)
            return
        pending = self._streams.get(key)
        if pending is None or not conn.has_stream(sid):
            self._streams.pop(key, None)
            if pending is not None:
                _credit_early(session, sid, pending.early)
            writer.close()
            return
        conn.send(sid, bytes([OK]))
        self.counters["connected"] += 1
        pending.pipe = Pipe(session, sid, writer)
        try:
            for data, end in pending.early:
                pending.pipe.deliver(data, end)
            pending.early.clear()
            session.transmit()  # the status now: the application waits for it before it sends
            await pending.pipe.pump(reader)
            await pending.pipe.closed.wait()
        finally:
            writer.close()
            # the stream is done at this end: no record of it stays (its held mark goes
            # with the connection's stream)
            if self._streams.get(key) is pending:
                del self._streams[key]

    def allowed(self, host: str, port: int) -> bool:
        """Whether ``host:port`` is on the allow-list exactly (never an open proxy)."""
        return (canonical_host(host), port) in self._allow

    async def _associate(self, session: Session, key: tuple[bytes, int]) -> None:
        sid = key[1]
        if self.associations >= MAX_ASSOCIATIONS:
            log.warning("UDP ASSOCIATE refused: %d associations open", self.associations)
            self._answer(session, sid, GENERAL_FAILURE)
            return
        pending = self._streams.get(key)
        if pending is None or not session.conn.has_stream(sid):
            return
        assoc = GatewayAssociation(session, sid, self.allowed, UDP_BUFFER_BYTES, self.counters)
        self.associations += 1
        try:
            await assoc.start()
            if self._streams.get(key) is not pending or not session.conn.has_stream(sid):
                return  # reset, or its session ended, while the sockets opened
            session.conn.send(sid, bytes([OK]))
            pending.pipe = assoc
            for data, end in pending.early:
                assoc.deliver(data, end)
            _credit_early(session, sid, pending.early)
            pending.early.clear()
            session.held.discard(sid)  # an association's bytes are credited as they arrive
            session.transmit()
            await assoc.closed.wait()
        finally:
            assoc.abort()
            self.associations -= 1
            self._streams.pop(key, None)

    def _answer(self, session: Session, sid: int, status: int) -> None:
        """A stream that gets no service: its status and our FIN; what it sent is dropped.

        Its stream stays known (``answered``) until the client ends or resets it, so bytes
        it sent before hearing the status are dropped and credited, not parsed as a new
        stream's header.
        """
        key = (session.conn.connection_id, sid)
        pending = self._streams.pop(key, None)
        session.held.discard(sid)
        conn = session.conn
        if not conn.has_stream(sid):
            return
        conn.send(sid, bytes([status]), end_stream=True)
        early = pending.early if pending is not None else []
        _credit_early(session, sid, early)
        if not any(end for _, end in early):
            self._streams[key] = _Pending(answered=True)
        session.transmit()

    def snapshot(self, listed: int | None = None) -> dict:
        """Totals over every session so far and the ``listed`` (``STATS_SESSIONS``)
        busiest sessions, SI units.

        Work: one pass over the sessions' counters and a ``listed``-sized heap; the
        sessions are read, never changed. No key material: each entry is the session's
        :meth:`~tierwise.proto.relay.RelayConnection.snapshot`, its id (in clear on the
        wire), its client's address and its age.
        """
        now = asyncio.get_running_loop().time()
        live = list(self.sessions.items())
        limit = STATS_SESSIONS if listed is None else listed
        busiest = heapq.nlargest(limit, live, key=lambda item: _carried(item[1]))
        return {
            "role": "gateway",
            "uptime_s": time.time() - self.started_wall_s,
            "sessions_open": len(live),
            "max_sessions": self.max_sessions,
            "streams_open": sum(len(s.conn.stream_ids) for _, s in live),
            "udp_associations_open": self.associations,
            "totals": self.totals(),
            "sessions_listed": len(busiest),
            "sessions": [self._entry(cid, s, now) for cid, s in busiest],
        }

    def totals(self) -> dict[str, int]:
        """Every counter, summed over ended and open sessions and the gateway's own drops.

        Column sums over one ``attrgetter`` row per session: a ``Counter.update`` per
        session was three quarters of an answer's time in a profile at 1,024 sessions
        (benchmarks/relay_gateway_stats.py measures an answer).
        """
        rows = [_stat_values(session.conn.stats) for session in self.sessions.values()]
        total = Counter(self.ended)
        if rows:
            for name, column in zip(STAT_NAMES, zip(*rows, strict=True), strict=True):
                total[name] += sum(column)
        for key in GATEWAY_DROPS:  # before any session: malformed, no session, forged HELLO
            total[key] += self.counters[key]
        total["dropped_kernel"] = self.kernel_drops()
        out = {key: total[key] for key in sorted({*STAT_NAMES, *total})}
        out["destinations_refused"] = self.counters["refused"] + self.counters["udp_refused"]
        for key in (
            "sessions_opened", "sessions_ended", "sessions_refused", "connected",
            "hello_tags_struck",
        ):  # fmt: skip
            out[key] = self.counters[key]
        udp = {k: v for k, v in self.counters.items() if k.startswith("udp_")}
        return {**out, **dict(sorted(udp.items()))}

    def _entry(self, cid: bytes, session: Session, now: float) -> dict:
        conn = session.conn
        return {
            "id": cid.hex(),
            "peer": format_address(conn.peer_addr or ("", 0)),
            "age_s": now - self.started.get(cid, now),
            **conn.snapshot(),
        }

    def remember(self, session: Session, save: bool = True) -> None:
        """Keep what ``session`` measured of its client's path; written now if ``save``,
        else once ``SAVE_EVERY_S`` has passed since the last write."""
        if self.memory is None or session.conn.peer_addr is None:
            return
        now = time.time()
        self.memory.remember(session.conn.peer_addr[0], session.conn.path_estimate(), now)
        if save or now - self._memory_saved_s >= SAVE_EVERY_S:
            self._memory_saved_s = now
            self.memory.save(now)

    def close(self) -> None:
        """Close every session; closing one delivers its ``ConnectionTerminated``, which
        removes it from ``sessions``, so iterate over a copy."""
        for session in list(self.sessions.values()):
            self.remember(session, save=False)
        if self.memory is not None:
            self._memory_saved_s = time.time()
            self.memory.save(self._memory_saved_s)
        for session in list(self.sessions.values()):
            session.conn.close_session()
            session.transmit()
            session.close()
        if self._admit_timer is not None:
            self._admit_timer.cancel()
            self._admit_timer = None
        for transport in (self._hello_transport, self._moved_transport):
            if transport is not None:
                transport.close()
        self._hello_transport = self._moved_transport = None


class _HelloInbox(asyncio.DatagramProtocol):
    """The HELLO and moved sockets' reader: batches go to the gateway like the session
    socket's, and the steering then follows a session that opened or moved."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.gateway.datagrams_received([(data, addr)])

    def datagrams_received(
        self, batch: list[tuple[bytes, tuple]], arrivals: list[float] | None = None
    ) -> None:
        self.gateway.slow_received(batch, arrivals)

    def error_received(self, exc: Exception) -> None:
        pass


def _slow_sockets(sock: socket.socket) -> tuple[socket.socket, socket.socket] | None:
    """The HELLO and the moved sockets on ``sock``'s port, steered to (see the module), or
    None where the kernel refuses a part (then one socket takes everything)."""
    made: list[socket.socket] = []
    try:
        # each filtered before it is bound: until the steering is on, what comes is hashed
        # over the group (there is no session yet: only HELLOs may stay)
        for _ in range(2):
            made.append(socket.socket(sock.family, socket.SOCK_DGRAM))
            made[-1].setblocking(False)
            made[-1].setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if not kfilter.attach(made[0], kfilter.hello_program()):
            raise OSError("no socket filter")
        if not kfilter.attach(made[1], kfilter.moved_program([])):
            raise OSError("no socket filter")
        for extra in made:
            extra.bind(sock.getsockname())
        if not kfilter.attach_steering(sock, kfilter.steer_program()):
            raise OSError("no reuseport steering")
    except OSError as exc:
        log.info("one socket takes every datagram (no steering): %s", exc)
        for extra in made:
            extra.close()
        return None
    return made[0], made[1]


def _carried(session: Session) -> int:
    """Bytes a session has carried both ways: what "busiest" means in the stats."""
    stats = session.conn.stats
    return stats.bytes_sent + stats.bytes_received


def _credit_early(session: Session, sid: int, early: list[tuple[bytes, bool]]) -> None:
    """Credit the bytes a stream sent while the gateway connected (they were held)."""
    if nbytes := sum(len(data) for data, _ in early):
        session.conn.stream_consumed(sid, nbytes)


def _break(pipe: Pipe | GatewayAssociation) -> None:
    """The service sees an RST, never a FIN, when the client's side of a stream is lost."""
    if isinstance(pipe, Pipe):
        abort_with_rst(pipe)
    else:
        pipe.abort()


def _eyeballs_delay(host: str) -> float | None:
    """Happy eyeballs for a name (its addresses raced, RFC 8305); none for an IP literal,
    which has one address: the race's tasks cost the event loop ≈ 0.35 ms of the connect
    (0.45 against 0.8 ms CPU here), while a new session's first flight waits to be read."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return HAPPY_EYEBALLS_S
    return None


def canonical_host(host: str) -> str:
    """An IP literal in its canonical text (``::1``, not ``0:0::1``); a name lower-cased."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host.lower().rstrip(".")
