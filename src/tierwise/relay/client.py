"""The client: a SOCKS5 proxy (RFC 1928, RFC 1929) and forwarded ports over one relay session.

Every accepted TCP connection becomes one relay stream whose first bytes name
the destination (:mod:`.pipe`); the gateway's status byte becomes the SOCKS
reply. Domain names travel as names and are resolved at the gateway. The
session is opened once and re-opened when it ends (gateway restart, client
address change beyond what the session survives).

A gateway silent for the dead-peer time (``DEAD_PEER_S``, at most 3×) may be a
path blackout or a gateway that is gone; the client cannot tell yet, so it does
both: new streams go to a NEW session at once (a restarted gateway serves them as
soon as it is up), while the OLD session and its open streams are kept, probing
with backoff, for ``SILENT_GRACE_S``. If the old session hears an authentic
datagram again (the blackout is over) its streams carry on byte-exact. It ends —
and its streams are reset — on proof that the gateway lost it: the new session
reached the gateway while the old one stayed silent a few probe timeouts more (a
restarted gateway drops an unknown session's datagrams unanswered), or the
gateway's UDP port answers ICMP port unreachable (its process is gone); else when
the grace runs out. A reset stream's application sees the connection break: the
TCP connection is aborted with an RST (``SO_LINGER`` 0), never closed with a FIN
that would pass truncated data off as complete. UDP ASSOCIATE: :mod:`.udp`.

The client's UDP socket is connected to the gateway (the kernel drops what comes from
any other address) and carries a socket filter (:func:`.kfilter.client_program`):
only WELCOME or DATA naming one of its session ids (the current one and the older
ones still lingering), DATA with a packet number its sessions could have reached,
reaches Python; a spoofed flood is dropped at the sender's cost.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import fields

from tierwise.proto.relay import (
    ConnectionTerminated,
    Event,
    HandshakeCompleted,
    PeerResponsive,
    PeerSilent,
    RelayConfig,
    RelayConnection,
    StreamDataReceived,
    StreamReset,
)
from tierwise.relay import kfilter, trace
from tierwise.relay.batchudp import (
    BULK_READ_PAUSE_S,
    MAX_BATCH,
    kernel_drops,
    open_batch_endpoint,
)
from tierwise.relay.pathmemory import SAVE_EVERY_S, PathMemory
from tierwise.relay.pipe import OK, Pipe, encode_target
from tierwise.relay.reset import abort_with_rst
from tierwise.relay.session import Session, widen_buffers
from tierwise.relay.udp import UDP_HOST, ClientAssociation

__all__ = ["Client"]

log = logging.getLogger("tierwise.relay.client")
SOCKS_VERSION = 5
NO_AUTH, USER_PASS, NO_METHOD = 0x00, 0x02, 0xFF
CMD_CONNECT, CMD_UDP_ASSOCIATE = 1, 3
GENERAL_FAILURE, CMD_UNSUPPORTED, ATYP_UNSUPPORTED = 0x01, 0x07, 0x08
STATUS_TIMEOUT_S = 15.0
DEAD_PEER_S = 1.0  # a silent gateway is noticed this fast, and a new session opened
SILENT_GRACE_S = 15.0  # a silent session's open streams wait this long for the path to return
UDP_BUFFER_BYTES = 1 << 20
PROBE_SILENCE_S = 0.5  # streams open and the gateway silent this long: probe it
REDIAL_S = 0.5  # while the handshake is unanswered, `relay client` says HELLO again this often
REPLAY_BYTES = 1 << 20  # what a stream keeps of its application's bytes until the status
SESSION_FIELDS = (  # the tunables `relay stats` shows (the [session] keys, tuning.py)
    *(f.name for f in fields(RelayConfig) if f.name != "credit_on_consume"),
)
SESSION_LOST = StreamReset(0, -1)  # what a stream's handler hears when the session ends
_CID = slice(1, 9)  # where a datagram's connection id is (wire.HEADER: type, id, number)
# The socket filter's token window (kfilter.client_window_program): the established
# session's next TOKEN_WINDOW packet numbers, TOKEN_BEHIND of them at most before the
# next expected (reordering), rebuilt once RELOAD_AT quarters of those ahead are
# received: every 1,488 packets, some 11 times a second at 180 Mbit/s (~0.85 ms each,
# most of it the kernel's check and JIT of 2,576 instructions: docs/benchmarks.md)
TOKEN_WINDOW = 2048
TOKEN_BEHIND = 64
RELOAD_AT = 3
MIN_TOKEN_WINDOW = 512  # refused at 2,048: 512; refused at 512: none (too many reloads)
# The window is *armed* only under attack (at rest its reloads would cost ~0.7 µs a
# packet; the bound and Python's token check, ~0.2 µs, stand in): when ARM_DROPS
# datagrams in a watch period (0.25 s) fail Python's checks (token, AEAD, replay), and
# for ARM_S after the last period in which the kernel dropped as many
ARM_DROPS = 16
ARM_S = 10.0


@functools.cache
def _token_window(size: int) -> kfilter.TokenWindow:
    """The window's template of ``size`` numbers (built once a process)."""
    return kfilter.TokenWindow(size)


class _Dialer(asyncio.DatagramProtocol):
    def __init__(self, owner: Client) -> None:
        self.owner = owner
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.datagrams_received([(data, addr)])

    def datagrams_received(
        self, batch: list[tuple[bytes, tuple]], arrivals: list[float] | None = None
    ) -> None:
        owner = self.owner
        session = owner.session
        if session is None:
            return
        if arrivals and trace.enabled():  # kernel arrival stamps: the wake-up's lateness
            trace.event("rxb", len(batch), f"{arrivals[0]:.6f}", f"{arrivals[-1]:.6f}")
        lingering = owner.lingering
        others: dict[int, Session] = {}
        if lingering:
            current = False  # a datagram for the current session (the watchdog's clock)
            for i, (data, addr) in enumerate(batch):
                target = session
                if data[_CID] != session.conn.connection_id:  # an older session's
                    target = lingering.get(data[_CID], session)
                if target is session:
                    current = True
                else:
                    others[id(target)] = target
                target.receive(data, addr, arrivals[i] if arrivals else None)
        else:  # (the usual case) every datagram is the current session's
            session.receive_batch(batch, arrivals)
            current = bool(batch)
        if current:
            owner.last_rx_s = session.now()
            conn = session.conn
            if conn.largest_received_pn >> 32 > owner.pn_high:  # every 2^32 packets
                owner.refilter()
            elif conn.largest_received_pn >= owner.reload_at and conn.established:
                owner.refilter()  # the token window (armed): at once, then as it moves on
            elif not owner.armed and owner.token_window:
                st = conn.stats
                if st.dropped_token + st.dropped_auth + st.dropped_replay >= owner.drops_mark:
                    owner.arm()  # forgeries reach Python: the kernel takes them from here
        session.transmit()
        for other in others.values():
            other.transmit()
        if len(batch) < MAX_BATCH and not others and session.read_delay_s >= BULK_READ_PAUSE_S:
            # a bulk flight arriving (or ACKs while one leaves): what comes next is read in
            # a millisecond at once, or with the pacing timer if that fires sooner
            pause = getattr(self.transport, "pause_reading_until", None)
            if pause is not None:
                at = session.timer_at
                pause(BULK_READ_PAUSE_S if at is None else at, BULK_READ_PAUSE_S)

    def error_received(self, exc: Exception) -> None:
        """An ICMP error on the connected socket: port unreachable means no gateway
        process listens there any more, so a silent session is gone (not a blackout)."""
        if isinstance(exc, ConnectionRefusedError):
            self.owner.port_closed()


class Client:
    """One session to the gateway, shared by every proxied connection."""

    def __init__(
        self,
        key: bytes,
        gateway: tuple[str, int],
        config: RelayConfig | None = None,
        credentials: tuple[str, str] | None = None,
        udp_buffer_bytes: int = UDP_BUFFER_BYTES,
        memory: PathMemory | None = None,
    ) -> None:
        base = config or RelayConfig()
        # dead_peer_s: see DEAD_PEER_S (unless set); credit_on_consume: its pipes report what
        # the applications' sockets took, so an application that stops reading holds the window;
        # silent_grace_s: SILENT_GRACE_S unless the config sets one
        dead_peer_s = DEAD_PEER_S if base.dead_peer_s is None else base.dead_peer_s
        grace = SILENT_GRACE_S if base.silent_grace_s is None else base.silent_grace_s
        self.config = RelayConfig(
            **{
                **vars(base),
                "dead_peer_s": dead_peer_s,
                "credit_on_consume": True,
                "silent_grace_s": grace,
            }
        )
        self.key, self.gateway, self.credentials = key, gateway, credentials
        self.session: Session | None = None  # the session new streams go to
        # older sessions gone silent with streams open, by connection id (see the module)
        self.lingering: dict[bytes, Session] = {}
        self._transport: asyncio.DatagramTransport | None = None
        self.ready = asyncio.Event()
        self.udp_buffer_bytes = udp_buffer_bytes
        self.last_rx_s = self._probed_s = 0.0
        self.pn_high = 0  # the socket filter's packet-number bound (kfilter.client_program)
        self.reload_at = -1  # the current session's number that moves its token window on
        self.token_window = TOKEN_WINDOW  # 0: no token window (the kernel refused one)
        self.reloads = 0
        self.armed = False  # the token window on (an attack seen: see ARM_DROPS)
        self.armed_until = 0.0
        self.drops_mark = ARM_DROPS  # the checks failed in Python that arm the window
        self._kernel_mark = 0  # the socket's kernel drops at the last watch period
        self._watchdog: asyncio.Task | None = None
        self._closed = False
        self.counters: Counter[str] = Counter()
        self.reachable: set[tuple[str, int]] = set()  # destinations the gateway accepted
        self._moves: set[asyncio.Task] = set()
        # what earlier sessions measured of the path to this gateway (pathmemory.py)
        self.memory = memory
        self.memory_peer = f"{gateway[0]}:{gateway[1]}"
        self._saved_s = 0.0
        self._told_dropped: weakref.WeakSet[Session] = weakref.WeakSet()  # dropped memory logged

    async def start(self) -> None:
        self._transport = await self._dial()
        self._open()
        self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        """While streams are open, a silent gateway is probed, so its death shows in ~1.5 s.

        A download only sends ACKs, which ask for no answer: without a probe a dead
        gateway would go unnoticed until the 5 s keep-alive, and the applications
        would hang that long before their connections are reset.
        """
        while True:
            await asyncio.sleep(PROBE_SILENCE_S / 2)
            self._watch_floods(time.monotonic())
            session = self.session
            if session is not None and session.now() - self._saved_s >= SAVE_EVERY_S:
                self._saved_s = session.now()
                self.remember(session)
            if session is None or not self.ready.is_set() or not session.handlers:
                continue
            now = session.now()
            if min(now - self.last_rx_s, now - self._probed_s) >= PROBE_SILENCE_S:
                self._probed_s = now
                self._probe()

    def _probe(self) -> None:
        """Send one PING: the gateway acknowledges it (and learns our address); unanswered,
        the session ends after ``dead_peer_s``."""
        assert self.session is not None
        self.session.conn.ping()
        self.session.transmit()

    async def _dial(self) -> asyncio.DatagramTransport:
        transport = await open_batch_endpoint(_Dialer(self), remote_addr=self.gateway)
        widen_buffers(transport)
        self._refilter(transport)
        return transport

    def _refilter(self, transport: asyncio.DatagramTransport | None = None) -> None:
        """The socket's filter for the session ids in use (an id stays until the next
        session opens: an extra pass costs Python a lookup, a missing one a session) and
        the packet numbers they may carry (a forgery's random number is dropped)."""
        transport = transport or self._transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None:
            return
        sessions = [*self.lingering.values()]
        if self.session is not None:
            sessions.append(self.session)
        ids = [s.conn.connection_id for s in sessions]
        highs = (s.conn.largest_received_pn >> 32 for s in sessions)  # none yet: -1 >> 32
        self.pn_high = max([0, *highs])
        current = self.session
        size = self.token_window
        armed = current is not None and size and self.armed
        accept = current.conn.accept_window(size, TOKEN_BEHIND) if armed else None
        if accept is not None:  # the established session: its next numbers and their tokens
            assert current is not None
            first, tokens, skip = accept
            block = _token_window(size).block(first, tokens, skip)
            cid = current.conn.connection_id
            raw = kfilter.client_window_program(ids, [(cid, block)], pn_high=self.pn_high)
            if kfilter.attach_raw(sock, raw):
                self.reload_at = first + TOKEN_BEHIND + RELOAD_AT * (size - TOKEN_BEHIND) // 4
                self.reloads += 1
                return
            smaller = size // 4 if size // 4 >= MIN_TOKEN_WINDOW else 0
            log.warning(
                "the kernel refused the socket filter's token window (%d numbers, %d "
                "instructions; net.core.optmem_max?): %s", size, len(raw) // 8,
                f"{smaller} numbers" if smaller else "packet numbers bounded only",
            )  # fmt: skip
            self.token_window = smaller
            if smaller:
                self._refilter(transport)
                return
        # before the WELCOME: built at once when it comes; refused: never again
        self.reload_at = -1 if self.token_window and current is not None and self.armed else 1 << 64
        kfilter.attach(sock, kfilter.client_program(ids, pn_high=self.pn_high))

    def _watch_floods(self, now: float) -> None:
        """Each watch period: a new count of failed checks to arm the token window at;
        armed, kept on while the kernel drops ARM_DROPS a period, off ARM_S after."""
        session = self.session
        if session is not None:
            st = session.conn.stats
            self.drops_mark = st.dropped_token + st.dropped_auth + st.dropped_replay + ARM_DROPS
        if not self.armed:
            return
        sock = self._transport.get_extra_info("socket") if self._transport else None
        dropped = kernel_drops(sock) if sock is not None else 0
        if dropped - self._kernel_mark >= ARM_DROPS:
            self.armed_until = now + ARM_S
        self._kernel_mark = dropped
        if now >= self.armed_until:
            self.armed = False
            self.counters["token_window_disarmed"] += 1
            self._refilter()

    def arm(self) -> None:
        """The token window on, now (forgeries with plausible packet numbers)."""
        self.armed, self.armed_until = True, time.monotonic() + ARM_S
        sock = self._transport.get_extra_info("socket") if self._transport else None
        self._kernel_mark = kernel_drops(sock) if sock is not None else 0
        self.counters["token_window_armed"] += 1
        self._refilter()

    def refilter(self) -> None:
        """The socket's filter again (a session's packet numbers passed another 2^32)."""
        self._refilter()

    async def rebind(self) -> None:
        """Move the sessions to a new local UDP port (as NAT rebinding or a roaming host would)."""
        old, self._transport = self._transport, await self._dial()
        for session in self.lingering.values():
            session.transport = self._transport
            session.conn.ping()  # a silent one's gateway may be waiting for our new address
            session.transmit()
        if self.session is not None and self.ready.is_set():
            self.session.transport = self._transport
            self._probe()  # speak first from the new address, or a download stalls
        elif self.session is not None:
            self.session.transport = self._transport
        if old is not None:
            old.close()

    @property
    def _handlers(self) -> dict[tuple[int, int], Callable[[Event], None]]:
        """Every open stream's handler, in every session (empty: nothing to drain)."""
        merged: dict[tuple[int, int], Callable[[Event], None]] = {}
        for session in (*self.lingering.values(), self.session):
            if session is not None:
                merged.update({(id(session), sid): h for sid, h in session.handlers.items()})
        return merged

    @property
    def busy(self) -> bool:
        """Streams still open: what a drain (SIGTERM) waits for. A stream counts until
        its connection forgets it (every byte and FIN both ways acknowledged), not only
        until its handler goes: an application's upload read to its end may be unsent."""
        sessions = (*self.lingering.values(), self.session)
        return bool(self._handlers) or any(s.conn.stream_ids for s in sessions if s is not None)

    def release(self, session: Session, stream_id: int) -> None:
        """A stream is done with its handler (and its reader: no longer ``held``); a silent
        older session with none left ends."""
        session.handlers.pop(stream_id, None)
        session.held.discard(stream_id)
        if not session.handlers and session.conn.connection_id in self.lingering:
            session.conn.close_session()
            session.transmit()

    def port_closed(self) -> None:
        """The gateway's UDP port is closed: every silent session is lost (see the module)."""
        for session in list(self.lingering.values()):
            session.conn.peer_unreachable("the gateway's UDP port is closed (ICMP)")
            session.transmit()

    def remember(self, session: Session) -> None:
        """Keep what ``session`` measured of the path for the next one (and write it)."""
        if self.memory is None:
            return
        state = session.conn.prior_state
        if state.startswith("dropped") and session not in self._told_dropped:
            self._told_dropped.add(session)
            log.warning("the path to %s changed: its memory was %s", self.memory_peer, state)
        now = time.time()
        if self.memory.remember(self.memory_peer, session.conn.path_estimate(), now):
            self.memory.save(now)

    def _open(self) -> None:
        prior = None if self.memory is None else self.memory.recall(self.memory_peer, time.time())
        if prior is not None:
            log.info(
                "path to %s remembered: min RTT %.1f ms, %.3g Mbit/s, loss %.1f %%",
                self.memory_peer, prior.min_rtt_s * 1e3, prior.rate_bytes_per_s * 8e-6,
                prior.loss * 100,
            )  # fmt: skip
        conn = RelayConnection(self.key, is_client=True, config=self.config, prior=prior)
        assert self._transport is not None
        self.session = Session(conn, self._transport, self._on_event)
        self._refilter()  # before its HELLO leaves: the WELCOME must pass
        conn.connect(self.gateway, self.session.now(), wall_s=time.time())
        self.session.transmit()

    def redial(self) -> None:
        """An application is waiting: do not sit out the HELLO backoff, say HELLO again now
        (the same HELLO: a gateway that got an earlier one answers from its session)."""
        session = self.session
        if self.ready.is_set() or session is None:
            return
        if session.conn.hello_now(session.now()):
            session.transmit()

    def _on_event(self, session: Session, event: Event) -> None:
        current = session is self.session
        cid = session.conn.connection_id
        if not current and self.lingering.get(cid) is not session:
            return
        if isinstance(event, StreamDataReceived | StreamReset):
            handler = session.handlers.get(event.stream_id)
            if handler is not None:
                handler(event)
            elif type(event) is StreamDataReceived and not event.end_stream:
                # bytes for a stream nobody reads any more (its application is gone; they
                # were credited on arrival): reset it, so the gateway stops sending into
                # it and its slot is freed at both ends, not kept until max_streams
                if session.conn.has_stream(event.stream_id):
                    session.conn.reset(event.stream_id, code=1)
        elif isinstance(event, ConnectionTerminated):
            self.remember(session)
            if not current:
                del self.lingering[cid]
                if session.handlers and not self._closed:
                    log.warning("silent session ended (%s): %d streams reset",
                                event.reason, len(session.handlers))  # fmt: skip
            elif not self._closed:
                log.warning("session ended (%s); re-opening", event.reason)
            if current:
                self.ready.clear()
            # closed by us (a drain that ran out) too: streams still open are reset, so
            # their applications see an error, never a clean end after truncated data
            handlers, session.handlers = session.handlers, {}
            for handler in handlers.values():
                handler(SESSION_LOST)
            session.close()
            if current and not self._closed:
                self._open()
        elif isinstance(event, PeerSilent):
            if not current or self._closed:
                return
            if not session.handlers:  # nothing to keep: as a session that ended
                session.conn.close_session()
                session.transmit()
                return
            log.warning(
                "gateway silent for %.1f s: new streams go to a new session; %d open streams "
                "wait up to %g s for the path to return",
                event.silence_s, len(session.handlers), self.config.silent_grace_s,
            )  # fmt: skip
            self.lingering[cid] = session
            self.ready.clear()
            self._open()
        elif isinstance(event, PeerResponsive):
            if current:
                return
            log.warning("the gateway answers again: %d streams carry on", len(session.handlers))
            fresh = self.session
            if fresh is not None and not fresh.conn.established:
                # the new session is not up yet: the old one serves new streams again
                fresh.close()
                del self.lingering[cid]
                self.session = session
                self.ready.set()
            elif not session.handlers:
                self.release(session, -1)
        elif isinstance(event, HandshakeCompleted) and current:
            log.info("session to %s:%s established", *self.gateway)
            self.ready.set()
            now = session.now()
            for old in list(self.lingering.values()):
                old.conn.superseded(now)  # the path works: a live old session answers
                old.transmit()

    def close(self) -> None:
        """End the session for good (no re-open): a CLOSE goes to the gateway."""
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self.session is not None:
            self.remember(self.session)
        for session in (*self.lingering.values(), self.session):
            if session is not None:
                session.conn.close_session()
                session.transmit()

    def snapshot(self) -> dict:
        base = self.session.conn.snapshot() if self.session else {}
        config = self.session.conn.config if self.session else self.config
        kept = {  # silent older sessions kept for their open streams (a blackout, maybe)
            "sessions_kept": len(self.lingering),
            "streams_kept": sum(len(s.handlers) for s in self.lingering.values()),
        }
        return {
            **base,
            **kept,
            **{key: self.counters[key] for key in sorted(self.counters)},
            "session": {k: getattr(config, k) for k in SESSION_FIELDS},
        }

    async def open(self, host: str, port: int) -> tuple[int, Session, asyncio.Queue]:
        """A new stream to ``host:port``; its events arrive on the returned queue."""
        assert self.session is not None
        session = self.session
        sid = session.conn.open_stream()
        # held from the start: whoever takes its bytes (the status byte, a pipe, a drop)
        # credits them, each byte once
        session.conn.hold(sid)
        queue: asyncio.Queue[Event] = asyncio.Queue()
        session.handlers[sid] = queue.put_nowait
        session.conn.send(sid, encode_target(host, port))
        session.transmit()
        return sid, session, queue

    async def _open_checked(
        self, host: str, port: int
    ) -> tuple[int, int, Session | None, asyncio.Queue | None, Event | None]:
        """Open a stream and wait for the gateway's status byte (or a timeout).

        Nothing of the application has been sent before the status arrives, so a
        stream whose session ended first is opened again on the next session.
        """
        for _attempt in range(2):
            if not await self._wait_ready():
                return GENERAL_FAILURE, -1, None, None, None
            sid, session, queue = await self.open(host, port)
            try:
                async with asyncio.timeout(STATUS_TIMEOUT_S):
                    first = await queue.get()
            except TimeoutError:
                first = None
            if first is not SESSION_LOST:
                break
        if isinstance(first, StreamReset):
            log.warning("no stream to %s:%s: the gateway refused or reset it", host, port)
        ok = isinstance(first, StreamDataReceived) and first.data
        status = first.data[0] if ok else GENERAL_FAILURE  # type: ignore[union-attr]
        if ok:
            session.conn.stream_consumed(sid, 1)  # the status byte, taken
        if status != OK:
            self._drop(session, sid, first, queue)
        return status, sid, session, queue, first

    def _drop(
        self,
        session: Session | None,
        sid: int,
        first: Event | None,
        queue: asyncio.Queue | None,
    ) -> None:
        """A checked stream nobody will read: what it delivered after the status byte
        is credited, the stream released and reset at both ends, which frees its slot
        (max_streams)."""
        if session is None:
            return
        dropped = len(first.data) - 1 if isinstance(first, StreamDataReceived) and first.data else 0
        while queue is not None and not queue.empty():
            event = queue.get_nowait()
            if isinstance(event, StreamDataReceived):
                dropped += len(event.data)
        session.conn.stream_consumed(sid, dropped)
        self.release(session, sid)
        if session.conn.has_stream(sid):
            session.conn.reset(sid, code=0)
        session.transmit()

    async def check(self, host: str, port: int) -> int:
        """The gateway's status for ``host:port`` (it connects there once; the stream is
        then reset): what a ``--forward`` is checked with when the client starts."""
        status, sid, session, queue, first = await self._open_checked(host, port)
        if status == OK and session is not None:
            self.reachable.add((host, port))
            self._drop(session, sid, first, queue)
        return status

    async def _wait_ready(self) -> bool:
        if self.ready.is_set():
            return True
        self.redial()
        try:
            async with asyncio.timeout(STATUS_TIMEOUT_S):
                await self.ready.wait()
        except TimeoutError:
            return False
        return True

    async def proxy(
        self,
        host: str,
        port: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_status: Callable[[int], None] | None = None,
    ) -> int:
        """Carry one TCP connection to ``host:port`` with no extra round trip.

        The stream-open leaves at once and the application's bytes follow it
        without waiting for the gateway's status byte. Without ``on_status``
        (``--forward``), and for SOCKS when the gateway has already accepted
        ``host:port`` once (:attr:`reachable`), the application is never held
        back: a refused destination then shows as a reset connection. The
        first SOCKS CONNECT to a destination waits for the status, so a refused
        one still gets its SOCKS error code.
        """
        if on_status is not None and (host, port) not in self.reachable:
            return await self._proxy_checked(host, port, reader, writer, on_status)
        if not await self._wait_ready():
            if on_status is not None:
                on_status(GENERAL_FAILURE)
            return GENERAL_FAILURE
        if on_status is not None:
            on_status(OK)  # optimistic (RFC 1928 §6 allows any bound address: 0.0.0.0:0)
        sid, session, queue = await self.open(host, port)
        pipe = Pipe(session, sid, writer)
        gate = _StatusGate(self, pipe, (host, port))
        session.handlers[sid] = gate
        while not queue.empty():
            gate(queue.get_nowait())
        await pipe.pump(reader)
        await pipe.closed.wait()
        self.release(pipe.session, pipe.stream_id)  # moved to a new session, maybe
        return OK if gate.status in (None, OK) else gate.status

    async def _proxy_checked(
        self,
        host: str,
        port: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_status: Callable[[int], None],
    ) -> int:
        """Wait for the gateway's status, then carry the connection (a SOCKS code on refusal)."""
        status, sid, session, queue, first = await self._open_checked(host, port)
        on_status(status)
        if status != OK:
            return status
        self.reachable.add((host, port))
        assert session is not None and queue is not None
        pipe = Pipe(session, sid, writer)
        pipe.deliver(first.data[1:], first.end_stream)  # type: ignore[union-attr]
        while not queue.empty():
            _to_pipe(pipe, queue.get_nowait())
        session.handlers[sid] = lambda e: _to_pipe(pipe, e)
        await pipe.pump(reader)
        await pipe.closed.wait()
        self.release(session, sid)
        return OK

    async def associate(
        self,
        app: tuple[str, int],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_reply: Callable[[int, tuple | None], None],
    ) -> int:
        """UDP ASSOCIATE (RFC 1928 §7): a relay port that lives as long as the TCP connection."""
        status, sid, session, queue, first = await self._open_checked(UDP_HOST, 0)
        if status != OK:
            on_reply(status, None)
            return status
        assert session is not None and queue is not None
        peer = writer.get_extra_info("peername")
        assoc = ClientAssociation(
            session, sid, (peer[0], app[1]), self.udp_buffer_bytes, self.counters
        )
        local = writer.get_extra_info("sockname")[0]
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: assoc, local_addr=(local, 0))
        on_reply(OK, transport.get_extra_info("sockname"))
        assoc.on_event(StreamDataReceived(sid, first.data[1:], first.end_stream))  # type: ignore[union-attr]
        taken = len(first.data) - 1  # type: ignore[union-attr]
        while not queue.empty():
            event = queue.get_nowait()
            taken += len(event.data) if isinstance(event, StreamDataReceived) else 0
            assoc.on_event(event)
        session.conn.stream_consumed(sid, taken)
        session.held.discard(sid)  # an association's bytes are credited as they arrive
        session.handlers[sid] = assoc.on_event
        eof = loop.create_task(_until_eof(reader))
        ended = loop.create_task(assoc.closed.wait())
        await asyncio.wait({eof, ended}, return_when=asyncio.FIRST_COMPLETED)
        for task in (eof, ended):
            task.cancel()
        assoc.close()
        self.release(session, sid)
        return OK


async def _until_eof(reader: asyncio.StreamReader) -> None:
    """Read and ignore the control connection until it closes (§7: it bounds the association)."""
    try:
        while await reader.read(4096):
            pass
    except (ConnectionError, OSError):
        pass


class _StatusGate:
    """A stream's events to its pipe, the gateway's status byte taken off the front.

    A status other than OK (or a stream that ends or is reset before one) resets the
    stream at both ends and aborts the application's connection with an RST. Until
    the status arrives the gate keeps what the application sent (up to
    ``REPLAY_BYTES``): if the session ends first (a restarted gateway), the stream is
    opened once more on the next session and those bytes sent again, as the
    status-first client did; beyond that bound the application sees a reset.
    """

    def __init__(self, client: Client, pipe: Pipe, target: tuple[str, int]) -> None:
        self.client, self.pipe, self.target = client, pipe, target
        self.status: int | None = None
        self.sent: bytearray | None = bytearray()
        self.fin = False
        pipe.tap = self._tap

    def _tap(self, data: bytes, fin: bool) -> None:
        if self.sent is None:
            return
        self.sent += data
        self.fin = self.fin or fin
        if len(self.sent) > REPLAY_BYTES:
            self.sent = None

    async def _move(self) -> None:
        """Open the stream again on the next session and send what the application sent."""
        client, pipe, sent = self.client, self.pipe, self.sent
        self.sent = None  # once only
        assert sent is not None
        try:
            if client._closed or not await client._wait_ready():
                abort_with_rst(pipe)
                return
            if pipe.closed.is_set():  # its application went away meanwhile: nothing to move
                return
            sid, session, queue = await client.open(*self.target)
            pipe.session, pipe.stream_id = session, sid
            if sent or self.fin:
                session.conn.send(sid, bytes(sent), end_stream=self.fin)
                session.transmit()
            session.handlers[sid] = self
        finally:
            # moved or not, the pump goes on (a stream that could not move: it sees it gone)
            pipe.movable.set()
        while not queue.empty():
            self(queue.get_nowait())

    def __call__(self, event: Event) -> None:
        if event is SESSION_LOST and self.status is None and self.sent is not None:
            self.pipe.movable.clear()
            task = asyncio.get_running_loop().create_task(self._move())
            self.client._moves.add(task)
            task.add_done_callback(self.client._moves.discard)
            return
        if self.status is not None or not isinstance(event, StreamDataReceived):
            if self.status is None:
                self.status = GENERAL_FAILURE
            _to_pipe(self.pipe, event)
            return
        if not event.data and not event.end_stream:
            return
        self.status = event.data[0] if event.data else GENERAL_FAILURE
        self.sent = None
        conn = self.pipe.session.conn
        # the status byte is taken here (the pipe credits what it writes); a refused
        # stream's other bytes are dropped with it
        conn.stream_consumed(event.stream_id, 1 if self.status == OK else len(event.data))
        if self.status == OK:
            self.client.reachable.add(self.target)
            if len(event.data) > 1 or event.end_stream:
                self.pipe.deliver(event.data[1:], event.end_stream)
            return
        self.client.reachable.discard(self.target)
        log.warning(
            "stream to %s:%s refused by the gateway (status %d): reset", *self.target, self.status
        )
        if conn.has_stream(self.pipe.stream_id):
            conn.reset(self.pipe.stream_id, code=0)
            self.pipe.session.transmit()
        abort_with_rst(self.pipe)


def _to_pipe(pipe: Pipe, event: Event) -> None:
    if isinstance(event, StreamDataReceived):
        pipe.deliver(event.data, event.end_stream)
    elif event is SESSION_LOST:
        pipe.lose()  # a stream that had ended in full still drains into its socket
    elif isinstance(event, StreamReset):
        abort_with_rst(pipe)
