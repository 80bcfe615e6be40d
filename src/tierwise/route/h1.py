"""The gateway's upstream HTTP/1.1 client: an httpx transport parsed with httptools.

httpx reaches a server through a transport (``httpx.AsyncBaseTransport``); its
default one is httpcore's connection pool, whose HTTP/1.1 connection runs the pure
-Python h11 state machine and, per request, a handful of locks, events, cancel
scopes and async generators. Measured on the gateway's hot path (one small
completion, loopback, 2-vCPU guest) that client side cost ~1.1 ms of CPU per
request, against ~0.1 ms for the same bytes written and read by hand — most of what
the gateway added to a request. :class:`H1Transport` is the same contract for
every site, spoken two ways over one pool: as an httpx transport (the probes and the
pass-through talk to ``httpx.AsyncClient``), and directly (:meth:`H1Transport.send`:
the gateway's completions give the method, target, raw header pairs and body bytes and
read an :class:`Answer` — status, raw headers, body — with none of httpx's
``Request``/``Response``/``Headers``/``URL`` objects built per request, which cost the
hot path more than the bytes themselves). Either way the bytes go over httpcore's
network-backend interface (the gateway's :mod:`tierwise.route.netio` backend under
the upload watch, unchanged), and the response is parsed by httptools — llhttp, the
parser uvicorn already uses on the gateway's own side.

What it keeps from httpcore: a warm keep-alive pool per origin (``max_connections``
bound, idle connections expire after ``keepalive_expiry`` and are checked for a FIN
or stray bytes before reuse), connect/read/write/pool timeouts from the request's
``timeout`` extension, httpx's exception types, a connection closed — never reused —
when a response is not read to its end. HTTP/2 is not spoken (no site needs it; httpx's
default is HTTP/1.1 too).

What it adds: a pooled connection the server closes just as it is reused (its
keep-alive timer fires with the request unread: a reset, or a close with no answer)
is not the request's failure. A request that got not one byte of answer on a *reused*
connection is sent once more on a new connection, if its body can be sent again —
as browsers do; httpcore 1.0 raises instead (so before this transport served HTTPS and
relay sites too, the race there cost the client a failover or a 503). The server never
answered it, and the gateway would send it to another site anyway. Each resend is
counted (:attr:`H1Transport.resent`, and ``on_resend`` for the gateway's ``/metrics``).
Idle connections also expire sooner (:data:`KEEPALIVE_EXPIRY_S`) than the 5 s of
uvicorn, llama.cpp's server and vLLM, which leaves the race to a server whose loop is
late (a loaded host).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpcore
import httptools
import httpx

from tierwise.route.coalesce import JOIN_BYTES

__all__ = ["KEEPALIVE_EXPIRY_S", "Answer", "H1Transport", "Origin", "socks5_connect"]

READ_BYTES = 64 * 1024
# An idle connection is dropped before the usual server side keep-alive timeout (5 s in
# uvicorn, llama.cpp's cpp-httplib and vLLM): reusing one the server is closing races it.
KEEPALIVE_EXPIRY_S = 4.0
# How a reused connection's server shows it closed it unread (a reset, or a bare close).
_GONE = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
_ERRORS: dict[type[Exception], type[httpx.TransportError]] = {
    httpcore.ConnectTimeout: httpx.ConnectTimeout,
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadTimeout: httpx.ReadTimeout,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteTimeout: httpx.WriteTimeout,
    httpcore.WriteError: httpx.WriteError,
    httpcore.PoolTimeout: httpx.PoolTimeout,
}
_DEFAULT_PORTS = {"http": 80, "https": 443}
SOCKS_REPLY_MAX_BYTES = 262  # a SOCKS5 reply: 4 + (1 + 255) address + 2 port (RFC 1928 §6)


class _Parser:
    """httptools' callbacks for one response: status, headers, body pieces, the end."""

    __slots__ = ("body", "complete", "fed", "headers", "headers_done", "keep_alive", "parser")

    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.headers_done = False
        self.complete = False
        self.keep_alive = False  # llhttp answers this only inside its callbacks
        self.fed = False  # any byte of an answer received
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if 100 <= self.parser.get_status_code() < 200:  # an interim answer: the real one follows
            self.headers = []
            return
        self.headers_done = True
        self.keep_alive = self.parser.should_keep_alive()  # a HEAD answer ends here

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.headers_done:  # not the end of an interim (1xx) answer
            self.complete = True
            self.keep_alive = self.parser.should_keep_alive()


class _Connection:
    """One keep-alive connection to an origin."""

    __slots__ = ("closed", "idle_since", "reused", "stream")

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self.stream = stream
        self.idle_since = 0.0
        self.closed = False
        self.reused = False  # taken from the pool (it has answered before)

    def stale(self, now: float, expiry: float) -> bool:
        """Idle too long, or the server closed it or sent what nobody asked for."""
        return now - self.idle_since > expiry or bool(self.stream.get_extra_info("is_readable"))


class _Body(httpx.AsyncByteStream):
    """A response's body as it arrives; the connection goes back to the pool at its end."""

    def __init__(
        self,
        transport: H1Transport,
        key: Any,
        conn: _Connection,
        p: _Parser,
        request: httpx.Request | None,
        read_timeout: float | None,
        no_body: bool,
    ) -> None:
        self.t, self.key, self.conn, self.p, self.request = transport, key, conn, p, request
        self.read_timeout = read_timeout
        self.done = no_body or p.complete
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        p = self.p
        try:
            while True:
                if p.body:
                    chunks, p.body = p.body, []
                    for chunk in chunks:
                        yield chunk
                if self.done or p.complete:
                    self.done = True
                    break
                data = await _read(self.conn.stream, self.read_timeout, self.request)
                if not data:
                    if _until_close(p):  # a body delimited by the connection's end
                        self.done = True
                        self.t._discard(self.key, self.conn)
                        self.closed = True
                        continue
                    raise httpx.RemoteProtocolError(
                        "the server closed the connection mid-body", request=self.request
                    )
                _feed(p, data, self.request)
        except BaseException:
            await self.aclose()
            raise
        await self.aclose()

    async def read_all(self) -> bytes:
        """The whole body; an answer already parsed whole (a small one: one read) is
        joined at once, without the iterator."""
        p = self.p
        if not (self.done or p.complete):
            return b"".join([chunk async for chunk in self])
        chunks, p.body = p.body, []
        self.done = True
        await self.aclose()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.done and self.p.keep_alive:
            self.t._release(self.key, self.conn)
        else:
            await self.t._close(self.key, self.conn)


def _replayable(request: httpx.Request) -> bool:
    """The request's body is held whole (not a stream already consumed): it can be sent again."""
    try:
        request.content  # noqa: B018 - raises for a streamed body not read
    except httpx.RequestNotRead:
        return False
    return True


def _until_close(p: _Parser) -> bool:
    names = {k.lower() for k, _ in p.headers}
    return b"content-length" not in names and b"transfer-encoding" not in names


def _feed(p: _Parser, data: bytes, request: httpx.Request | None) -> None:
    p.fed = True
    try:
        p.parser.feed_data(data)
    except httptools.HttpParserUpgrade:
        raise httpx.RemoteProtocolError("unexpected upgrade", request=request) from None
    except httptools.HttpParserError as exc:
        raise httpx.RemoteProtocolError(f"malformed response: {exc}", request=request) from None


async def _read(stream: httpcore.AsyncNetworkStream, timeout: float | None, request) -> bytes:
    try:
        return await stream.read(READ_BYTES, timeout)
    except tuple(_ERRORS) as exc:
        raise _ERRORS[type(exc)](str(exc), request=request) from exc


@dataclass(frozen=True, slots=True)
class Origin:
    """Where :meth:`H1Transport.send` goes: the pool's key and the ``Host`` header."""

    key: tuple[str, str, int]  # scheme, host, port: the pool httpx requests share
    host_header: bytes

    @classmethod
    def of(cls, url: httpx.URL) -> Origin:
        if url.scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"{url.scheme}: this transport speaks http and https")
        key = (url.scheme, url.host, url.port or _DEFAULT_PORTS[url.scheme])
        return cls(key, url.netloc)


class Answer:
    """An upstream answer without httpx's model: the status, the header pairs as the
    server sent them, and the body — read whole (:meth:`aread`) or as it arrives
    (:meth:`aiter_raw`); the connection goes back to the pool at its end, or is closed
    by :meth:`aclose` before it."""

    __slots__ = ("_body", "headers", "status_code")

    def __init__(self, status_code: int, headers: list[tuple[bytes, bytes]], body: _Body):
        self.status_code = status_code
        self.headers = headers
        self._body = body

    def header(self, name: bytes) -> bytes | None:
        """The first value of header ``name`` (given in lower case), or None."""
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    async def aread(self) -> bytes:
        return await self._body.read_all()

    def aiter_raw(self) -> AsyncIterator[bytes]:
        return self._body.__aiter__()

    async def aclose(self) -> None:
        await self._body.aclose()


class _Out:
    """A request as the wire carries it: its head, its body (bytes or, from httpx, a
    stream of pieces), whether the pieces go chunked, whether it can be sent again."""

    __slots__ = ("body", "chunked", "head", "replayable", "request")

    def __init__(
        self,
        head: bytes,
        body: bytes | AsyncIterable[bytes],
        chunked: bool = False,
        replayable: bool = True,
        request: httpx.Request | None = None,
    ) -> None:
        self.head, self.body, self.chunked = head, body, chunked
        self.replayable, self.request = replayable, request


async def _send(stream, out: _Out, timeout: float | None) -> None:
    """Write ``out``: a small body joined to its head (one write), a larger one after it."""
    body = out.body
    try:
        if isinstance(body, bytes):
            if len(body) <= JOIN_BYTES:
                await stream.write(out.head + body, timeout)
            else:
                await stream.write(out.head, timeout)
                await stream.write(body, timeout)
            return
        chunked = out.chunked
        await stream.write(out.head, timeout)  # the backend joins a small body to it
        async for chunk in body:
            if chunk:
                data = b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk
                await stream.write(data, timeout)
        if chunked:
            await stream.write(b"0\r\n\r\n", timeout)
        else:
            await stream.write(b"", timeout)  # sends a head still held for a body
    except tuple(_ERRORS) as exc:
        raise _ERRORS[type(exc)](str(exc), request=out.request) from exc


class H1Transport(httpx.AsyncBaseTransport):
    """An httpx transport for HTTP/1.1 origins (http or https, direct or through a SOCKS5
    proxy: ``proxy="host:port"``) over an httpcore network backend."""

    def __init__(
        self,
        backend: httpcore.AsyncNetworkBackend,
        max_connections: int = 1000,
        max_keepalive: int = 256,
        keepalive_expiry: float = KEEPALIVE_EXPIRY_S,
        *,
        verify: ssl.SSLContext | bool = True,
        proxy: str | None = None,
        on_resend: Callable[[], None] | None = None,
    ) -> None:
        self.backend = backend
        self.max_connections = max_connections
        self.max_keepalive = max_keepalive
        self.keepalive_expiry = keepalive_expiry
        self.verify = verify
        self.ssl: ssl.SSLContext | None = None  # made at the first https connection
        self.proxy = _host_port(proxy) if proxy is not None else None
        self.on_resend = on_resend
        self.idle: dict[Any, deque[_Connection]] = {}
        self.active = 0  # connections open (idle or in use)
        self.n_idle = 0
        self.room = asyncio.Event()  # set when a connection closes (for a full pool)
        self.resent = 0  # requests sent again after a reused connection's server closed it

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """httpx's transport contract: ``request`` sent, its answer as an httpx response."""
        url = request.url
        if url.scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"{url.scheme}: this transport speaks http and https")
        t = request.extensions.get("timeout") or {}
        key = (url.scheme, url.host, url.port or _DEFAULT_PORTS[url.scheme])
        head = [request.method.encode(), b" ", url.raw_path, b" HTTP/1.1\r\n"]
        for name, value in request.headers.raw:
            head += [name, b": ", value, b"\r\n"]
        head.append(b"\r\n")
        chunked = request.headers.get("transfer-encoding", "").lower() == "chunked"
        replayable = _replayable(request)
        body = request.content if replayable and not chunked else request.stream
        out = _Out(b"".join(head), body, chunked, replayable, request)
        conn, p = await self._roundtrip(key, out, t)
        status = p.parser.get_status_code()
        no_body = request.method == "HEAD" or status in (204, 304)
        body = _Body(self, key, conn, p, request, t.get("read"), no_body)
        return httpx.Response(
            status,
            headers=p.headers,
            stream=body,
            extensions={"http_version": b"HTTP/1.1", "network_stream": conn.stream},
        )

    async def send(
        self,
        origin: Origin,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        timeout: Mapping[str, float | None],
    ) -> Answer:
        """``method target`` with ``headers`` (raw pairs, sent as they are after ``Host``)
        and ``body`` (its ``Content-Length`` added) to ``origin``; its answer's head read.
        ``timeout``: httpcore's ``connect``/``read``/``write``/``pool`` seconds. Errors
        are httpx's exception types, as from :meth:`handle_async_request`."""
        head = [method, b" ", target, b" HTTP/1.1\r\nhost: ", origin.host_header, b"\r\n"]
        for name, value in headers:
            head += [name, b": ", value, b"\r\n"]
        head += [b"content-length: ", b"%d" % len(body), b"\r\n\r\n"]
        conn, p = await self._roundtrip(origin.key, _Out(b"".join(head), body), timeout)
        status = p.parser.get_status_code()
        no_body = method == b"HEAD" or status in (204, 304)
        return Answer(status, p.headers, _Body(self, origin.key, conn, p, None,
                                               timeout.get("read"), no_body))  # fmt: skip

    async def _roundtrip(self, key, out: _Out, t: Mapping[str, Any]) -> tuple[_Connection, _Parser]:
        """``out`` sent on a pooled (or new) connection and its answer's head parsed:
        once more on a new connection if a reused one was closed unanswered."""
        request = out.request
        conn = await self._acquire(key, request, t.get("connect"), t.get("pool"))
        p = _Parser()
        try:
            await self._exchange(key, conn, p, out, t)
        except _GONE:
            if not conn.reused or p.fed or not out.replayable:
                raise
            # closed by the server as it was reused, never answered: once more, on a new one
            self.resent += 1
            if self.on_resend is not None:
                self.on_resend()
            conn = await self._acquire(key, request, t.get("connect"), t.get("pool"), new=True)
            p = _Parser()
            await self._exchange(key, conn, p, out, t)
        return conn, p

    async def _exchange(self, key, conn: _Connection, p: _Parser, out: _Out, t) -> None:
        """Send ``out`` on ``conn`` and read its answer's head into ``p``; the
        connection is closed on any failure."""
        request = out.request
        try:
            await _send(conn.stream, out, t.get("write"))
            while not p.headers_done:
                data = await _read(conn.stream, t.get("read"), request)
                if not data:
                    raise httpx.RemoteProtocolError(
                        "the server closed the connection without a response", request=request
                    )
                _feed(p, data, request)
        except BaseException:
            await self._close(key, conn)
            raise

    async def _acquire(
        self, key, request, connect_timeout, pool_timeout, new: bool = False
    ) -> _Connection:
        """A pooled connection to ``key`` that is still good (unless ``new``), else a new
        one; with the pool full, an idle connection is closed, or the request waits for
        one to be released or closed (up to the pool timeout)."""
        deadline = None if pool_timeout is None else time.monotonic() + pool_timeout
        while True:
            idle = None if new else self.idle.get(key)
            while idle:
                conn = idle.pop()  # the most recently used: warmest, least likely expired
                self.n_idle -= 1
                if not conn.stale(time.monotonic(), self.keepalive_expiry):
                    conn.reused = True
                    return conn
                await self._close(key, conn)
            if self.active < self.max_connections:
                break
            if self.n_idle:  # make room: close an origin's longest-idle connection
                other = next(k for k, q in self.idle.items() if q)
                await self._close(other, self._pop_oldest(other))
                continue
            self.room.clear()
            try:
                left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                async with asyncio.timeout(left):
                    await self.room.wait()
            except TimeoutError:
                raise httpx.PoolTimeout("no connection free in time", request=request) from None
        self.active += 1
        try:
            stream = await self._connect(key, connect_timeout)
        except BaseException as exc:
            self._closed_one()
            if type(exc) in _ERRORS:
                raise _ERRORS[type(exc)](str(exc), request=request) from exc
            if isinstance(exc, httpcore.ProxyError):
                raise httpx.ProxyError(str(exc), request=request) from exc
            raise
        return _Connection(stream)

    async def _connect(self, key, timeout: float | None) -> httpcore.AsyncNetworkStream:
        """A new connection to ``key``: TCP (to the proxy, then its ``CONNECT``), then TLS
        for https; closed again if a later step fails."""
        scheme, host, port = key
        first = self.proxy or (host, port)
        stream = await self.backend.connect_tcp(first[0], first[1], timeout=timeout)
        try:
            if self.proxy is not None:
                await socks5_connect(stream, host, port, timeout)
            if scheme == "https":
                stream = await stream.start_tls(self._ssl(), server_hostname=host, timeout=timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                await stream.aclose()
            raise
        return stream

    def _ssl(self) -> ssl.SSLContext:
        if self.ssl is None:
            ctx = self.verify if isinstance(self.verify, ssl.SSLContext) else None
            self.ssl = ctx or httpx.create_ssl_context(verify=self.verify)
            self.ssl.set_alpn_protocols(["http/1.1"])  # as httpcore asks, without HTTP/2
        return self.ssl

    def _pop_oldest(self, key) -> _Connection:
        self.n_idle -= 1
        return self.idle[key].popleft()

    def _release(self, key, conn: _Connection) -> None:
        """Back to the pool (or closed, past ``max_keepalive`` idle connections)."""
        if self.n_idle >= self.max_keepalive:
            self._discard(key, conn)
            return
        conn.idle_since = time.monotonic()
        self.idle.setdefault(key, deque()).append(conn)
        self.n_idle += 1
        self.room.set()

    def _discard(self, key, conn: _Connection) -> None:
        """Close without waiting (from a body's end, where nothing may block)."""
        task = asyncio.get_running_loop().create_task(self._close(key, conn))
        task.add_done_callback(lambda _: None)

    async def _close(self, key, conn: _Connection) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._closed_one()
        with contextlib.suppress(Exception):
            await conn.stream.aclose()

    def _closed_one(self) -> None:
        self.active -= 1
        self.room.set()

    async def aclose(self) -> None:
        for key, q in list(self.idle.items()):
            while q:
                await self._close(key, self._pop_oldest(key))


def _host_port(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as a pair."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {address!r}")
    return host.strip("[]"), int(port)


async def socks5_connect(
    stream: httpcore.AsyncNetworkStream, host: str, port: int, timeout: float | None
) -> None:
    """Ask the SOCKS5 proxy at the other end of ``stream`` (the relay client) to connect
    it to ``host:port``, without authentication (RFC 1928), as httpcore's SOCKS pool does;
    ``httpcore.ProxyError`` when it refuses or answers something else."""
    import socksio
    from socksio import socks5

    conn = socks5.SOCKS5Connection()
    no_auth = socks5.SOCKS5AuthMethod.NO_AUTH_REQUIRED
    try:
        conn.send(socks5.SOCKS5AuthMethodsRequest([no_auth]))
        await stream.write(conn.data_to_send(), timeout)
        reply = conn.receive_data(await stream.read(SOCKS_REPLY_MAX_BYTES, timeout))
        if not isinstance(reply, socks5.SOCKS5AuthReply) or reply.method != no_auth:
            raise httpcore.ProxyError("the SOCKS5 proxy wants authentication")
        command = socks5.SOCKS5Command.CONNECT
        conn.send(socks5.SOCKS5CommandRequest.from_address(command, (host, port)))
        await stream.write(conn.data_to_send(), timeout)
        reply = conn.receive_data(await stream.read(SOCKS_REPLY_MAX_BYTES, timeout))
    except socksio.ProtocolError as exc:
        raise httpcore.ProxyError(f"not a SOCKS5 answer: {exc}") from None
    if not isinstance(reply, socks5.SOCKS5Reply):
        raise httpcore.ProxyError("not a SOCKS5 answer to CONNECT")
    if reply.reply_code != socks5.SOCKS5ReplyCode.SUCCEEDED:
        raise httpcore.ProxyError(f"the SOCKS5 proxy could not connect: {reply.reply_code.name}")
