"""Joining a relay stream to a TCP connection, and the stream-open header both ends speak.

A stream starts with the destination the client wants, and the gateway's first
byte back is a status (the SOCKS5 reply codes of RFC 1928 §6)::

    client → gateway   host length u8 | host (UTF-8) | port u16
    gateway → client   status u8 (0 ok, 2 not allowed, 4 host unreachable, 5 refused)

Bytes flow both ways after that; a half-close (EOF) travels as the stream's FIN,
and an error on either side resets the stream so the other application sees a
broken connection, never a silently short one.

Relay → TCP is flow-controlled end to end: the session grants the peer credit for a
stream's bytes only once the application's socket has taken them (the transport's
buffer drained below ``CREDIT_BUFFER_BYTES``), so a reader that stops holds the relay
to one stream window of buffered bytes instead of letting them pile up in memory.

Until the stream's FIN is in the kernel, the socket closes with an RST (``SO_LINGER``
zero), so a relay process that dies mid-transfer leaves its application an error,
not what looks like a complete, shorter stream.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

from tierwise.relay import trace
from tierwise.relay.reset import abort_with_rst, linger_zero
from tierwise.relay.session import Session

__all__ = ["NOT_ALLOWED", "OK", "REFUSED", "UNREACHABLE", "Pipe", "encode_target", "parse_target"]

OK, NOT_ALLOWED, UNREACHABLE, REFUSED = 0, 2, 4, 5
READ_BYTES = 64 * 1024
SEND_BUFFER_MAX = 16 << 20  # stop reading the socket while this much is unacknowledged (2 × BDP)
CREDIT_BUFFER_BYTES = 256 * 1024  # bytes written count as consumed once the buffer is below this
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
        session.conn.hold(stream_id)  # this pipe reports what its socket consumed
        linger_zero(writer.get_extra_info("socket"), True)  # an RST if this process dies
        self.closed = asyncio.Event()
        self._out: list[bytes] = []  # delivered this turn, not yet written (joined once)
        self._eof = self._flush_due = False
        self._written = 0  # written to the socket, not yet reported as consumed
        self._written_conn: object = None  # the connection those bytes came from
        self._crediting: asyncio.Task | None = None
        self._ending: asyncio.Task | None = None
        self.movable = asyncio.Event()  # cleared while the stream moves to a new session
        self.movable.set()
        self.tap: Callable[[bytes, bool], None] | None = None  # hears what is sent (and FIN)

    async def pump(self, reader: asyncio.StreamReader) -> None:
        """TCP → relay until EOF (then FIN) or an error (then reset)."""
        try:
            while data := await reader.read(READ_BYTES):
                await self.movable.wait()
                conn = self.session.conn
                if not conn.has_stream(self.stream_id):
                    return
                conn.send(self.stream_id, data)
                trace.event("tcp_read", self.stream_id, len(data))
                if self.tap is not None:
                    self.tap(data, False)
                self.session.transmit()
                while conn.send_buffered_bytes(self.stream_id) > SEND_BUFFER_MAX:
                    if not conn.established:  # its session ended: nothing more will leave
                        return  # (the session's owner breaks this pipe)
                    await asyncio.sleep(0.005)
            await self.movable.wait()
            conn = self.session.conn
            if conn.has_stream(self.stream_id):
                conn.close(self.stream_id)
                if self.tap is not None:
                    self.tap(b"", True)
        except (ConnectionError, OSError):
            # the application's socket broke: the peer sees a reset, and this pipe is done
            # both ways (its owner waits on ``closed``, which nothing else would set now)
            self._reset_stream()
            self.abort()
            return
        self.session.transmit()

    def deliver(self, data: bytes, end_stream: bool) -> None:
        """Relay → TCP, written once per event-loop turn (one ``send`` for a whole batch).

        Bytes for an application socket that is gone (closed, or broken by a failed
        write) reset the stream: the peer stops sending into it and its end sees an
        error, never an orderly close after bytes nobody read.
        """
        self.session.conn.hold(self.stream_id)  # (again: the stream may have moved)
        if self.writer.is_closing():
            self._gone(data, end_stream)
            return
        if data:
            self._out.append(data)
        self._eof = self._eof or end_stream
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Write what the batch delivered; a socket that is gone resets the stream."""
        self._flush_due = False
        out, self._out = self._out, []
        data = out[0] if len(out) == 1 else b"".join(out)  # one event a batch: no copy
        if self.writer.is_closing():
            self._gone(data, self._eof)
            return
        try:
            if data:
                self.writer.write(data)
                trace.event("tcp_write", self.stream_id, len(data), int(self._eof))
                self._credit(len(data))
            if self._eof:
                self._end()
        except OSError:
            self._report()
            self._reset_stream()
            self.abort()

    def _end(self) -> None:
        """The stream's FIN, once every byte before it is in the kernel: only then may a
        close be orderly (a FIN), so the socket stops lingering zero just before."""
        if self.closed.is_set() or self._ending is not None:
            return
        transport = self.writer.transport
        if transport.get_write_buffer_size():
            transport.set_write_buffer_limits(high=0, low=0)  # drain() waits for empty
            self._ending = asyncio.get_running_loop().create_task(self._end_when_drained())
            return
        linger_zero(self.writer.get_extra_info("socket"), False)
        if self.writer.can_write_eof():
            self.writer.write_eof()
        self.closed.set()

    async def _end_when_drained(self) -> None:
        try:
            while self.writer.transport.get_write_buffer_size() and not self.closed.is_set():
                await self.writer.drain()
        except (ConnectionError, OSError):
            self.abort()  # the application's socket broke before the end reached it
            return
        finally:
            self._ending = None
        if not self.closed.is_set():
            self._end()

    def _gone(self, data: bytes, eof: bool) -> None:
        """The application's socket is closed: what came for it is dropped (its window
        freed), the stream reset unless it has ended (its peer stops sending into it),
        and the pipe is done, a bare FIN included (its owner waits on ``closed``)."""
        if data:
            self.session.consumed(self.stream_id, len(data))
        if data or not eof:
            self._reset_stream()
        self.closed.set()

    def _credit(self, nbytes: int) -> None:
        """Count ``nbytes`` written; report them consumed now if the socket keeps up,
        else once the transport's buffer has drained (a reader that stops holds them)."""
        self._written += nbytes
        self._written_conn = self.session.conn
        if self._crediting is not None:
            return
        if self.writer.transport.get_write_buffer_size() <= CREDIT_BUFFER_BYTES:
            self._report()
            return
        self._crediting = asyncio.get_running_loop().create_task(self._credit_when_drained())

    async def _credit_when_drained(self) -> None:
        try:
            while self._written:
                try:
                    await self.writer.drain()
                except (ConnectionError, OSError):
                    pass  # gone: what it held is freed all the same
                self._report()
        finally:
            self._crediting = None

    def _report(self) -> None:
        """Tell the session what the socket took (not across a session change)."""
        n, self._written = self._written, 0
        if n and self._written_conn is self.session.conn:
            self.session.consumed(self.stream_id, n)

    def _reset_stream(self) -> None:
        conn = self.session.conn
        if conn.has_stream(self.stream_id):
            conn.reset(self.stream_id, code=1)
            self.session.transmit()

    def lose(self) -> None:
        """The stream's session ended under this pipe. A stream its connection had
        already finished (forgotten with its FIN delivered here: every byte and both FINs
        delivered and acknowledged) only has bytes on their way into the socket left:
        they and the FIN go out in order, as they would have. Any other stream's end
        never came: its socket is broken with an RST."""
        if self._eof and not self.session.conn.has_stream(self.stream_id):
            return
        abort_with_rst(self)

    def abort(self) -> None:
        if self._out:  # delivered but never written: its window is freed all the same
            dropped = sum(len(data) for data in self._out)
            self._out.clear()
            self.session.consumed(self.stream_id, dropped)
        self.writer.transport.abort()
        self.closed.set()
