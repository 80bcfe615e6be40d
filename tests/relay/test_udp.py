"""SOCKS5 UDP ASSOCIATE (RFC 1928 §7) through the relay to a real UDP echo server on loopback."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from tests.relay.conftest import Stack
from tierwise.relay.udp import decode_addr, encode_addr


def associate(stack: Stack) -> tuple[socket.socket, tuple[str, int]]:
    """Open the TCP control connection; return it and the relay port the proxy names."""
    ctl = socket.create_connection(("127.0.0.1", stack.socks_port), timeout=5)
    ctl.sendall(b"\x05\x01\x00")
    assert ctl.recv(2) == b"\x05\x00"
    ctl.sendall(b"\x05\x03\x00" + encode_addr("0.0.0.0", 0))
    head = ctl.recv(4)
    assert head[:2] == b"\x05\x00", head
    rest = ctl.recv(6 if head[3] == 1 else 18)
    host, port, _ = decode_addr(head[3:4] + rest)
    return ctl, (host, port)


def datagram(host: str, port: int, payload: bytes, frag: int = 0) -> bytes:
    return b"\0\0" + bytes([frag]) + encode_addr(host, port) + payload


def receive(sock: socket.socket, timeout_s: float = 3.0) -> tuple[str, int, bytes] | None:
    sock.settimeout(timeout_s)
    try:
        data = sock.recv(70_000)
    except TimeoutError:
        return None
    assert data[:3] == b"\0\0\0"
    host, port, end = decode_addr(data, 3)
    return host, port, data[end:]


def test_udp_echo_through_the_relay(stack: Stack) -> None:
    """Datagrams of 1 B to 8 kB come back from the echo server with its address in the header."""
    ctl, relay = associate(stack)
    app = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    app.bind(("127.0.0.1", 0))
    try:
        for size in (1, 1000, 8000):
            payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
            app.sendto(datagram("127.0.0.1", stack.udp_port, payload), relay)
            assert receive(app) == ("127.0.0.1", stack.udp_port, payload)
    finally:
        app.close()
        ctl.close()


def test_fragments_and_refused_destinations_are_dropped_and_counted(stack: Stack) -> None:
    """FRAG ≠ 0 is dropped at the client; a destination not in --allow is dropped at the gateway."""
    ctl, relay = associate(stack)
    app = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    app.bind(("127.0.0.1", 0))
    try:
        app.sendto(datagram("127.0.0.1", stack.udp_port, b"frag", frag=1), relay)
        for host, port in (("127.0.0.1", stack.udp_port + 1), ("::1", stack.udp_port)):
            app.sendto(datagram(host, port, b"refused"), relay)
        app.sendto(datagram("localhost", stack.udp_port, b"by name, not allowed"), relay)
        app.sendto(datagram("127.0.0.1", stack.udp_port, b"ok"), relay)
        assert receive(app) == ("127.0.0.1", stack.udp_port, b"ok")  # and nothing before it
        assert receive(app, 0.3) is None
        assert stack.client.counters["udp_dropped_frag"] == 1
        assert stack.gateway.counters["udp_refused"] == 3
    finally:
        app.close()
        ctl.close()


def test_only_the_socks_client_may_use_the_relay_port(stack: Stack) -> None:
    """A datagram from another host address is dropped (§7: the client's address only)."""
    ctl, relay = associate(stack)
    app = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    app.bind(("127.0.0.2", 0))  # loopback, but not the address of the control connection
    try:
        app.sendto(datagram("127.0.0.1", stack.udp_port, b"stranger"), relay)
        assert receive(app, 0.5) is None
        assert stack.client.counters["udp_dropped_foreign"] == 1
    finally:
        app.close()
        ctl.close()


def test_the_association_ends_with_its_control_connection(stack: Stack) -> None:
    """Closing the TCP connection closes the relay port and the gateway's sockets."""
    ctl, relay = associate(stack)
    app = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    app.bind(("127.0.0.1", 0))
    try:
        app.sendto(datagram("127.0.0.1", stack.udp_port, b"x"), relay)
        assert receive(app) is not None
        assert stack.gateway.associations == 1
        ctl.close()
        deadline = time.monotonic() + 15  # idle: ms; a hang guard
        while stack.gateway.associations and time.monotonic() < deadline:
            time.sleep(0.02)
        assert stack.gateway.associations == 0 and not stack.gateway._streams
        app.connect(relay)
        app.send(datagram("127.0.0.1", stack.udp_port, b"late"))
        app.settimeout(1)
        try:
            app.recv(100)
            raise AssertionError("the relay port still answers")
        except ConnectionRefusedError:
            pass  # ICMP port unreachable: the port is closed
    finally:
        app.close()


def test_a_full_queue_drops_instead_of_blocking(stack: Stack) -> None:
    """A burst past the byte bound is dropped and counted; the sender is never held up."""
    stack.client.udp_buffer_bytes = 4000
    ctl, relay = associate(stack)
    app = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    app.bind(("127.0.0.1", 0))
    try:
        burst = [
            datagram("127.0.0.1", stack.udp_port, struct.pack(">I", i) * 250) for i in range(200)
        ]
        for d in burst:
            app.sendto(d, relay)
        got = 0
        while receive(app, 0.5) is not None:
            got += 1
        dropped = stack.client.counters["udp_dropped_full"]
        assert dropped > 0 and got > 0 and got + dropped <= 200
    finally:
        app.close()
        ctl.close()


def test_names_are_resolved_at_the_gateway(stack: Stack) -> None:
    """A datagram to an allowed name is resolved by the gateway; the reply names the address."""
    first = socket.getaddrinfo("localhost", stack.udp_port, type=socket.SOCK_DGRAM)[0][4][0]
    if first != "127.0.0.1":
        pytest.skip(f"localhost resolves to {first} first here; the echo server is on 127.0.0.1")
    stack.gateway._allow.add(("localhost", stack.udp_port))
    ctl, relay = associate(stack)
    app = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    app.bind(("127.0.0.1", 0))
    try:
        for payload in (b"first: resolved", b"second: cached"):
            app.sendto(datagram("localhost", stack.udp_port, payload), relay)
            assert receive(app) == ("127.0.0.1", stack.udp_port, payload)
    finally:
        app.close()
        ctl.close()
