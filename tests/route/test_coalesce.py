"""One write per small HTTP message: held heads leave with their bodies, never later."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.modelserver import free_port
from tests.route.test_gateway import served
from tierwise.route.coalesce import JOIN_BYTES, HeadHolder, HeldHead, coalescing_protocol

HEAD = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n"


def test_a_small_request_is_one_write() -> None:
    """The head waits for its body and they go together; a large body is not copied."""
    h = HeldHead()
    assert h.take(HEAD) == [] and h.take(b"{}") == [HEAD + b"{}"]
    big = b"x" * (JOIN_BYTES + 1)
    assert h.take(HEAD) == [] and h.take(big) == [HEAD, big]
    assert h.take(b"not a head") == [b"not a head"] and h.release() == b""
    assert h.take(HEAD) == [] and h.take(b"") == [HEAD]  # no body: the end sends it


class Recorder(asyncio.Transport):
    """A transport that records its writes (the holder's only visible effect)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True


def test_a_response_head_waits_one_loop_step_at_most() -> None:
    """Head and body of one step: one write; a head alone goes on the next step."""

    async def scenario() -> list[list[bytes]]:
        loop = asyncio.get_running_loop()
        t = Recorder()
        holder = HeadHolder(t, loop)
        holder.write(b"HTTP/1.1 200 OK\r\n\r\n")
        holder.write(b"body")
        together = list(t.writes)
        t.writes.clear()
        holder.write(b"HTTP/1.1 200 OK\r\n\r\n")
        held = list(t.writes)
        await asyncio.sleep(0)
        alone = list(t.writes)
        holder.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        holder.close()
        return [together, held, alone, t.writes[1:], [b"closed"] if t.closed else []]

    together, held, alone, at_close, closed = asyncio.run(scenario())
    assert together == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    assert held == [] and alone == [b"HTTP/1.1 200 OK\r\n\r\n"]
    assert at_close == [b"HTTP/1.1 204 No Content\r\n\r\n"] and closed == [b"closed"]


@pytest.mark.slow
def test_served_stream_head_does_not_wait_for_the_first_event() -> None:
    """Through real uvicorn: a stream's head arrives while its first event is still held
    back (the event is released only once the head is read); a small answer arrives whole.

    Ordered, not timed: a head that waited for the first event would never arrive, and
    _read_until's 10 s socket timeout fails the test.
    """
    release = threading.Event()

    async def late(request):
        async def body():
            while not release.is_set():
                await asyncio.sleep(0.01)
            yield b"data: x\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    async def small(request):
        return Response(b'{"ok":true}', media_type="application/json")

    app = Starlette(routes=[Route("/late", late), Route("/small", small)])
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error",
                            http=coalescing_protocol())  # fmt: skip
    try:
        with served(app, port, config) as url, socket.create_connection(("127.0.0.1", port)) as s:
            assert url.endswith(str(port))
            s.sendall(b"GET /small HTTP/1.1\r\nhost: x\r\n\r\n")
            answer = _read_until(s, b'{"ok":true}')
            s.sendall(b"GET /late HTTP/1.1\r\nhost: x\r\n\r\n")
            head = _read_until(s, b"\r\n\r\n")
            release.set()
            event = _read_until(s, b"data: x")
    finally:
        release.set()  # a failed read must not leave the stream's task polling
    assert answer.startswith(b"HTTP/1.1 200") and head.startswith(b"HTTP/1.1 200")
    assert b"data: x" not in head and b"data: x" in event


def _read_until(s: socket.socket, marker: bytes) -> bytes:
    s.settimeout(10)
    data = b""
    while marker not in data:
        chunk = s.recv(65536)
        assert chunk, "connection closed"
        data += chunk
    return data


def test_backend_times_a_new_connection_and_sets_nodelay() -> None:
    """The upstream backend notes a connect's time for the attempt and disables Nagle."""
    from httpcore import AsyncConnectionPool

    from tierwise.route.upload import CONNECTS, watch_backend

    async def scenario(port: int) -> tuple[list[float], int]:
        backend = watch_backend(AsyncConnectionPool()._network_backend)
        connects: list[float] = []
        token = CONNECTS.set(connects)
        try:
            stream = await backend.connect_tcp("127.0.0.1", port)
        finally:
            CONNECTS.reset(token)
        sock = stream.get_extra_info("socket")
        nodelay = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        await stream.aclose()
        return connects, nodelay

    with socket.create_server(("127.0.0.1", 0)) as listener:
        connects, nodelay = asyncio.run(scenario(listener.getsockname()[1]))
    assert len(connects) == 1 and 0 < connects[0] < 5 and nodelay
