"""How streams end when a session ends under them: a drain (SIGTERM) or a CLOSE.

A transfer that completed at both relay ends must reach its application whole, with an
orderly end (never an RST, never a short stream); the relay must act on nothing the
connection delivers after its session ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from tests.relay.conftest import KEY, relay_pair
from tierwise.proto.relay import RelayConfig, StreamDataReceived
from tierwise.relay import run as relay_run
from tierwise.relay.client import Client
from tierwise.relay.gateway import Gateway
from tierwise.relay.pipe import OK, SEND_BUFFER_MAX, encode_target
from tierwise.relay.udp import encode_addr

BIG = 6_000_000  # more than a relay socket's send buffer (4 MB) and a small reader's hold
SMALL_BUFFER = 64 << 10  # the slow reader's receive buffer (the kernel may double it)


def _small_buffered(sock: socket.socket) -> socket.socket:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
    return sock


async def _socks(port: int, target: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = _small_buffered(socket.socket())
    sock.connect(("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"\x05\x01\x00\x05\x01\x00" + encode_addr("127.0.0.1", target))
    assert await reader.readexactly(2) == b"\x05\x00"
    assert (await reader.readexactly(10))[1] == 0
    return reader, writer


async def _read_all(reader: asyncio.StreamReader) -> int | str:
    """Bytes read up to an orderly EOF, or the error that ended the read."""
    got = 0
    try:
        while chunk := await reader.read(1 << 16):
            got += len(chunk)
    except ConnectionError as exc:
        return f"error after {got} B: {exc!r}"
    return got


def test_a_gateway_drain_lets_a_slow_readers_download_end_whole() -> None:
    """SIGTERM at the gateway while its last answer is still on its way: the drain waited
    only for its stream records (gone once the service's socket was read to its end),
    so it closed the session with the answer unsent, and the client reset an application
    whose download had arrived whole but that had not read it yet."""

    async def run() -> int | str:
        async def answer(reader, writer) -> None:  # type: ignore[no-untyped-def]
            await reader.read(-1)
            writer.write(b"a" * BIG)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            writer.close()

        dest = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = dest.sockets[0].getsockname()[1]
        async with relay_pair({("127.0.0.1", port)}) as (gateway, _client, socks):
            reader, writer = await _socks(socks, port)
            writer.write_eof()  # the request is complete; the application reads later
            await asyncio.sleep(0.2)
            await relay_run._drain(lambda: gateway.busy)  # what run_gateway does on SIGTERM
            gateway.close()
            await asyncio.sleep(0.3)  # the application comes back to read
            got = await asyncio.wait_for(_read_all(reader), 10)
            writer.close()
        dest.close()
        return got

    assert asyncio.run(run()) == BIG


def test_a_client_drain_lets_an_upload_to_a_slow_service_end_whole() -> None:
    """SIGTERM at the client while an upload is still on its way: the drain waited only
    for its handlers (gone once the service's early answer and end reached the
    application), so it closed the session with the upload unsent, and the gateway
    reset a service that had not read what had already arrived."""

    async def run() -> tuple[int | str, bytes]:
        seen: list[int | str] = []
        go = asyncio.Event()

        async def early_answer(reader, writer) -> None:  # type: ignore[no-untyped-def]
            writer.write(b"ok")
            writer.write_eof()  # answers, then reads the upload at its own pace
            await go.wait()
            seen.append(await _read_all(reader))
            writer.close()

        listener = _small_buffered(socket.create_server(("127.0.0.1", 0)))  # accepted: small too
        dest = await asyncio.start_server(early_answer, sock=listener)
        port = dest.sockets[0].getsockname()[1]
        async with relay_pair({("127.0.0.1", port)}) as (_gateway, client, socks):
            reader, writer = await _socks(socks, port)
            writer.write(b"u" * BIG)
            writer.write_eof()
            answer = await asyncio.wait_for(reader.read(-1), 10)
            writer.close()
            await relay_run._drain(lambda: client.busy)  # what run_client does on SIGTERM
            client.close()
            await asyncio.sleep(0.2)
            go.set()  # the service reads only now
            for _ in range(100):
                await asyncio.sleep(0.05)
                if seen:
                    break
        dest.close()
        return (seen or ["nothing"])[0], answer

    assert asyncio.run(run()) == (BIG, b"ok")


def test_bytes_after_a_sessions_close_open_no_stream() -> None:
    """A CLOSE and stream bytes in one datagram: the connection delivers the bytes after
    ``ConnectionTerminated``, and the gateway took them for a new stream's header (here
    naming an allowed destination, which it connected to) on a session that had ended."""

    async def run() -> tuple[list[int], dict]:
        accepted: list[int] = []

        async def note(reader, writer) -> None:  # type: ignore[no-untyped-def]
            accepted.append(writer.get_extra_info("sockname")[1])
            with contextlib.suppress(ConnectionError):
                await reader.read(-1)
            writer.close()

        first = await asyncio.start_server(note, "127.0.0.1", 0)
        second = await asyncio.start_server(note, "127.0.0.1", 0)
        p1, p2 = (s.sockets[0].getsockname()[1] for s in (first, second))
        loop = asyncio.get_running_loop()
        errors: list[dict] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        async with relay_pair({("127.0.0.1", p1), ("127.0.0.1", p2)}) as (gateway, client, _):
            await client.ready.wait()
            sid, session, queue = await client.open("127.0.0.1", p1)
            status = await asyncio.wait_for(queue.get(), 5)
            assert status.data[:1] == bytes([OK])
            # bytes of the stream that happen to read as a header naming the second service
            session.conn.send(sid, encode_target("127.0.0.1", p2) + b"x" * 100)
            client.close()  # CLOSE goes first in the same datagram
            await asyncio.sleep(0.5)
            left: dict[str, object] = {"records": list(gateway._streams)}
            left["tasks"] = len(gateway._tasks)
        first.close()
        second.close()
        left["errors"] = errors
        return accepted, {k: v for k, v in left.items() if v}

    accepted, left = asyncio.run(run())
    assert len(accepted) == 1, accepted  # the first service only
    assert not left, left


async def _partial_header(gateway: Gateway, client: Client) -> tuple[int, object]:
    """A stream whose first byte (a header's host length, 9) has reached the gateway and
    nothing more: ``(stream id, the gateway's session)``."""
    await client.ready.wait()
    assert client.session is not None
    conn = client.session.conn
    sid = conn.open_stream()
    conn.hold(sid)
    client.session.handlers[sid] = lambda event: None  # read by nobody, reset by nobody
    conn.send(sid, bytes([9]))
    client.session.transmit()
    for _ in range(100):
        await asyncio.sleep(0.02)
        if gateway._streams:
            break
    return sid, next(iter(gateway.sessions.values()))


def test_bytes_of_a_stream_already_gone_open_no_stream() -> None:
    """Bytes the connection delivers for a stream it has already forgotten (the gateway
    reset it while its later bytes waited in the same batch of events) are not a new
    stream's header: before, they opened one — here naming an allowed service, which the
    gateway connected to."""

    async def run() -> tuple[list[int], list]:
        accepted: list[int] = []

        async def note(reader, writer) -> None:  # type: ignore[no-untyped-def]
            accepted.append(1)
            writer.close()

        dest = await asyncio.start_server(note, "127.0.0.1", 0)
        port = dest.sockets[0].getsockname()[1]
        async with relay_pair({("127.0.0.1", port)}) as (gateway, client, _):
            sid, session = await _partial_header(gateway, client)
            session.conn.reset(sid, code=1)  # gone here, its record with it
            gateway._streams.clear()
            late = StreamDataReceived(sid, encode_target("127.0.0.1", port) + b"x" * 10)
            gateway._on_event(session, late)
            await asyncio.sleep(0.3)
            records = list(gateway._streams)
        dest.close()
        return accepted, records

    assert asyncio.run(run()) == ([], [])


def test_a_header_completed_by_a_large_chunk_is_served() -> None:
    """The chunk that completes a stream's header can be large: bytes that waited for a
    lost earlier packet arrive as one. The gateway reset any stream whose header was not
    complete before more than 1 MB arrived, though the header was in that chunk."""

    async def run() -> tuple[int, int]:
        got: list[int] = []

        async def count(reader, writer) -> None:  # type: ignore[no-untyped-def]
            got.append(len(await reader.read(-1)))
            writer.close()

        dest = await asyncio.start_server(count, "127.0.0.1", 0)
        port = dest.sockets[0].getsockname()[1]
        async with relay_pair({("127.0.0.1", port)}) as (gateway, client, _):
            sid, session = await _partial_header(gateway, client)
            rest = encode_target("127.0.0.1", port)[1:] + bytes(2 << 20)
            gateway._on_event(session, StreamDataReceived(sid, rest, end_stream=True))
            for _ in range(100):
                await asyncio.sleep(0.05)
                if got:
                    break
        dest.close()
        return len(got), got[0] if got else -1

    assert asyncio.run(run()) == (1, 2 << 20)


def test_a_pump_held_back_by_a_full_send_buffer_ends_with_its_session() -> None:
    """A service answers faster than the client's window lets the gateway send: the
    gateway's pump waits for its send buffer to fall below ``SEND_BUFFER_MAX``. When the
    session ended, that buffer never fell (nothing is acknowledged on a dead session):
    the pump woke every 5 ms for good, and its task and socket stayed."""

    async def run() -> tuple[int, int]:
        async def flood(reader, writer) -> None:  # type: ignore[no-untyped-def]
            with contextlib.suppress(ConnectionError):
                while True:
                    writer.write(bytes(1 << 20))
                    await writer.drain()

        dest = await asyncio.start_server(flood, "127.0.0.1", 0)
        port = dest.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        gateway = Gateway(KEY, {("127.0.0.1", port)})
        transport, _ = await loop.create_datagram_endpoint(
            lambda: gateway, local_addr=("127.0.0.1", 0)
        )
        small = RelayConfig(stream_window_bytes=256 << 10)  # the gateway may send little
        client = Client(KEY, ("127.0.0.1", transport.get_extra_info("sockname")[1]), small)
        await client.start()
        await client.ready.wait()
        sid, _, _ = await client.open("127.0.0.1", port)  # nobody reads it
        for _ in range(100):
            await asyncio.sleep(0.05)
            buffered = max((s.conn.send_buffered_bytes(sid) for s in gateway.sessions.values()),
                           default=0)  # fmt: skip
            if buffered > SEND_BUFFER_MAX:
                break
        client.close()  # the session ends with the gateway's pump held back
        await asyncio.sleep(0.5)
        left = len(gateway._tasks)
        for task in list(gateway._tasks):
            task.cancel()
        transport.close()
        dest.close()
        return buffered, left

    buffered, left = asyncio.run(run())
    assert buffered > SEND_BUFFER_MAX  # the pump was held back
    assert left == 0  # and its task ended with the session


@pytest.mark.slow  # ~5 s: 2 s of not reading, then 6 MB each way
def test_orderly_transfers_end_orderly_when_the_reader_lags_or_the_service_ends_first() -> None:
    """The linger-zero rule must never turn a complete transfer into an RST: a download
    whose end arrives while the application has not read for 2 s (the relay's buffer
    full when its FIN comes), and an upload that goes on after the service half-closed
    first; each far reader gets every byte, then an orderly EOF."""

    async def run() -> tuple[int | str, int | str, bytes]:
        uploads: list[int | str] = []

        async def serve(reader, writer) -> None:  # type: ignore[no-untyped-def]
            if (await reader.readexactly(1)) == b"d":  # a download
                writer.write(b"d" * BIG)
                await writer.drain()
                writer.close()
                return
            writer.write(b"bye")
            writer.write_eof()  # the service ends its side first, then takes the upload
            uploads.append(await _read_all(reader))
            writer.close()

        dest = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = dest.sockets[0].getsockname()[1]
        async with relay_pair({("127.0.0.1", port)}) as (_gateway, _client, socks):
            reader, writer = await _socks(socks, port)
            writer.write(b"d")
            writer.write_eof()
            await asyncio.sleep(2.0)  # the application does not read meanwhile
            down = await asyncio.wait_for(_read_all(reader), 10)
            writer.close()
            reader, writer = await _socks(socks, port)
            writer.write(b"u")
            first = await asyncio.wait_for(reader.read(-1), 10)
            writer.write(b"u" * BIG)
            writer.write_eof()
            for _ in range(100):
                await asyncio.sleep(0.05)
                if uploads:
                    break
            writer.close()
        dest.close()
        return down, (uploads or ["nothing"])[0], first

    assert asyncio.run(run()) == (BIG, BIG, b"bye")
