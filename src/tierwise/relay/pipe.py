"""Joining a relay stream to a TCP connection, and the stream-open header both ends speak.

A stream starts with the destination the client wants, and the gateway's first
byte back is a status (the SOCKS5 reply codes of RFC 1928 §6)::

    client → gateway   host length u8 | host (UTF-8) | port u16
    gateway → client   status u8 (0 ok, 2 not allowed, 4 host unreachable, 5 refused)

Bytes flow both ways after that; a half-close (EOF) travels as the stream's FIN,
and an error on either side resets the stream so the other application sees a
broken connection, never a silently short one.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

from tierwise.relay import trace
from tierwise.relay.session import Session

__all__ = ["NOT_ALLOWED", "OK", "REFUSED", "UNREACHABLE", "Pipe", "encode_target", "parse_target"]

OK, NOT_ALLOWED, UNREACHABLE, REFUSED = 0, 2, 4, 5
READ_BYTES = 64 * 1024
SEND_BUFFER_MAX = 16 << 20  # stop reading the socket while this much is unacknowledged (2 × BDP)
_PORT = struct.Struct(">H")


def encode_target(host: str, port: int) -> bytes:
    raw = host.encode()
    return bytes([len(raw)]) + raw + _PORT.pack(port)


def parse_target(buf: bytes) -> tuple[str, int, int] | None:
    """``(host, port, header length)`` once the header is complete, else ``None``."""
    if not buf:
        return None
    end = 1 + buf[0] + 2
    if len(buf) < end:
        return None
    (port,) = _PORT.unpack_from(buf, end - 2)
    return buf[1 : end - 2].decode(errors="replace"), port, end


class Pipe:
    """Copies one TCP connection into one relay stream and back."""

    def __init__(self, session: Session, stream_id: int, writer: asyncio.StreamWriter) -> None:
        self.session, self.stream_id, self.writer = session, stream_id, writer
        self.closed = asyncio.Event()
        self._out = bytearray()
        self._eof = self._flush_due = False
        self.movable = asyncio.Event()  # cleared while the stream moves to a new session
        self.movable.set()
        self.tap: Callable[[bytes, bool], None] | None = None  # hears what is sent (and FIN)

    async def pump(self, reader: asyncio.StreamReader) -> None:
        """TCP → relay until EOF (then FIN) or an error (then reset)."""
        try:
            while data := await reader.read(READ_BYTES):
                await self.movable.wait()
                conn = self.session.conn
                if self.stream_id not in conn.stream_ids:
                    return
                conn.send(self.stream_id, data)
                trace.event("tcp_read", self.stream_id, len(data))
                if self.tap is not None:
                    self.tap(data, False)
                self.session.transmit()
                while conn.send_buffered_bytes(self.stream_id) > SEND_BUFFER_MAX:
                    await asyncio.sleep(0.005)
            await self.movable.wait()
            conn = self.session.conn
            if self.stream_id in conn.stream_ids:
                conn.close(self.stream_id)
                if self.tap is not None:
                    self.tap(b"", True)
        except (ConnectionError, OSError):
            conn = self.session.conn
            if self.stream_id in conn.stream_ids:
                conn.reset(self.stream_id, code=1)
        self.session.transmit()

    def deliver(self, data: bytes, end_stream: bool) -> None:
        """Relay → TCP, written once per event-loop turn (one ``send`` for a whole batch).

        Bytes for an application socket that is gone (closed, or broken by a failed
        write) reset the stream: the peer stops sending into it and its end sees an
        error, never an orderly close after bytes nobody read.
        """
        if self.writer.is_closing():
            if data:
                self._reset_stream()
                self.closed.set()
            return
        self._out += data
        self._eof = self._eof or end_stream
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Write what the batch delivered; a socket that is gone resets the stream."""
        self._flush_due = False
        data, self._out = bytes(self._out), bytearray()
        if self.writer.is_closing():
            if data:
                self._reset_stream()
                self.closed.set()
            return
        try:
            if data:
                self.writer.write(data)
                trace.event("tcp_write", self.stream_id, len(data), int(self._eof))
            if self._eof and self.writer.can_write_eof():
                self.writer.write_eof()
        except OSError:
            self._reset_stream()
            self.abort()
            return
        if self._eof:
            self.closed.set()

    def _reset_stream(self) -> None:
        conn = self.session.conn
        if self.stream_id in conn.stream_ids:
            conn.reset(self.stream_id, code=1)
            self.session.transmit()

    def abort(self) -> None:
        self._out.clear()
        self.writer.transport.abort()
        self.closed.set()
