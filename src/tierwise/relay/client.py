"""The client: a SOCKS5 proxy (RFC 1928, RFC 1929) and forwarded ports over one relay session.

Every accepted TCP connection becomes one relay stream whose first bytes name
the destination (:mod:`.pipe`); the gateway's status byte becomes the SOCKS
reply. Domain names travel as names and are resolved at the gateway. The
session is opened once and re-opened when it ends (gateway restart, client
address change beyond what the session survives, silence); streams of the old
session are reset, so their applications see the connection break.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tierwise.proto.relay import (
    ConnectionTerminated,
    Event,
    RelayConfig,
    RelayConnection,
    StreamDataReceived,
    StreamReset,
)
from tierwise.relay.pipe import OK, Pipe, encode_target
from tierwise.relay.session import Session

__all__ = ["Client"]

log = logging.getLogger("tierwise.relay.client")
SOCKS_VERSION = 5
NO_AUTH, USER_PASS, NO_METHOD = 0x00, 0x02, 0xFF
CMD_CONNECT = 1
GENERAL_FAILURE, CMD_UNSUPPORTED, ATYP_UNSUPPORTED = 0x01, 0x07, 0x08
STATUS_TIMEOUT_S = 15.0
DEAD_PEER_S = 1.0  # a restarted gateway is noticed this fast, and the session re-opened


class _Dialer(asyncio.DatagramProtocol):
    def __init__(self, owner: Client) -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        session = self.owner.session
        if session is not None:
            session.datagram_received(data, addr)


class Client:
    """One session to the gateway, shared by every proxied connection."""

    def __init__(
        self,
        key: bytes,
        gateway: tuple[str, int],
        config: RelayConfig | None = None,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        base = config or RelayConfig()
        self.config = RelayConfig(**{**vars(base), "dead_peer_s": DEAD_PEER_S})
        self.key, self.gateway, self.credentials = key, gateway, credentials
        self.session: Session | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self._handlers: dict[int, Callable[[Event], None]] = {}
        self.ready = asyncio.Event()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_datagram_endpoint(
            lambda: _Dialer(self), remote_addr=self.gateway
        )
        self._open()

    def _open(self) -> None:
        conn = RelayConnection(self.key, is_client=True, config=self.config)
        assert self._transport is not None
        self.session = Session(conn, self._transport, self._on_event)
        conn.connect(self.gateway, self.session.now())
        self.session.transmit()

    def _on_event(self, session: Session, event: Event) -> None:
        if session is not self.session:
            return
        if isinstance(event, ConnectionTerminated):
            log.warning("session ended (%s); re-opening", event.reason)
            self.ready.clear()
            handlers, self._handlers = self._handlers, {}
            for handler in handlers.values():
                handler(StreamReset(0, 1))
            session.close()
            self._open()
        elif isinstance(event, StreamDataReceived | StreamReset):
            handler = self._handlers.get(event.stream_id)
            if handler is not None:
                handler(event)
        else:
            log.info("session to %s:%s established", *self.gateway)
            self.ready.set()

    def snapshot(self) -> dict:
        return self.session.conn.snapshot() if self.session else {}

    async def open(self, host: str, port: int) -> tuple[int, Session, asyncio.Queue]:
        """A new stream to ``host:port``; its events arrive on the returned queue."""
        assert self.session is not None
        session = self.session
        sid = session.conn.open_stream()
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self._handlers[sid] = queue.put_nowait
        session.conn.send(sid, encode_target(host, port))
        session.transmit()
        return sid, session, queue

    async def proxy(
        self,
        host: str,
        port: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_status: Callable[[int], None] = lambda status: None,
    ) -> int:
        """Carry one TCP connection to ``host:port``; ``on_status`` hears the gateway first."""
        if not self.ready.is_set():
            try:
                async with asyncio.timeout(STATUS_TIMEOUT_S):
                    await self.ready.wait()
            except TimeoutError:
                on_status(GENERAL_FAILURE)
                return GENERAL_FAILURE
        sid, session, queue = await self.open(host, port)
        try:
            async with asyncio.timeout(STATUS_TIMEOUT_S):
                first = await queue.get()
        except TimeoutError:
            first = None
        ok = isinstance(first, StreamDataReceived) and first.data
        status = first.data[0] if ok else GENERAL_FAILURE  # type: ignore[union-attr]
        on_status(status)
        if status != OK:
            self._handlers.pop(sid, None)
            return status
        pipe = Pipe(session, sid, writer)
        pipe.deliver(first.data[1:], first.end_stream)  # type: ignore[union-attr]
        while not queue.empty():
            _to_pipe(pipe, queue.get_nowait())
        self._handlers[sid] = lambda e: _to_pipe(pipe, e)
        await pipe.pump(reader)
        await pipe.closed.wait()
        self._handlers.pop(sid, None)
        return OK


def _to_pipe(pipe: Pipe, event: Event) -> None:
    if isinstance(event, StreamDataReceived):
        pipe.deliver(event.data, event.end_stream)
    elif isinstance(event, StreamReset):
        pipe.abort()
