"""One write per small HTTP message on both of the gateway's sides.

uvicorn writes a response's status line and headers when the app starts the response
and the body when it sends it; httpcore writes a request's head, then its body. On
loopback or a LAN each write is a system call, a segment and a wake-up of the reader
(who then finds half a message and sleeps again) — on a loaded machine a wake-up
waits for a core, so the two writes of each small message were a measurable part of
the hop. Here a small head is held back and leaves with what follows it, so a small
message is one write:

- :class:`HeadHolder` wraps uvicorn's transport (:func:`coalescing_protocol` is the
  httptools protocol that uses it): a response head waits for the body written in the
  same event-loop step, and goes alone on the next step if none comes (a stream's
  first event may be seconds away; its head must not wait for it).
- :class:`HeldHead` does the same inside the upstream connection (the gateway's
  network backend, :func:`tierwise.route.upload.watch_backend`): a request head waits
  for its body and goes alone before any read, so nothing is ever held while the
  gateway waits for an answer.

A body larger than ``JOIN_BYTES`` is not copied to be joined: the head goes first.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["JOIN_BYTES", "HeadHolder", "HeldHead", "coalescing_protocol"]

HOLD_BYTES = 16 * 1024  # a head this small waits for its body ...
JOIN_BYTES = 64 * 1024  # ... joined with it if the body is at most this large


def _is_head(data: bytes) -> bool:
    """A small HTTP message head (status or request line and headers, blank line)."""
    return len(data) <= HOLD_BYTES and data.endswith(b"\r\n\r\n")


class HeadHolder:
    """An asyncio transport whose small response heads leave with the next write."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held = b""

    def write(self, data: bytes) -> None:
        if self._held:
            held, self._held = self._held, b""
            if len(data) <= JOIN_BYTES:
                self._transport.write(held + data)
                return
            self._transport.write(held)
        elif data.startswith(b"HTTP/") and _is_head(data):
            self._held = data
            self._loop.call_soon(self.flush)
            return
        self._transport.write(data)

    def flush(self) -> None:
        """Send a held head now (its body did not follow within the loop step)."""
        if self._held:
            held, self._held = self._held, b""
            self._transport.write(held)

    def writelines(self, lines: Any) -> None:
        self.write(b"".join(lines))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # everything else is the transport's
        return getattr(self._transport, name)


def coalescing_protocol() -> type:
    """uvicorn's httptools protocol writing through a :class:`HeadHolder` (``http=``)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class CoalescingHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(HeadHolder(transport, self.loop))  # type: ignore[arg-type]

    return CoalescingHttpToolsProtocol


class HeldHead:
    """The upstream side's held request head: ``take`` what to write now, or b"" to hold.

    Used by the network stream wrapper: every write passes through :meth:`take`, and
    :meth:`release` gives what is held before a read or a paced upload."""

    def __init__(self) -> None:
        self.held = b""

    def take(self, data: bytes) -> list[bytes]:
        """The writes to make for ``data`` (none while a head waits for its body)."""
        if self.held:
            held, self.held = self.held, b""
            return [held + data] if len(data) <= JOIN_BYTES else [held, data]
        if not _is_head(data):
            return [data]
        self.held = data  # whatever follows (its body, or b"" for none) or a read sends it
        return []

    def release(self) -> bytes:
        held, self.held = self.held, b""
        return held
