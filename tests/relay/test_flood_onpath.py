"""Floods an on-path attacker can send: a HELLO's admission tag copied, an authentic HELLO
replayed, forged DATA with the client's session id from the gateway's address.

A guarded gateway and clients in this process on loopback; forgeries from a plain or
(spoofed, root) raw socket, or ``tests/relay/flooder.py`` at full rate for a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.relay.conftest import KEY
from tests.relay.flooder import _ip_udp
from tierwise.proto.relay import wire
from tierwise.proto.relay.connection import hello_admit_tag
from tierwise.relay import gateway as gateway_module
from tierwise.relay.batchudp import kernel_drops, open_batch_endpoint
from tierwise.relay.client import Client
from tierwise.relay.gateway import Gateway

FLOODER = Path(__file__).with_name("flooder.py")
ROOT = os.geteuid() == 0


async def _guarded() -> tuple[Gateway, asyncio.DatagramTransport, tuple[str, int]]:
    gateway = Gateway(KEY, set())
    transport = await open_batch_endpoint(gateway, local_addr=("127.0.0.1", 0), reuse_port=True)
    assert gateway.guard()
    return gateway, transport, transport.get_extra_info("sockname")


async def _connected(addr: tuple[str, int]) -> tuple[Client, float]:
    client = Client(KEY, addr)
    t0 = time.perf_counter()
    await client.start()
    await asyncio.wait_for(client.ready.wait(), 10)
    return client, time.perf_counter() - t0


@contextlib.asynccontextmanager
async def _session() -> AsyncIterator[tuple[Gateway, tuple[str, int], Client]]:
    """A guarded gateway and a client whose session is up; both closed after."""
    gateway, transport, addr = await _guarded()
    client = None
    try:
        client, _ = await _connected(addr)
        assert client.session is not None
        yield gateway, addr, client
    finally:
        if client is not None:
            client.close()
        gateway.close()
        transport.close()


def _copies(hello: bytes, n: int) -> list[bytes]:
    """HELLOs with ``hello``'s date and admission tag and random bytes elsewhere (what an
    observer of one HELLO can make: each fails the AEAD check)."""
    out = []
    for _ in range(n):
        forged = bytearray(os.urandom(wire.HELLO_BYTES))
        forged[0] = wire.HELLO
        forged[wire.HELLO_TIME_AT : wire.HELLO_ADMIT_AT + 8] = hello[
            wire.HELLO_TIME_AT : wire.HELLO_ADMIT_AT + 8
        ]
        out.append(bytes(forged))
    return out


def _hello(client: Client) -> bytes:
    assert client.session is not None
    conn = client.session.conn
    return conn._hello_bytes(client.session.now())


def test_a_copied_tag_is_struck_and_the_kernel_drops_its_flood() -> None:
    """16 forged HELLOs with a copied tag strike it: the next 2,000 are dropped by the
    kernel unread, the gateway's other tags still admit a client."""

    async def run() -> None:
        gateway, transport, addr = await _guarded()
        observed, client = None, None
        try:
            observed, _ = await _connected(addr)
            seen = _hello(observed)
            tag = hello_admit_tag(seen)
            assert tag in gateway.open_tags
            junk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for forged in _copies(seen, gateway_module.HELLO_STRIKE_FAILS):
                junk.sendto(forged, addr)
            await asyncio.sleep(0.1)
            assert tag in gateway.struck and tag not in gateway.open_tags
            assert gateway.totals()["hello_tags_struck"] == 1
            slow = gateway._hello_transport
            assert slow is not None
            reads, kernel = slow.reads, gateway.kernel_drops()
            for forged in _copies(seen, 2000):
                junk.sendto(forged, addr)
            await asyncio.sleep(0.1)
            assert slow.reads == reads and gateway.kernel_drops() - kernel >= 2000
            client, _ = await _connected(addr)
            assert len(gateway.sessions) == 2
            assert len(gateway.open_tags) == len(gateway.admit_tags) - 1
        finally:
            for c in (observed, client):
                if c is not None:
                    c.close()
            gateway.close()
            transport.close()

    asyncio.run(run())


def test_a_replayed_hello_naming_a_session_is_dropped_before_its_check() -> None:
    """An authentic HELLO of an open session, sent 200 times from elsewhere: the first
    (dated anew: a client that missed its WELCOME) is answered, the copies get no AEAD
    check and no WELCOME, counted as replays until their tag is struck, then the kernel's."""

    async def run() -> None:
        async with _session() as (gateway, addr, client):
            assert client.session is not None
            cid = client.session.conn.connection_id
            for _ in range(100):  # the client's opening rate probe answered: the session quiet
                if not client.session.conn.rate.unmeasured:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            recorded = _hello(client)  # dated after the one admitted: answered once
            sent = gateway.sessions[cid].conn.stats.packets_sent
            junk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            before, kernel = gateway.counters["dropped_replay"], gateway.kernel_drops()
            for _ in range(200):
                junk.sendto(recorded, addr)
            await asyncio.sleep(0.2)
            conn = gateway.sessions[cid].conn
            replays = gateway.counters["dropped_replay"] - before
            assert replays >= gateway_module.HELLO_STRIKE_FAILS  # then struck: the kernel's
            assert replays + gateway.kernel_drops() - kernel == 199
            assert conn.stats.dropped_auth == 0 and hello_admit_tag(recorded) in gateway.struck
            assert conn.stats.packets_sent - sent <= 2  # its one WELCOME (and an ACK)

    asyncio.run(run())


@pytest.mark.slow
def test_a_copied_tag_flood_at_full_rate_does_not_stall_a_new_session() -> None:
    """One core floods HELLOs with a current tag (the flooder's ``--tag``) for 4 s: the tag
    is struck, the kernel drops the rest, a new client is up within 2 s."""

    async def run() -> None:
        gateway, transport, addr = await _guarded()
        clients: list[Client] = []
        flood = None
        try:
            first, _ = await _connected(addr)
            clients.append(first)
            tag = hello_admit_tag(_hello(first))
            assert tag is not None
            flood = subprocess.Popen(
                [sys.executable, str(FLOODER), f"--to=127.0.0.1:{addr[1]}", "--kind", "hello",
                 "--tag", tag.hex(), "--seconds", "4"],
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            await asyncio.sleep(0.5)
            client, up_s = await _connected(addr)
            clients.append(client)
            running = flood.poll() is None
            await asyncio.to_thread(flood.wait, 30)
            assert flood.stdout is not None
            sent = int(flood.stdout.read().split()[0])
            print(f"\ncopied tag: {sent} HELLOs, new session {up_s * 1e3:.0f} ms")
            assert running and sent > 20_000
            assert up_s < 2.0
            assert tag in gateway.struck and gateway.kernel_drops() > sent * 0.9
            assert gateway.counters["dropped_auth"] < sent * 0.1
        finally:
            if flood is not None and flood.poll() is None:
                flood.kill()
            for c in clients:
                c.close()
            gateway.close()
            transport.close()

    asyncio.run(run())


@pytest.mark.skipif(not ROOT, reason="forging the gateway's address needs a raw socket (root)")
def test_forged_data_at_the_client_is_dropped_by_its_kernel() -> None:
    """5,000 DATA datagrams with the client's session id from the gateway's address and
    a random packet number: the client's kernel drops them; the session carries on."""

    async def run() -> None:
        async with _session() as (_gateway, addr, client):
            assert client.session is not None and client._transport is not None
            cid = client.session.conn.connection_id
            sock = client._transport.get_extra_info("socket")
            port = sock.getsockname()[1]
            raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
            drops = kernel_drops(sock)
            for _ in range(5000):
                forged = bytes([wire.DATA]) + cid + os.urandom(8 + 200)
                raw.sendto(_ip_udp(addr, ("127.0.0.1", port), forged), ("127.0.0.1", 0))
            await asyncio.sleep(0.1)
            assert kernel_drops(sock) - drops >= 4990
            assert client.session.conn.stats.dropped_auth <= 10
            received = client.session.conn.stats.packets_received
            client._probe()
            await asyncio.sleep(0.1)
            assert client.session.conn.stats.packets_received > received
            # a session past 3 × 2^32 packets: the bound follows it (numbers up to 2^34
            # pass, and fail Python's token check before the AEAD)
            client.session.conn._replay.largest = 3 << 32
            client.refilter()
            assert client.pn_high == 3
            stats = client.session.conn.stats
            auth, token, drops = stats.dropped_auth, stats.dropped_token, kernel_drops(sock)
            for pn in (4 << 32, 5 << 32):
                forged = wire.HEADER.pack(wire.DATA, cid, pn) + os.urandom(200)
                raw.sendto(_ip_udp(addr, ("127.0.0.1", port), forged), ("127.0.0.1", 0))
            await asyncio.sleep(0.1)
            assert (stats.dropped_auth, stats.dropped_token) == (auth, token + 1)
            assert kernel_drops(sock) - drops == 1

    asyncio.run(run())


def _tagged(tag: bytes) -> bytes:
    body = bytearray(wire.HELLO_BYTES)
    body[0] = wire.HELLO
    body[wire.HELLO_VERSION_AT] = wire.HELLO_VERSION
    body[wire.HELLO_ADMIT_AT : wire.HELLO_ADMIT_AT + 8] = tag
    return bytes(body)


@settings(max_examples=30)
@given(st.lists(st.integers(0, 200), max_size=300), st.integers(1, 8))
def test_a_tag_is_struck_at_its_sixteenth_failure_and_leaves_with_its_window(
    picks: list[int], windows_later: int
) -> None:
    """Failed HELLOs strike a listed tag at exactly ``HELLO_STRIKE_FAILS`` failures; an
    unlisted tag is never struck; a struck tag leaves with its window."""
    gateway = Gateway(KEY, set())
    wall_s = 1_800_000_000.0
    gateway._admission(wall_s)
    listed = sorted(gateway.admit_tags)
    unlisted = [os.urandom(8) for _ in range(57)]
    pool = listed + unlisted  # 144 + 57 = 201 tags
    fails: dict[bytes, int] = {}
    for i in picks:
        gateway._hello_failed(_tagged(pool[i]))
        fails[pool[i]] = fails.get(pool[i], 0) + 1
    strike = gateway_module.HELLO_STRIKE_FAILS
    assert gateway.struck == {t for t, n in fails.items() if n >= strike and t in listed}
    assert gateway.counters["hello_tags_struck"] == len(gateway.struck)
    assert gateway.open_tags == gateway.admit_tags - gateway.struck
    struck = set(gateway.struck)
    gateway._admission(wall_s + windows_later * 30.0)
    assert gateway.struck == struck & gateway.admit_tags
