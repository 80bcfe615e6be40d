"""A refused or unreachable destination while the client is still sending (``--forward``).

A forwarded connection sends at once, without waiting for the gateway's status. The
bytes that were in flight when the gateway refused the stream once reached it after its
answer had forgotten the stream: the gateway read them as a new stream's header ("refused
<binary garbage>:<port> (not in --allow)") and its answer to that raised in a task. The
stream must stay refused until the client resets it, its bytes dropped and credited.
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from tests.relay.conftest import Stack, curl

PUSH_BYTES = 4_000_000


def _push_until_refused(port: int) -> int:
    """Send up to PUSH_BYTES to the forward port; the bytes sent before the relay ended it."""
    sent = 0
    block = os.urandom(64 * 1024)
    try:
        # the reset can come before this thread sees its connect complete (a loaded host):
        # then connect itself fails with ECONNRESET
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            while sent < PUSH_BYTES:
                sent += s.send(block)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
    except OSError:
        pass  # reset: the refusal reached the application
    return sent


@pytest.mark.parametrize("case", ["not allowed", "connection refused"])
def test_bytes_after_a_refusal_open_no_stream(stack: Stack, case: str) -> None:
    from tierwise.relay.socks import serve_forward

    # the UDP echo's port is on --allow, and nothing listens on it over TCP
    port = 9 if case == "not allowed" else stack.udp_port
    errors: list[dict] = []
    stack.loop.call_soon_threadsafe(
        stack.loop.set_exception_handler, lambda _loop, context: errors.append(context)
    )

    async def up() -> tuple[int, object]:
        fwd = await serve_forward(stack.client, ("127.0.0.1", 0), ("127.0.0.1", port))
        return fwd.sockets[0].getsockname()[1], fwd

    fport, server = stack.call(up())
    try:
        for _ in range(3):
            _push_until_refused(fport)
        deadline = time.monotonic() + 5
        while stack.gateway._streams and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stack.loop.call_soon_threadsafe(server.close)  # type: ignore[attr-defined]
    assert not errors, errors
    assert stack.gateway.counters["refused"] == (3 if case == "not allowed" else 0)
    assert not stack.gateway._streams  # every refused stream ended: none left behind
    # the session still carries a good request (its window was credited for the drops)
    body = bytes(i % 251 for i in range(300_000))
    out = curl(stack, f"http://127.0.0.1:{stack.http_port}/300000")
    assert out.stdout == body, out.stderr
    assert len(stack.gateway.sessions) == 1
