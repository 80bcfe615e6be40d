"""The lab's model service takes a reset connection quietly (no namespace needed)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from tierwise.lab.bench.service import ServiceConfig, _Handler, _Server


def _serve() -> tuple[_Server, threading.Thread]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.config = ServiceConfig()
    server.congestion_seen = set()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


def test_a_reset_connection_prints_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """A relay gateway checking a --forward target connects and resets at once: the
    standard library's handler would print a ConnectionResetError traceback for it."""
    server, thread = _serve()
    try:
        for _ in range(3):
            conn = socket.create_connection(server.server_address[:2])
            conn.sendall(b"POST /infer HTTP/1.1\r\n")  # a request line cut short, then RST
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
        deadline = time.monotonic() + 5
        while server.resets < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert server.resets == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err and "ConnectionResetError" not in err, err
