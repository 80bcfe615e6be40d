"""Floods at the gateway on loopback: garbage datagrams from another process, stream opens.

Figures are printed (``-s``) and recorded in docs/validation.md, "The relay".
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.relay.conftest import KEY
from tests.relay.test_cli import CLI, free_port, ready_line, start
from tierwise.proto.relay import RelayConfig, wire
from tierwise.relay.client import Client
from tierwise.relay.gateway import Gateway
from tierwise.relay.udp import encode_addr

pytestmark = pytest.mark.slow

FLOOD = """
import os, socket, struct, sys, time
port, rate, seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
pool = []
for i in range(512):
    kind = i % 3
    if kind == 0:
        pool.append(os.urandom(20 + i % 1300))              # random bytes
    elif kind == 1:
        pool.append(bytes([3]) + os.urandom(16 + 40 + i % 1200))  # DATA, unknown session
    else:
        pool.append(bytes([1]) + os.urandom(HELLO_BYTES - 1))          # HELLO-shaped garbage
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sent, t0 = 0, time.monotonic()
while (now := time.monotonic() - t0) < seconds:
    due = int(now * rate)
    while sent < due:
        s.sendto(pool[sent % 512], ("127.0.0.1", port))
        sent += 1
    time.sleep(0.002)
print(sent)
"""


def fetch_s(socks_port: int, http_port: int) -> float:
    """Seconds for one new SOCKS connection and a 1000-byte HTTP GET through the relay."""
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", socks_port), timeout=20) as s:
        s.sendall(b"\x05\x01\x00")
        s.recv(2)
        s.sendall(b"\x05\x01\x00" + encode_addr("127.0.0.1", http_port))
        assert s.recv(10)[1] == 0
        s.sendall(b"GET /1000 HTTP/1.0\r\n\r\n")
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    assert got.endswith(bytes(i % 251 for i in range(1000)))
    return time.perf_counter() - t0


def test_garbage_flood_does_not_slow_real_traffic(http_server: int, tmp_path: Path) -> None:
    """20k garbage datagrams/s from another process at a gateway process: median within 4×."""
    key = tmp_path / "relay.key"
    subprocess.run([*CLI, "relay", "keygen", "--out", str(key)], check=True)
    gport, sport = free_port(socket.SOCK_DGRAM), free_port()
    gw = start("gateway", "--listen", f"127.0.0.1:{gport}", "--allow",
               f"127.0.0.1:{http_server}", "--key-file", str(key))  # fmt: skip
    cl = start("client", "--gateway", f"127.0.0.1:{gport}", "--socks", f"127.0.0.1:{sport}",
               "--key-file", str(key))  # fmt: skip
    flood = None
    try:
        ready_line(cl, "SOCKS5 on")
        n = 30
        for _ in range(3):
            fetch_s(sport, http_server)  # warm
        quiet = [fetch_s(sport, http_server) for _ in range(n)]
        script = FLOOD.replace("HELLO_BYTES", str(wire.HELLO_BYTES))
        flood = subprocess.Popen(
            [sys.executable, "-c", script, str(gport), "20000", "3"],
            stdout=subprocess.PIPE,
            text=True,
        )
        cpu_s = cpu_seconds(gw.pid)
        kernel = udp_drops(gport)
        time.sleep(0.3)
        loud = [fetch_s(sport, http_server) for _ in range(n)]
        sent = int(flood.communicate(timeout=20)[0])
        cpu_s = cpu_seconds(gw.pid) - cpu_s
        kernel = udp_drops(gport) - kernel
        quiet += [fetch_s(sport, http_server) for _ in range(n)]  # the machine's load drifts
    finally:
        for p in (flood, gw, cl):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    ratio = statistics.median(loud) / statistics.median(quiet)
    print(
        f"\nflood: median {statistics.median(quiet) * 1e3:.2f} ms quiet, "
        f"{statistics.median(loud) * 1e3:.2f} ms under flood (×{ratio:.2f}); "
        f"p90 {sorted(quiet)[int(0.9 * 2 * n)] * 1e3:.2f} / {sorted(loud)[int(0.9 * n)] * 1e3:.2f}"
        f" ms; {sent} garbage datagrams in 3 s took the gateway {cpu_s:.2f} CPU s; the kernel "
        f"dropped {kernel}"
    )
    # the flood ran at about its rate and arrived: the kernel's filters dropped it (HELLO-
    # shaped ones are read, and refused, on the slow socket)
    assert sent > 40_000 and kernel > sent // 2
    assert ratio < 4.0  # generous: two shared cores, and the flood sender competes for them


def udp_drops(port: int) -> int:
    """The kernel's drops over the UDP sockets bound to ``port`` (/proc/net/udp)."""
    total = 0
    for line in Path("/proc/net/udp").read_text().splitlines()[1:]:
        cols = line.split()
        if int(cols[1].split(":")[1], 16) == port:
            total += int(cols[-1])
    return total


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (/proc/PID/stat, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def open_flood(client: Client, count: int) -> list[int]:
    """Open ``count`` streams whose header never completes; wait until they have left."""
    await client.start()
    await asyncio.wait_for(client.ready.wait(), 10)
    session = client.session
    assert session is not None
    sids = []
    for i in range(count):
        sids.append(session.conn.open_stream())
        session.conn.send(sids[-1], b"\x40")  # a 64-byte host name that never comes
        if i % 200 == 0:
            session.transmit()
            await asyncio.sleep(0.005)
    session.transmit()
    deadline = time.monotonic() + 20
    while any(session.conn.send_buffered_bytes(s) for s in sids) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return sids


def test_streams_per_session_are_bounded() -> None:
    """5,000 opens against a limit of 256: 256 held, the rest refused, the gateway's map bounded."""

    async def run() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        gateway = Gateway(KEY, {("127.0.0.1", 9)}, RelayConfig(max_streams=256))
        transport, _ = await loop.create_datagram_endpoint(
            lambda: gateway, local_addr=("127.0.0.1", 0)
        )
        # The flood and the gateway share this one event loop; on a loaded host the loop can
        # be late by seconds, and the client must not read that as a silent gateway (it would
        # end the session and count against a second one): the subject here is the gateway.
        patient = RelayConfig(dead_peer_s=60.0)
        try:
            await open_flood(Client(KEY, transport.get_extra_info("sockname"), patient), 5000)
            conn = next(iter(gateway.sessions.values())).conn
            deadline = time.monotonic() + 20  # every open answered: held or refused
            while conn.stats.streams_refused + len(conn.stream_ids) < 5000:
                assert time.monotonic() < deadline, (conn.stats.streams_refused, conn.stream_ids)
                await asyncio.sleep(0.05)
            assert len(gateway.sessions) == 1
            return conn.stats.streams_refused, len(conn.stream_ids), len(gateway._streams)
        finally:
            transport.close()

    refused, open_streams, pending = asyncio.run(run())
    assert refused == 5000 - 256 and open_streams == 256 and pending == 256


def test_stream_open_flood_keeps_gateway_memory_bounded(tmp_path: Path) -> None:
    """8,000 stream opens at a gateway process: its RSS grows by less than 32 MiB."""
    key = tmp_path / "relay.key"
    subprocess.run([*CLI, "relay", "keygen", "--out", str(key)], check=True)
    gport = free_port(socket.SOCK_DGRAM)
    gw = start("gateway", "--listen", f"127.0.0.1:{gport}", "--allow", "127.0.0.1:9",
               "--key-file", str(key), "--max-streams", "256")  # fmt: skip
    psk = bytes.fromhex(key.read_text().strip())
    try:
        ready_line(gw, "gateway listening")
        asyncio.run(open_flood(Client(psk, ("127.0.0.1", gport)), 500))
        before = rss_bytes(gw.pid)
        asyncio.run(open_flood(Client(psk, ("127.0.0.1", gport)), 8_000))
        time.sleep(0.5)
        after = rss_bytes(gw.pid)
        print(f"\nstream flood: gateway RSS {before / 2**20:.1f} → {after / 2**20:.1f} MiB")
        assert gw.poll() is None and after - before < 32 * 2**20
    finally:
        gw.kill()
        gw.wait()
