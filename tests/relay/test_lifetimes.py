"""A stream's records at both ends end with the stream (the faults test_chaos.py found).

Each case once left something behind for the life of the session: a gateway record and
its task, a client handler (a SIGTERM drain waits on those), or the stream's id in
``Session.held``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import struct

import pytest

from tests.relay.conftest import relay_pair, settled
from tierwise.relay.client import Client
from tierwise.relay.gateway import Gateway
from tierwise.relay.socks import serve_forward
from tierwise.relay.udp import UDP_HOST, GatewayAssociation, encode_addr

_LINGER_RST = struct.pack("ii", 1, 0)


def _rst(writer: asyncio.StreamWriter) -> None:
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    writer.transport.abort()


async def _socks(port: int, target: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"\x05\x01\x00\x05\x01\x00" + encode_addr("127.0.0.1", target))
    assert await reader.readexactly(2) == b"\x05\x00"
    assert (await reader.readexactly(10))[1] == 0
    return reader, writer


def _left(gateway: Gateway, client: Client) -> dict[str, object]:
    assert client.session is not None
    left = {
        "gateway records": list(gateway._streams),
        "gateway tasks": len(gateway._tasks),
        "gateway held": [set(s.held) for s in gateway.sessions.values() if s.held],
        "client handlers": list(client.session.handlers),
        "client held": set(client.session.held),
    }
    return {k: v for k, v in left.items() if v}


async def _read_all(reader: asyncio.StreamReader) -> bytes | str:
    try:
        return await reader.read(-1)
    except ConnectionError as exc:
        return f"error: {exc!r}"


def test_a_destination_that_resets_ends_the_gateway_stream() -> None:
    """The destination resets mid-upload: the gateway's pump reset the stream, but
    nothing set its pipe's ``closed``: its record and task stayed for good."""

    async def run() -> tuple[object, dict]:
        async def reset_after_a_read(reader, writer) -> None:  # type: ignore[no-untyped-def]
            await reader.readexactly(500)
            _rst(writer)

        dest = await asyncio.start_server(reset_after_a_read, "127.0.0.1", 0)
        port = dest.sockets[0].getsockname()[1]
        async with relay_pair({("127.0.0.1", port)}) as (gateway, client, socks):
            reader, writer = await _socks(socks, port)
            writer.write(b"x" * 500)  # all read before the reset; not half-closed
            got = await asyncio.wait_for(_read_all(reader), 5)
            left = await settled(lambda: _left(gateway, client))
            writer.close()
        dest.close()
        return got, left

    got, left = asyncio.run(run())
    assert isinstance(got, str) and got.startswith("error"), got  # a reset, never an EOF
    assert not left, left


def test_an_application_that_resets_ends_the_client_stream() -> None:
    """The application resets mid-upload: the client's pump reset the stream, but its
    proxy waited on the pipe's ``closed`` for good, its handler kept."""

    async def run() -> tuple[str, dict]:
        seen: list[str] = []

        async def count(reader, writer) -> None:  # type: ignore[no-untyped-def]
            try:
                while await reader.read(1 << 16):
                    pass
                seen.append("eof")
            except ConnectionError:
                seen.append("error")
            writer.close()

        dest = await asyncio.start_server(count, "127.0.0.1", 0)
        port = dest.sockets[0].getsockname()[1]
        async with relay_pair({("127.0.0.1", port)}) as (gateway, client, socks):
            _, writer = await _socks(socks, port)
            writer.write(b"x" * 100_000)
            await writer.drain()
            await asyncio.sleep(0.1)
            _rst(writer)
            left = await settled(lambda: _left(gateway, client))
        dest.close()
        return ",".join(seen), left

    seen, left = asyncio.run(run())
    assert seen == "error"  # the destination sees the reset, never a clean end
    assert not left, left


def test_a_bare_fin_for_a_closed_application_ends_the_client_stream() -> None:
    """The application sent its request and closed without reading; the answer's bytes
    broke its socket, and the FIN that followed alone found the socket closing: the
    pipe dropped it without setting ``closed``, its handler kept."""

    async def run() -> dict:
        async def answer_slowly(reader, writer) -> None:  # type: ignore[no-untyped-def]
            await reader.read(-1)
            with contextlib.suppress(ConnectionError):
                for part in (b"x" * 1000, b"y" * 1000):  # the second one finds an RST
                    writer.write(part)
                    await writer.drain()
                    await asyncio.sleep(0.2)
                writer.write_eof()  # alone, after the socket broke
            writer.close()

        dest = await asyncio.start_server(answer_slowly, "127.0.0.1", 0)
        port = dest.sockets[0].getsockname()[1]
        async with relay_pair({("127.0.0.1", port)}) as (gateway, client, socks):
            _, writer = await _socks(socks, port)
            writer.write(b"request")
            await writer.drain()
            writer.close()  # never reads the answer
            await asyncio.sleep(1.0)
            left = await settled(lambda: _left(gateway, client))
        dest.close()
        return left

    left = asyncio.run(run())
    assert not left, left


def test_a_finished_stream_leaves_no_held_mark(http_server: int) -> None:
    """A stream that ended cleanly kept its id in ``Session.held`` at both ends for the
    life of the session (one entry per stream ever carried)."""

    async def run() -> tuple[bytes, dict]:
        async with relay_pair({("127.0.0.1", http_server)}) as (gateway, client, socks):
            got = b""
            for _ in range(3):
                reader, writer = await _socks(socks, http_server)
                writer.write(b"GET /5000 HTTP/1.0\r\n\r\n")
                got = await reader.read(-1)
                writer.close()
            left = await settled(lambda: _left(gateway, client))
        return got, left

    got, left = asyncio.run(run())
    assert got.endswith(bytes(i % 251 for i in range(5000)))
    assert not left, left


def test_bytes_for_a_stream_nobody_reads_reset_it(http_server: int) -> None:
    """A client stream whose handler is gone (its application left) while the gateway
    still sends: the bytes were ignored and the stream kept at both ends for good (the
    gateway's window-blocked pipe, the client's slot until ``max_streams``)."""

    async def run() -> dict:
        async with relay_pair({("127.0.0.1", http_server)}) as (gateway, client, _):
            sid, session, _queue = await client.open("127.0.0.1", http_server)
            session.conn.send(sid, b"GET /8000000 HTTP/1.0\r\n\r\n", end_stream=True)
            session.transmit()
            client.release(session, sid)  # its application went away
            left = await settled(lambda: _left(gateway, client))
            if sid in session.conn.stream_ids:
                left["client stream"] = sid
        return left

    left = asyncio.run(run())
    assert not left, left


def test_an_association_reset_while_it_opens_raises_nothing(
    udp_echo: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A UDP ASSOCIATE stream reset while the gateway opened its sockets: the gateway
    then sent its status on the forgotten stream, and LocalProtocolError was raised in
    a task nobody awaited ("Task exception was never retrieved")."""
    real_start = GatewayAssociation.start

    async def slow_start(self: GatewayAssociation) -> None:  # the real sockets, later
        await asyncio.sleep(0.3)
        await real_start(self)

    monkeypatch.setattr(GatewayAssociation, "start", slow_start)

    async def run() -> tuple[list[dict], dict, int]:
        errors: list[dict] = []
        asyncio.get_running_loop().set_exception_handler(lambda _l, ctx: errors.append(ctx))
        async with relay_pair({("127.0.0.1", udp_echo)}) as (gateway, client, _):
            sid, session, _queue = await client.open(UDP_HOST, 0)
            await asyncio.sleep(0.1)  # the gateway is opening the association's sockets
            client.release(session, sid)
            session.conn.reset(sid)
            session.transmit()
            left = await settled(lambda: _left(gateway, client))
            associations = gateway.associations
        gc.collect()
        await asyncio.sleep(0)
        return errors, left, associations

    errors, left, associations = asyncio.run(run())
    assert not errors, errors
    assert not left, left
    assert associations == 0


def test_a_stream_that_cannot_move_ends_its_pump() -> None:
    """A stream still waiting for its status when the session is lost moves to the next
    session; when it cannot (the client is closing) its application's connection is
    aborted, but its pump waited for the move for good, its proxy task never ended."""

    async def run() -> list[str]:
        dest = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = dest.sockets[0].getsockname()[1]
        async with relay_pair({("127.0.0.1", port)}) as (gateway, client, _):
            fwd = await serve_forward(client, ("127.0.0.1", 0), ("127.0.0.1", port))
            await asyncio.sleep(0.1)
            gateway.transport.close()  # the gateway is gone: no status will come
            reader, writer = await asyncio.open_connection(*fwd.sockets[0].getsockname()[:2])
            writer.write(b"request")
            await asyncio.sleep(0.2)
            client.close()  # the session ends, the stream has nowhere to go
            with contextlib.suppress(ConnectionError):
                await asyncio.wait_for(reader.read(-1), 5)
            await asyncio.sleep(0.5)
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
            names = [t.get_coro().__qualname__ for t in tasks]  # type: ignore[union-attr]
            fwd.close()
            writer.close()
        dest.close()
        return names

    assert asyncio.run(run()) == []


def test_a_stream_that_ends_inside_its_header_is_reset() -> None:
    """A stream whose FIN came before a whole destination header: the gateway waited
    for the rest of the header for good (its record and the stream kept, one slot of
    ``max_streams`` each); it now resets the stream."""

    async def run() -> tuple[dict, list[int]]:
        async with relay_pair(set()) as (gateway, client, _):
            session = client.session
            assert session is not None
            streams = []
            for header in (b"", b"\x09127.0", b"\x09127.0.0.1\x00"):
                sid = session.conn.open_stream()
                session.handlers[sid] = lambda event: None
                session.conn.send(sid, header, end_stream=True)
                session.transmit()
                streams.append(sid)
            await asyncio.sleep(0.5)
            for sid in streams:
                client.release(session, sid)
            left = await settled(lambda: _left(gateway, client))
            open_ = [sid for sid in streams if sid in session.conn.stream_ids]
        return left, open_

    left, open_ = asyncio.run(run())
    assert not left, left
    assert open_ == []
