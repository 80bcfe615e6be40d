"""Session credit: every stream byte a connection delivers is credited back once, on
every outcome (``RelayConnection.unconsumed_bytes`` is 0 at both ends once the streams
have ended, and what was received was credited: the session's window is whole).

The chaos test covers the common outcomes in a mix; these are the paths it does not
reach on its own: thousands of streams on one session, a UDP association's records
both ways, a ``--forward`` check of a service that speaks first, refusals with bytes
sent before the status came back.
"""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from tests.relay.conftest import KEY, relay_pair, settled
from tests.relay.test_chaos import kill
from tierwise.proto.relay import RelayConnection
from tierwise.relay.client import Client
from tierwise.relay.gateway import Gateway
from tierwise.relay.socks import serve_forward
from tierwise.relay.udp import encode_addr


def _balance(conn: RelayConnection) -> dict[str, int]:
    """What a connection still owes: uncredited deliveries, received bytes not credited,
    and (from the sender's side) session credit short of three quarters of the window."""
    window = conn.config.session_window_bytes
    out = {
        "unconsumed bytes": conn.unconsumed_bytes,
        "received not credited": conn._recv_total - conn._delivered_total,
        "peer credit short": max(0, window * 3 // 4 - conn._credit),
    }
    return {k: v for k, v in out.items() if v}


def _left(gateway: Gateway, client: Client) -> dict[str, object]:
    assert client.session is not None and len(gateway.sessions) == 1
    (session,) = gateway.sessions.values()
    out = {
        "gateway streams": session.conn.stream_ids,
        "client streams": client.session.conn.stream_ids,
        "gateway records": list(gateway._streams),
        "client handlers": list(client.session.handlers),
        "gateway": _balance(session.conn),
        "client": _balance(client.session.conn),
    }
    return {k: v for k, v in out.items() if v}


async def _socks(port: int, target: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"\x05\x01\x00\x05\x01\x00" + encode_addr("127.0.0.1", target))
    assert await reader.readexactly(2) == b"\x05\x00"
    return reader, writer, (await reader.readexactly(10))[1]


async def _outcome(reader: asyncio.StreamReader) -> str:
    try:
        return f"eof after {len(await reader.read(-1))} B"
    except ConnectionError:
        return "reset"


async def _answer_n(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A service: reads a decimal count and a newline, answers that many bytes, closes."""
    n = int((await reader.readline()).strip() or 0)
    writer.write(bytes(i % 251 for i in range(n)))
    await writer.drain()
    writer.close()


@pytest.mark.slow
def test_two_thousand_streams_leave_one_session_whole() -> None:
    """2,000 short streams through one session (50 at a time): the balance stays 0 and
    the window whole; a byte lost per stream would show as 2,000 (as the status byte did)."""

    async def run() -> tuple[list[bytes], dict]:
        service = await asyncio.start_server(_answer_n, "127.0.0.1", 0)
        port = service.sockets[0].getsockname()[1]
        async with relay_pair({("127.0.0.1", port)}) as (gateway, client, socks):

            async def one(i: int) -> bytes:
                reader, writer, status = await _socks(socks, port)
                assert status == 0
                writer.write(b"%d\n" % (i % 700))
                got = await reader.read(-1)
                writer.close()
                return got

            got: list[bytes] = []
            for at in range(0, 2000, 50):
                got += await asyncio.gather(*(one(i) for i in range(at, at + 50)))
            left = await settled(lambda: _left(gateway, client))
        service.close()
        return got, left

    got, left = asyncio.run(run())
    assert [len(g) for g in got] == [i % 700 for i in range(2000)]
    assert not left, left


def test_a_udp_association_credits_every_record_both_ways(udp_echo: int) -> None:
    """300 datagrams each way through one association, then its end: nothing owed."""

    async def run() -> tuple[int, dict]:
        async with relay_pair({("127.0.0.1", udp_echo)}) as (gateway, client, socks):
            reader, writer = await asyncio.open_connection("127.0.0.1", socks)
            writer.write(b"\x05\x01\x00\x05\x03\x00" + encode_addr("0.0.0.0", 0))
            assert await reader.readexactly(2) == b"\x05\x00"
            head = await reader.readexactly(10)
            assert head[1] == 0
            relay_port = struct.unpack(">H", head[8:10])[0]
            app = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            app.setblocking(False)
            app.bind(("127.0.0.1", 0))
            header = b"\0\0\0" + encode_addr("127.0.0.1", udp_echo)
            echoed = 0
            loop = asyncio.get_running_loop()
            for i in range(300):
                app.sendto(header + bytes([i % 256]) * (1 + i * 3), ("127.0.0.1", relay_port))
                if i % 10 == 9:  # in bursts, as an application would
                    await asyncio.sleep(0.005)
            for _ in range(300):
                try:
                    async with asyncio.timeout(1.0):
                        await loop.sock_recv(app, 65535)
                except TimeoutError:
                    break
                echoed += 1
            app.close()
            writer.close()  # the control connection's end ends the association
            left = await settled(lambda: _left(gateway, client))
        return echoed, left

    echoed, left = asyncio.run(run())
    assert not left, left
    assert echoed >= 100, echoed  # UDP: some drop at the echo's socket on a loaded host


def test_a_forward_check_of_a_service_that_speaks_first_owes_nothing() -> None:
    """``Client.check`` (what a ``--forward`` is checked with) to a service that sends a
    300 kB banner at once: the bytes behind the status are dropped and credited once."""

    async def run() -> tuple[int, dict]:
        async def banner(reader, writer) -> None:  # type: ignore[no-untyped-def]
            writer.write(b"B" * 300_000)
            try:
                await writer.drain()
                await reader.read(-1)
            except ConnectionError:
                pass
            writer.close()

        service = await asyncio.start_server(banner, "127.0.0.1", 0)
        port = service.sockets[0].getsockname()[1]
        async with relay_pair({("127.0.0.1", port)}) as (gateway, client, _):
            await client.ready.wait()
            status = await client.check("127.0.0.1", port)
            left = await settled(lambda: _left(gateway, client))
        service.close()
        return status, left

    status, left = asyncio.run(run())
    assert status == 0
    assert not left, left


def test_refusals_with_bytes_sent_before_the_status_owe_nothing() -> None:
    """A ``--forward`` (it sends before the status) to a destination not allowed, to one
    allowed with nothing listening, and SOCKS to one that stopped listening after it was
    reachable: each refused stream's bytes are credited once at both ends."""

    async def run() -> tuple[list[str], dict]:
        service = await asyncio.start_server(_answer_n, "127.0.0.1", 0)
        port = service.sockets[0].getsockname()[1]
        gone = socket.create_server(("127.0.0.1", 0))
        gone_port = gone.getsockname()[1]
        allow = {("127.0.0.1", port), ("127.0.0.1", gone_port)}
        outcomes: list[str] = []
        async with relay_pair(allow) as (gateway, client, socks):
            servers = [
                await serve_forward(client, ("127.0.0.1", 0), ("127.0.0.1", target))
                for target in (9, gone_port)
            ]
            reader, writer, status = await _socks(socks, gone_port)  # reachable now
            assert status == 0
            writer.close()
            gone.close()  # nothing listens there any more
            reader, writer, status = await _socks(socks, gone_port)  # optimistic: OK
            assert status == 0
            writer.write(b"y" * 50_000)
            outcomes.append(await _outcome(reader))
            writer.close()
            for server in servers:
                fport = server.sockets[0].getsockname()[1]
                for _ in range(3):
                    reader, writer = await asyncio.open_connection("127.0.0.1", fport)
                    writer.write(b"x" * 50_000)
                    outcomes.append(await _outcome(reader))
                    writer.close()
            left = await settled(lambda: _left(gateway, client))
            for server in servers:
                server.close()
        service.close()
        return outcomes, left

    outcomes, left = asyncio.run(run())
    assert outcomes == ["reset"] * 7, outcomes
    assert not left, left


@pytest.mark.slow  # ~2.7 s: the client notices the dead gateway after 1 s
def test_a_stream_moved_across_a_gateway_restart_owes_nothing_on_its_new_session() -> None:
    """A stream opened without waiting for its status, on a session whose gateway has
    just died: it moves to the new session (its bytes sent again) and completes there;
    the new session owes nothing, and the old one is gone (not lingering)."""

    async def run() -> tuple[int, dict]:
        service = await asyncio.start_server(_answer_n, "127.0.0.1", 0)
        port = service.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        async with relay_pair({("127.0.0.1", port)}) as (gateway, client, socks):
            reader, writer, _ = await _socks(socks, port)  # the destination is now reachable
            writer.write(b"10\n")
            await reader.read(-1)
            writer.close()
            gport = gateway.transport.get_extra_info("sockname")[1]  # type: ignore[union-attr]
            kill(gateway)
            await asyncio.sleep(0.05)
            fresh = Gateway(KEY, gateway.allow)
            transport, _ = await loop.create_datagram_endpoint(
                lambda: fresh, local_addr=("127.0.0.1", gport)
            )
            try:
                reader, writer, status = await _socks(socks, port)  # optimistic: OK at once
                assert status == 0
                writer.write(b"300000\n")
                got = len(await asyncio.wait_for(reader.read(-1), 10))
                writer.close()
                left = await settled(lambda: _left(fresh, client))
                if client.lingering:
                    left["client lingering"] = len(client.lingering)
            finally:
                fresh.close()
                await asyncio.sleep(0.05)
                transport.close()
        service.close()
        return got, left

    got, left = asyncio.run(run())
    assert got == 300_000
    assert not left, left
