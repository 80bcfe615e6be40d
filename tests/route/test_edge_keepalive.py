"""The gateway keeps an idle connection open past its clients' pool expiry (5 s in httpx
and the OpenAI SDK): a close racing a client's reuse fails a request it never saw
answered (uvicorn's own 5 s did exactly that under load)."""

from __future__ import annotations

import socket
import time

import pytest

from tests.modelserver import model_server
from tests.route.routeproc import free_port, route_process, route_toml

pytestmark = pytest.mark.slow

HI = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    b'content-length: 60\r\n\r\n{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}'
)


def answer(s: socket.socket) -> bytes:
    got = b""
    while b"\r\n\r\n" not in got:
        piece = s.recv(65536)
        assert piece, f"closed after {got!r}"
        got += piece
    return got


def test_an_idle_connection_outlives_a_clients_pool_expiry(tmp_path) -> None:
    with model_server("--decode-step", "1 ms", "--prefill-per-token", "0 s") as site:
        port = free_port()
        with route_process(route_toml(tmp_path, site, port)) as _:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(HI)
                assert answer(s).startswith(b"HTTP/1.1 200")
                time.sleep(5.5)  # past httpx's keep-alive expiry and uvicorn's default
                s.sendall(HI)
                assert answer(s).startswith(b"HTTP/1.1 200")
