"""The upload watch: drop an upload when its delivered rate says another site is sooner."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierwise.route.upload import (
    MIN_BYTES,
    SlowUpload,
    UploadWatch,
    tcp_bytes_acked,
    tcp_in_flight_bytes,
)

MB = 1_000_000


def fed(rates_per_step: list[float], size: int = 8 * MB, switch_s: float = 1.0) -> UploadWatch:
    """A watch fed acked counts growing by ``rates_per_step`` bytes/s, one per 50 ms."""
    w = UploadWatch(size, rtt_s=0.06, rest_s=0.15, switch_s=switch_s, sock=object())
    acked = 0.0
    for i, rate in enumerate(rates_per_step, start=1):
        acked += rate * 0.05
        w.times.append(i * 0.05)
        w.acked.append(int(acked))
    return w


def test_a_collapsed_uplink_is_dropped_once_its_rate_is_flat() -> None:
    """375 kB/s (3 Mbit/s), flat: 8 MB more cannot beat a 1 s alternative."""
    w = fed([375_000.0] * 8)
    assert w.verdict() and w.rate_bytes_per_s == pytest.approx(375_000, rel=0.05)


def test_slow_start_is_not_mistaken_for_a_slow_path() -> None:
    """A rate that doubles every window is still growing: no verdict yet."""
    assert not fed([20_000.0 * 2 ** (i // 2) for i in range(8)]).verdict()


def test_a_fast_path_and_a_small_body_go_on() -> None:
    """10 MB/s flat finishes 8 MB in time; a body under the minimum is never judged."""
    assert not fed([10 * MB] * 8).verdict()
    assert not fed([375_000.0] * 8, size=MIN_BYTES - 1).verdict()


def test_a_stall_is_left_to_the_patience() -> None:
    """No bytes acknowledged in the last window: not a rate (the hedge deals with it)."""
    assert not fed([375_000.0] * 4 + [0.0] * 4).verdict()


@given(st.lists(st.floats(1e3, 2e7), min_size=1, max_size=30), st.floats(0.05, 30.0))
def test_never_drops_an_upload_that_would_win(rates: list[float], switch_s: float) -> None:
    """Whenever it drops, the rest at the measured rate ends later than the next site."""
    w = fed(rates, switch_s=switch_s)
    if w.verdict():
        left_s = (w.size_bytes - w.acked[-1]) / w.rate_bytes_per_s + w.rest_s
        assert left_s > w.switch_s


def test_bytes_acked_counts_what_the_peer_received() -> None:
    """TCP_INFO's acknowledged bytes grow by what was sent and received (real kernel TCP)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        conn, _ = server.accept()
        with client, conn:
            base = tcp_bytes_acked(client)
            assert base is not None
            reader = threading.Thread(target=lambda: _drain(conn, 300_000))
            reader.start()
            client.sendall(bytes(300_000))
            reader.join(10)
            conn.sendall(b"k")
            client.recv(1)  # the peer has read everything: all of it is acknowledged
            assert tcp_bytes_acked(client) - base == 300_000
            assert tcp_in_flight_bytes(client) == 0  # nothing left unacknowledged


def _drain(conn: socket.socket, size: int) -> None:
    got = 0
    while got < size and (chunk := conn.recv(65536)):
        got += len(chunk)


def test_run_returns_the_answer_or_raises_and_cancels() -> None:
    """`run` passes a fast answer through; a dropped upload cancels the send."""

    async def answer() -> str:
        await asyncio.sleep(0.01)
        return "ok"

    async def forever() -> None:
        await asyncio.sleep(60)

    async def both() -> None:
        assert await UploadWatch(MB, 0.01, 0.0, 1.0).run(answer()) == "ok"
        w = UploadWatch(MB, 0.01, 0.0, 1.0, sock=object())
        w.sample = lambda elapsed_s: True  # type: ignore[method-assign]
        with pytest.raises(SlowUpload):
            await asyncio.wait_for(w.run(forever()), 5)

    asyncio.run(both())


@pytest.mark.parametrize("backend", ["anyio", "asyncio"])
def test_a_watched_body_is_paced_by_its_acknowledgements(backend: str) -> None:
    """A peer that stops reading holds a watched body to ~64 kB unacknowledged, not a
    whole send buffer (real kernel TCP); once it reads, the whole body goes — over
    httpcore's anyio backend and over the gateway's own (tierwise.route.netio)."""
    import fcntl
    import struct
    import termios
    import time

    import httpcore

    from tierwise.route.netio import AsyncioBackend
    from tierwise.route.upload import CURRENT, MIN_AHEAD_BYTES, PIECE_BYTES, watch_backend

    size = 4 * MB

    async def main(server: socket.socket) -> None:
        inner = httpcore.AnyIOBackend() if backend == "anyio" else AsyncioBackend()
        stream = await watch_backend(inner).connect_tcp(*server.getsockname())
        sock = stream.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MB)  # room for ~0.4 MB
        conn, _ = server.accept()
        w = UploadWatch(size, rtt_s=0.001, rest_s=0.0, switch_s=10.0)
        w.started = time.perf_counter()
        token = CURRENT.set(w)
        try:
            task = asyncio.ensure_future(stream.write(bytes(size)))
        finally:
            CURRENT.reset(token)
        await asyncio.sleep(0.5)
        queued = struct.unpack("i", fcntl.ioctl(sock, termios.TIOCOUTQ, b"\0" * 4))[0]
        assert not task.done() and 0 < queued <= MIN_AHEAD_BYTES + PIECE_BYTES
        reader = threading.Thread(target=lambda: _drain(conn, size))
        reader.start()
        await asyncio.wait_for(task, 20)
        reader.join(20)
        assert w.written == size
        conn.close()
        await stream.aclose()

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the peer's window
        server.bind(("127.0.0.1", 0))
        server.listen()
        asyncio.run(main(server))
