"""The client's token window in the kernel (kfilter.client_window_program): real datagrams
through a real loopback socket, the kernel running the program.

A DATA of the windowed session passes only with a number of the window, not skipped
(received before the program was built), and that number's token; the forgeries of
``client-badtag-pn`` (the coming numbers copied off the path, no token) never reach
Python, and neither do replays of what was received.
"""

from __future__ import annotations

import os
import random
import socket
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierwise.proto.relay import wire
from tierwise.proto.relay.crypto import PacketTokens
from tierwise.relay import kfilter
from tierwise.relay.batchudp import kernel_drops


def _pair() -> tuple[socket.socket, socket.socket, int]:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    return rx, tx, rx.getsockname()[1]


def _drain(sock: socket.socket) -> list[bytes]:
    time.sleep(0.05)
    got = []
    while True:
        try:
            got.append(sock.recv(65535))
        except BlockingIOError:
            return got


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


@pytest.mark.parametrize("size", [64, 1024])
def test_the_window_passes_exactly_its_numbers_with_their_tokens(size: int) -> None:
    """Every number of the window with its token passes; its neighbours outside the window,
    a wrong token, another id, a skipped (received) number, a number of another high word
    are dropped in the kernel, and counted there."""
    cid, tokens = os.urandom(8), PacketTokens(os.urandom(32))
    window = kfilter.TokenWindow(size)
    assert window.insns <= 3 * size + 64
    first = (5 << 32) + 0xFFFF_F000 if size == 64 else 12_345
    rx, tx, port = _pair()
    _attach(rx, cid, window, tokens, first, skip=(3,))
    numbers = [first + i for i in range(size) if i != 3]
    good = [_data(cid, pn, tokens.token(pn)) for pn in numbers]
    good.append(bytes([wire.WELCOME]) + cid + bytes(100))
    bad = [
        _data(cid, first - 1, tokens.token(first - 1)),
        _data(cid, first + size, tokens.token(first + size)),
        _data(cid, first + 3, tokens.token(first + 3)),  # skipped: received already
        _data(cid, first + 7, os.urandom(4)),
        _data(cid, first + 8, tokens.token(first + 9)),  # a neighbour's token
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
