"""A SOCKS5 server (RFC 1928 CONNECT, RFC 1929 username/password) in front of the relay client.

Parsing reads exactly the lengths the RFC gives with ``readexactly``; a short or
malformed greeting closes the connection. Replies carry the gateway's status
(0 succeeded, 2 not allowed by ruleset, 4 host unreachable, 5 refused, 1 general
failure: no session, or the gateway refused the stream). UDP ASSOCIATE (§7)
replies with the address of the association's relay port (:mod:`.udp`).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import struct

from tierwise.addresses import is_loopback
from tierwise.jsonvalue import plain
from tierwise.relay.client import (
    ATYP_UNSUPPORTED,
    CMD_CONNECT,
    CMD_UDP_ASSOCIATE,
    CMD_UNSUPPORTED,
    NO_AUTH,
    NO_METHOD,
    SOCKS_VERSION,
    USER_PASS,
    Client,
)
from tierwise.relay.udp import encode_addr

__all__ = ["serve_forward", "serve_socks"]

log = logging.getLogger("tierwise.relay.socks")
_PORT = struct.Struct(">H")
HANDSHAKE_TIMEOUT_S = 10.0


def reply(status: int, bound: tuple | None = None) -> bytes:
    """A SOCKS5 reply; the bound address is 0.0.0.0:0 unless there is one (UDP ASSOCIATE)."""
    host, port = bound[:2] if bound else ("0.0.0.0", 0)
    return bytes([SOCKS_VERSION, status, 0]) + encode_addr(host, port)


async def _authenticate(  # type: ignore[no-untyped-def]
    client: Client, first: bytes, reader, writer
) -> bool:
    head = first + await reader.readexactly(1)
    if head[0] != SOCKS_VERSION:
        return False
    methods = await reader.readexactly(head[1])
    want = USER_PASS if client.credentials else NO_AUTH
    if want not in methods:
        writer.write(bytes([SOCKS_VERSION, NO_METHOD]))
        return False
    writer.write(bytes([SOCKS_VERSION, want]))
    if want == NO_AUTH:
        return True
    ver, ulen = await reader.readexactly(2)
    user = await reader.readexactly(ulen)
    (plen,) = await reader.readexactly(1)
    password = await reader.readexactly(plen)
    user_ok = hmac.compare_digest(user, client.credentials[0].encode())  # type: ignore[index]
    pass_ok = hmac.compare_digest(password, client.credentials[1].encode())  # type: ignore[index]
    writer.write(bytes([1, 0 if ver == 1 and user_ok and pass_ok else 1]))
    return ver == 1 and user_ok and pass_ok


async def _target(reader, writer) -> tuple[int, str, int] | None:  # type: ignore[no-untyped-def]
    ver, cmd, _rsv, atyp = await reader.readexactly(4)
    if atyp == 1:
        host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
    elif atyp == 4:
        host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
    elif atyp == 3:
        (length,) = await reader.readexactly(1)
        host = (await reader.readexactly(length)).decode(errors="replace")
    else:
        writer.write(reply(ATYP_UNSUPPORTED))
        return None
    (port,) = _PORT.unpack(await reader.readexactly(2))
    if ver != SOCKS_VERSION or cmd not in (CMD_CONNECT, CMD_UDP_ASSOCIATE):
        writer.write(reply(CMD_UNSUPPORTED))
        return None
    return cmd, host, port


async def _stats(client: Client, reader, writer) -> None:  # type: ignore[no-untyped-def]
    """``GET /stats`` on the SOCKS port (loopback only): the session's measurements as JSON."""
    await reader.readuntil(b"\r\n\r\n")
    peer = writer.get_extra_info("peername")
    if not peer or not is_loopback(peer[0]):
        return

    body = json.dumps(plain(client.snapshot())).encode()  # JSON has no Infinity
    head = f"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    writer.write(head.encode() + b"\r\n\r\n" + body)
    await writer.drain()


async def _handle(client: Client, reader, writer) -> None:  # type: ignore[no-untyped-def]
    try:
        first = await reader.readexactly(1)
        if first == b"G":
            await _stats(client, reader, writer)
            return
        async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
            authenticated = await _authenticate(client, first, reader, writer)
            target = await _target(reader, writer) if authenticated else None
        if target is not None and target[0] == CMD_UDP_ASSOCIATE:
            on_reply = lambda s, b: writer.write(reply(s, b))  # noqa: E731
            await client.associate(target[1:], reader, writer, on_reply)
        elif target is not None:
            await client.proxy(*target[1:], reader, writer, lambda s: writer.write(reply(s)))
    except (asyncio.IncompleteReadError, TimeoutError, ConnectionError, ValueError) as exc:
        log.debug("SOCKS connection closed: %s", exc)
    finally:
        writer.close()


async def serve_socks(client: Client, host: str, port: int) -> asyncio.Server:
    """Listen for SOCKS5 clients on ``host:port``."""
    return await asyncio.start_server(lambda r, w: _handle(client, r, w), host, port)


async def serve_forward(
    client: Client, listen: tuple[str, int], target: tuple[str, int]
) -> asyncio.Server:
    """Forward every connection to ``listen`` to ``target`` through the relay."""

    async def handle(reader, writer) -> None:  # type: ignore[no-untyped-def]
        try:
            await client.proxy(*target, reader, writer)
        except ConnectionError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, *listen)
