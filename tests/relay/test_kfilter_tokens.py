"""The client's token window in the kernel (kfilter.client_window_program): real datagrams
through a real loopback socket, the kernel running the program.

A DATA of the windowed session passes only with a number of the window, not skipped
(received before the program was built), and that number's token; the forgeries of
``client-badtag-pn`` (the coming numbers copied off the path, no token) never reach
Python, and neither do replays of what was received.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.relay.conftest import relay_pair, tcp_source
from tests.relay.flooder import _ip_udp
from tests.relay.test_flood_onpath import _session
from tests.relay.test_kfilter import _drain
from tests.relay.test_kfilter import _pair as _plain_pair
from tierwise.proto.relay import wire
from tierwise.proto.relay.crypto import PacketTokens
from tierwise.relay import client as client_module
from tierwise.relay import kfilter
from tierwise.relay.batchudp import kernel_drops
from tierwise.relay.client import TOKEN_WINDOW
from tierwise.relay.udp import encode_addr


def _pair() -> tuple[socket.socket, socket.socket, int]:
    rx, tx, port = _plain_pair()
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    return rx, tx, port


def _data(cid: bytes, pn: int, token: bytes, n: int = 40) -> bytes:
    return wire.DATA_HEADER.pack(wire.DATA, cid, pn, token) + os.urandom(n)


def _send(tx: socket.socket, port: int, datagrams: list[bytes]) -> None:
    for d in datagrams:
        tx.sendto(d, ("127.0.0.1", port))


def _attach(rx: socket.socket, cid: bytes, window: kfilter.TokenWindow, tokens: PacketTokens,
            first: int, skip: tuple[int, ...] = ()) -> None:  # fmt: skip
    block = window.block(first, tokens.tokens(first, window.size), skip)
    raw = kfilter.client_window_program([cid], [(cid, block)])
    assert kfilter.attach_raw(rx, raw), "the kernel refused the token window"


@pytest.mark.parametrize("size", [64, 2048])
def test_the_window_passes_exactly_its_numbers_with_their_tokens(size: int) -> None:
    """Every number of the window with its token passes; its neighbours outside the window,
    a wrong token, another id, a skipped (received) number, a number of another high word
    are dropped in the kernel, and counted there."""
    cid, tokens = os.urandom(8), PacketTokens(os.urandom(32))
    window = kfilter.TokenWindow(size)
    assert window.insns <= 1.3 * size + 64
    first = (5 << 32) + 0xFFFF_F000 if size == 64 else 12_345
    rx, tx, port = _pair()
    _attach(rx, cid, window, tokens, first, skip=(3,))
    numbers = [first + i for i in range(size) if i != 3]
    good = [_data(cid, pn, tokens.token(pn)) for pn in numbers]
    good.append(bytes([wire.WELCOME]) + cid + bytes(100))
    # a token of another number of the same bucket of 16: the kernel's check is the
    # bucket's (Python checks the exact token before the AEAD)
    good.append(_data(cid, first + 8, tokens.token(first + 9)))
    bad = [
        _data(cid, first - 1, tokens.token(first - 1)),
        _data(cid, first + size, tokens.token(first + size)),
        _data(cid, first + 3, tokens.token(first + 3)),  # skipped: received already
        _data(cid, first + 7, os.urandom(4)),
        _data(cid, first + 8, tokens.token(first + 40)),  # another bucket's token
        _data(cid, first + 5, tokens.token(first + 3)),  # a skipped number's token
        _data(cid, first + 9 + (1 << 32), tokens.token(first + 9)),  # another high word
        _data(os.urandom(8), first + 10, tokens.token(first + 10)),
    ]
    _send(tx, port, good + bad)
    assert sorted(_drain(rx)) == sorted(good)
    assert kernel_drops(rx) == len(bad)


@settings(max_examples=10, deadline=None)
@given(first=st.integers(0, (1 << 40)), seed=st.integers(0, 2**32))
def test_forged_coming_numbers_never_pass(first: int, seed: int) -> None:
    """client-badtag-pn: the window's own numbers with a guessed token (any but the one)
    are all dropped; the authentic one beside each passes."""
    rng = random.Random(seed)
    cid, tokens = rng.randbytes(8), PacketTokens(rng.randbytes(32))
    window = kfilter.TokenWindow(128)
    rx, tx, port = _pair()
    _attach(rx, cid, window, tokens, first)
    picks = [first + rng.randrange(128) for _ in range(32)]
    forged = []
    for pn in picks:
        token = rng.randbytes(4)
        if token != tokens.token(pn):
            forged.append(_data(cid, pn, token))
    authentic = [_data(cid, pn, tokens.token(pn)) for pn in sorted(set(picks))]
    _send(tx, port, forged + authentic)
    assert sorted(_drain(rx)) == sorted(authentic)
    assert kernel_drops(rx) == len(forged)
    rx.close()
    tx.close()


def test_a_reload_moves_the_window_and_drops_what_was_received() -> None:
    """After a reload past what was received, those numbers (replays) are dropped and the
    next ones pass."""
    cid, tokens = os.urandom(8), PacketTokens(os.urandom(32))
    window = kfilter.TokenWindow(256)
    rx, tx, port = _pair()
    _attach(rx, cid, window, tokens, 0)
    first = [_data(cid, pn, tokens.token(pn)) for pn in range(200)]
    _send(tx, port, first)
    assert len(_drain(rx)) == 200
    _attach(rx, cid, window, tokens, 150, skip=tuple(range(50)))  # 150 … 199 received
    replays, fresh = first[150:], [_data(cid, pn, tokens.token(pn)) for pn in range(200, 406)]
    _send(tx, port, replays + fresh)
    assert sorted(_drain(rx)) == sorted(fresh)
    assert kernel_drops(rx) == len(replays)


def test_tokens_are_consecutive_slices_of_one_hash_per_sixteen() -> None:
    tokens = PacketTokens(b"k" * 32)
    run = tokens.tokens(13, 40)
    assert [run[4 * i : 4 * i + 4] for i in range(40)] == [tokens.token(pn) for pn in range(13, 53)]
    assert len({tokens.token(pn) for pn in range(4096)}) > 4090  # 32-bit values, few collide


SOURCE_BYTES = 8_000_000  # ~6,000 packets: a few window reloads


def _source(stop: threading.Event) -> contextlib.AbstractContextManager[int]:
    """A TCP service that sends SOURCE_BYTES of a seeded stream to each connection."""

    def serve(conn: socket.socket, _index: int) -> None:
        with conn:
            conn.sendall(random.Random(7).randbytes(SOURCE_BYTES))

    return tcp_source(lambda: 0, serve, stop)


async def _download(socks: int, target: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", socks)
    writer.write(b"\x05\x01\x00\x05\x01\x00" + encode_addr("127.0.0.1", target))
    assert await reader.readexactly(2) == b"\x05\x00"
    assert (await reader.readexactly(10))[1] == 0
    got = await asyncio.wait_for(reader.read(-1), 30)
    writer.close()
    return got


def test_a_download_stays_byte_exact_across_window_reloads() -> None:
    """8 MB through a real gateway and client, the token window armed: it is rebuilt
    under the download, nothing authentic is dropped for want of a token, the bytes are
    whole. Unarmed (at rest), the same download rebuilds nothing."""
    stop = threading.Event()

    async def run() -> None:
        with _source(stop) as port:
            async with relay_pair({("127.0.0.1", port)}) as (_gateway, client, socks):
                assert await _download(socks, port) == random.Random(7).randbytes(SOURCE_BYTES)
                assert client.reloads == 0 and not client.armed
                client.arm()
                assert client.token_window, "the kernel refused the token window"
                got = await _download(socks, port)
                assert got == random.Random(7).randbytes(SOURCE_BYTES)
                assert client.session is not None
                stats = client.session.conn.stats
                assert stats.dropped_token == stats.dropped_auth == 0
                largest = client.session.conn.largest_received_pn
                assert client.reloads >= largest // (2 * TOKEN_WINDOW) >= 1
                assert client.reload_at > largest

    asyncio.run(run())


@pytest.mark.skipif(os.geteuid() != 0, reason="spoofing the gateway's address needs a raw socket")
def test_forged_coming_numbers_never_reach_the_clients_python() -> None:
    """client-badtag-pn: DATA datagrams from the gateway's address with the client's
    session id and its next packet numbers, without their tokens. The first 16 fail
    Python's token check (no AEAD) and arm the token window; the kernel drops every one of
    the next 5,000 (the client's counters stay put); one with the right token (as if read
    off the path) reaches Python and fails the AEAD; a replay of a received number is
    dropped by the kernel once the window is rebuilt."""

    async def run() -> None:
        async with _session() as (_gateway, addr, client):
            assert client.session is not None and client._transport is not None
            conn = client.session.conn
            cid, sock = conn.connection_id, client._transport.get_extra_info("socket")
            port = sock.getsockname()[1]
            raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
            client._probe()  # the gateway's answer: a number received, to replay
            await asyncio.sleep(0.1)
            next_pn = conn.largest_received_pn + 1
            assert next_pn > 0
            before = (conn.stats.dropped_auth, conn.stats.dropped_token, kernel_drops(sock))

            def forge(pn: int, token: bytes) -> None:
                forged = _data(cid, pn, token, 200)
                raw.sendto(_ip_udp(addr, ("127.0.0.1", port), forged), ("127.0.0.1", 0))

            tokens = conn._recv_keys.tokens  # what the gateway sends; the attacker has none
            for i in range(client_module.ARM_DROPS):
                forge(next_pn + 1000 + i, bytes(4))
            await asyncio.sleep(0.1)
            assert client.armed and conn.stats.dropped_token == client_module.ARM_DROPS
            before = (conn.stats.dropped_auth, conn.stats.dropped_token, kernel_drops(sock))
            for i in range(5000):
                pn = next_pn + i % 500
                token = os.urandom(4)
                if token != tokens.token(pn):
                    forge(pn, token)
            await asyncio.sleep(0.1)
            after = (conn.stats.dropped_auth, conn.stats.dropped_token, kernel_drops(sock))
            assert after[:2] == before[:2] and after[2] - before[2] >= 4990
            forge(next_pn + 600, tokens.token(next_pn + 600))  # a token read off the path
            # a replay of a number received before the window was last built: skipped
            # there (received since: Python's replay check, before the AEAD)
            client.refilter()
            forge(next_pn - 1, tokens.token(next_pn - 1))
            await asyncio.sleep(0.1)
            assert conn.stats.dropped_auth == before[0] + 1
            assert kernel_drops(sock) - after[2] == 1
            received = conn.stats.packets_received
            client._probe()
            await asyncio.sleep(0.1)
            assert conn.stats.packets_received > received
            raw.close()

    asyncio.run(run())


def test_the_window_is_armed_by_forgeries_and_disarmed_after_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At rest the client's filter is the packet-number bound alone; an armed window is
    off again ``ARM_S`` after the kernel's drops stop."""
    monkeypatch.setattr(client_module, "ARM_S", 0.6)

    async def run() -> None:
        async with _session() as (_gateway, _addr, client):
            assert client.session is not None and not client.armed
            client.arm()  # as forgeries would (the test above)
            assert client.armed and client.reloads == 1
            await asyncio.sleep(1.2)  # no kernel drops since: disarmed
            assert not client.armed and client.counters["token_window_disarmed"] == 1
            assert client.reload_at == 1 << 64  # the bound alone: nothing to move on

    asyncio.run(run())
