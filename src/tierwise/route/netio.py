"""httpcore's network backend on plain asyncio protocols, for the gateway's upstream pools.

httpx (through httpcore) reaches the network through a pluggable backend; the default
one is anyio's, which for each read and write enters a cancel scope, checks the
running async library, yields to the event loop once (a checkpoint) and, for every
keep-alive check, builds a dict of the socket's attributes and polls it with a
system call. On the gateway's hot path that was a measurable share of a hop. This
backend is the same contract — ``read``/``write`` with a timeout, the same httpcore
exceptions, ``get_extra_info`` — over an :class:`asyncio.Protocol`: bytes arrive by
callback, a read that finds them returns without yielding, and ``is_readable`` (the
keep-alive check) looks at the state the loop keeps and then polls the socket once
(the loop may not have delivered a FIN the kernel already has).

Flow control: writes wait for the transport's ``resume_writing`` above its high-water
mark (as anyio does), and reading pauses once ``READ_HIGH_BYTES`` are buffered
unread. The upload watch (:mod:`tierwise.route.upload`) wraps this backend as it
wrapped anyio's.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
from collections import deque
from collections.abc import Iterable
from typing import Any

import httpcore

__all__ = ["AsyncioBackend"]

READ_HIGH_BYTES = 1 << 20  # stop reading from the socket with this much unread ...
READ_LOW_BYTES = 1 << 18  # ... until it is below this again


class _Protocol(asyncio.Protocol):
    """Buffers what arrives and wakes the one reader or writer that waits for it."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.eof = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[bool] | None = None
        self.paused_writing = False
        self.paused_reading = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.buffered += len(data)
        if self.buffered > READ_HIGH_BYTES and not self.paused_reading:
            self.paused_reading = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # let the transport close itself

    def connection_lost(self, exc: BaseException | None) -> None:
        self.eof, self.error = True, exc
        self._wake()

    def pause_writing(self) -> None:
        self.paused_writing = True

    def resume_writing(self) -> None:
        self.paused_writing = False
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(True)

    async def wait(self, timeout: float | None) -> bool:
        """Wait for the next event; False if ``timeout`` passed first. The timeout is one
        timer that settles the waiter (not ``asyncio.timeout``'s context manager, which
        cancels and uncancels the task: twice the work, on every read of every answer)."""
        loop = asyncio.get_running_loop()
        waiter = self.waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
        try:
            return await waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, protocol: _Protocol) -> None:
        self.p = protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self.p
        while not p.chunks and not p.eof:
            if not await p.wait(timeout):
                raise httpcore.ReadTimeout(f"no data within {timeout} s")
        if not p.chunks:
            if p.error is not None:
                raise httpcore.ReadError(str(p.error) or type(p.error).__name__)
            return b""
        chunk = p.chunks.popleft()
        if len(chunk) > max_bytes:
            p.chunks.appendleft(chunk[max_bytes:])
            chunk = chunk[:max_bytes]
        p.buffered -= len(chunk)
        if p.paused_reading and p.buffered < READ_LOW_BYTES:
            p.paused_reading = False
            p.transport.resume_reading()
        return chunk

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        p = self.p
        if not buffer:
            return
        if p.error is not None or p.transport.is_closing():
            raise httpcore.WriteError("connection closed")
        p.transport.write(buffer)
        while p.paused_writing:
            if p.error is not None or p.transport.is_closing():
                raise httpcore.WriteError("connection closed while writing")
            if not await p.wait(timeout):
                raise httpcore.WriteTimeout(f"could not write within {timeout} s")

    async def aclose(self) -> None:
        """As anyio closes: half-close, close, one loop step, then drop what is left."""
        t = self.p.transport
        if t.is_closing():
            return
        with contextlib.suppress(OSError, RuntimeError, NotImplementedError):
            t.write_eof()
        t.close()
        await asyncio.sleep(0)
        t.abort()

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    self.p.transport, self.p, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"TLS handshake took over {timeout} s") from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        self.p.transport = transport
        return self

    def get_extra_info(self, info: str) -> Any:
        t = self.p.transport
        if info == "is_readable":  # the keep-alive check: closed or unexpected bytes
            return self.p.eof or bool(self.p.chunks) or _readable(t.get_extra_info("socket"))
        if info == "ssl_object":
            return t.get_extra_info("ssl_object")
        if info == "client_addr":
            return t.get_extra_info("sockname")
        if info == "server_addr":
            return t.get_extra_info("peername")
        if info == "socket":
            return t.get_extra_info("socket")
        return None


def _readable(sock: Any) -> bool:
    """Whether the kernel holds bytes or a FIN for ``sock`` the loop has not delivered yet.

    The loop's own state lags under load (200 streams kept the gateway's loop seconds
    behind), and a pooled connection the server closed meanwhile must not be reused:
    one poll, as httpcore's own check does, closes that window."""
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend over asyncio protocols (see the module docstring)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol, host, port, local_addr=local
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"{host}:{port}: no connection in {timeout} s") from exc
        except OSError as exc:
            raise httpcore.ConnectError(f"{host}:{port}: {exc}") from exc
        sock = transport.get_extra_info("socket")
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for option in socket_options or ():
                sock.setsockopt(*option)
        return _Stream(protocol)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, protocol = await loop.create_unix_connection(_Protocol, path)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"{path}: no connection in {timeout} s") from exc
        except OSError as exc:
            raise httpcore.ConnectError(f"{path}: {exc}") from exc
        return _Stream(protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
