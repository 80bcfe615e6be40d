"""A real HTTP server, gateway and SOCKS client on loopback, in one event loop thread."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import subprocess
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tierwise.relay import trace
from tierwise.relay.client import Client
from tierwise.relay.gateway import Gateway
from tierwise.relay.socks import serve_socks

KEY = bytes(range(32))


@contextlib.contextmanager
def tcp_source(
    opened: Callable[[], int], serve: Callable[[socket.socket, int], None], stop: threading.Event
) -> Iterator[int]:
    """A loopback TCP server (yields its port): each connection gets an index from
    ``opened()`` and is served by ``serve(conn, index)`` in its own thread, until ``stop``."""
    server = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            args = (conn, opened())
            threading.Thread(target=serve, args=args, daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(2)
        server.close()


class Echo(BaseHTTPRequestHandler):
    """POST returns the SHA-256 of the body and its length; GET /n returns n bytes."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self._send(f"{len(body)} {hashlib.sha256(body).hexdigest()}".encode())

    def do_GET(self) -> None:
        n = int(self.path.strip("/") or 0)
        self._send(bytes(i % 251 for i in range(n)))

    def _send(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Stack:
    loop: asyncio.AbstractEventLoop
    http_port: int
    gateway_port: int
    socks_port: int
    udp_port: int
    gateway: Gateway
    client: Client

    def call(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)


@contextlib.asynccontextmanager
async def relay_pair(allow: set[tuple[str, int]]) -> AsyncIterator[tuple[Gateway, Client, int]]:
    """A gateway (allowing ``allow``), a client and its SOCKS port, on loopback in the
    running loop; closed again afterwards."""
    loop = asyncio.get_running_loop()
    gateway = Gateway(KEY, allow)
    transport, _ = await loop.create_datagram_endpoint(lambda: gateway, local_addr=("127.0.0.1", 0))
    client = Client(KEY, ("127.0.0.1", transport.get_extra_info("sockname")[1]))
    await client.start()
    socks = await serve_socks(client, "127.0.0.1", 0)
    try:
        yield gateway, client, socks.sockets[0].getsockname()[1]
    finally:
        socks.close()
        client.close()
        await asyncio.sleep(0.05)
        transport.close()


async def settled(
    left: Callable[[], dict[str, object]], within_s: float = 3.0
) -> dict[str, object]:
    """Poll ``left()`` (what the relay still holds, empty when nothing) every 50 ms until
    it is empty or ``within_s`` has passed; its last answer."""
    now: dict[str, object] = {}
    for _ in range(int(within_s / 0.05)):
        await asyncio.sleep(0.05)
        if not (now := left()):
            break
    return now


def curl(stack: Stack, url: str, *extra: str) -> subprocess.CompletedProcess:
    """Real curl through the stack's SOCKS5 port (host names resolved at the gateway)."""
    return subprocess.run(
        [
            "curl",
            "-sS",
            "--max-time",
            "20",
            "--socks5-hostname",
            f"127.0.0.1:{stack.socks_port}",
            url,
            *extra,
        ],
        capture_output=True,
        check=False,
    )


@pytest.fixture
def http_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def udp_echo() -> Iterator[int]:
    """A real UDP echo server on loopback (a thread); yields its port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                data, addr = sock.recvfrom(65535)
            except TimeoutError:
                continue
            sock.sendto(data, addr)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join(2)
    sock.close()


@pytest.fixture
def stack(http_server: int, udp_echo: int) -> Iterator[Stack]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def up() -> Stack:
        allow = {("127.0.0.1", http_server), ("localhost", http_server), ("127.0.0.1", udp_echo)}
        gateway = Gateway(KEY, allow)
        transport, _ = await loop.create_datagram_endpoint(
            lambda: gateway, local_addr=("127.0.0.1", 0)
        )
        gport = transport.get_extra_info("sockname")[1]
        client = Client(KEY, ("127.0.0.1", gport))
        await client.start()
        server = await serve_socks(client, "127.0.0.1", 0)
        sport = server.sockets[0].getsockname()[1]
        stack = Stack(loop, http_server, gport, sport, udp_echo, gateway, client)
        stack._closers = [transport.close, server.close]  # type: ignore[attr-defined]
        return stack

    s = asyncio.run_coroutine_threadsafe(up(), loop).result(10)
    yield s

    stop_loop(loop, thread, s._closers)  # type: ignore[attr-defined]


def stop_loop(
    loop: asyncio.AbstractEventLoop, thread: threading.Thread, closers: list[Callable[[], object]]
) -> None:
    """Close what ``closers`` close and cancel every task on ``loop`` (run by ``thread``),
    then stop the loop, join its thread and close it."""

    async def down() -> None:
        for close in closers:
            close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run_coroutine_threadsafe(down(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


@pytest.fixture
def traced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Tracing on for this test, into ``tmp_path/relay.<pid>``; off again afterwards."""
    monkeypatch.setenv(trace.ENV, str(tmp_path / "relay"))
    monkeypatch.setattr(trace, "_checked", False)
    monkeypatch.setattr(trace, "_file", None)
    yield tmp_path / f"relay.{os.getpid()}"
    if trace._file is not None:
        trace._file.close()
