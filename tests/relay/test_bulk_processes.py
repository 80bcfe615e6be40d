"""Bulk beside small streams, byte-exact, through real processes and a lossy UDP path.

``tierwise relay gateway`` and ``tierwise relay client`` run as their own processes;
the client dials the gateway through an impairing UDP proxy in this process (the
simulator's :class:`~tierwise.sim.relay.OneWayPath`, as in ``test_impaired.py``) that drops
14 % of the datagrams each way. A threaded TCP service behind the gateway answers each
stream's upload with its SHA-256 and a download of the size asked for. One stream
downloads a large payload while several streams of random sizes (1 B to 1 MB each
way, log-uniform) run beside it; every stream must arrive byte-exact (SHA-256).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.relay.conftest import tcp_source
from tests.relay.test_impaired import ImpairedPath, sizes
from tierwise.relay.udp import encode_addr
from tierwise.sim.relay import OneWayPath

CLI = [sys.executable, "-c", "from tierwise.cli import main; main()"]
_HEAD = struct.Struct(">QQQ")  # upload bytes, download bytes, seed
CHUNK = 1 << 20


def chunks(seed: int, size: int) -> Iterator[bytes]:
    """Deterministic pseudo-random bytes, ``size`` of them in pieces of ≤ 1 MiB."""
    rng = np.random.default_rng(seed)
    while size > 0:
        n = min(size, CHUNK)
        yield rng.bytes(n)
        size -= n


def digest(seed: int, size: int) -> bytes:
    h = hashlib.sha256()
    for piece in chunks(seed, size):
        h.update(piece)
    return h.digest()


def _read_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        piece = conn.recv(min(n - len(buf), CHUNK))
        if not piece:
            raise ConnectionError("short")
        buf += piece
    return bytes(buf)


def serve_one(conn: socket.socket) -> None:
    """Read the header and the upload (hashing it); answer its SHA-256 and the download."""
    with conn:
        try:
            up, down, seed = _HEAD.unpack(_read_exact(conn, _HEAD.size))
            h, left = hashlib.sha256(), up
            while left:
                piece = conn.recv(min(left, CHUNK))
                if not piece:
                    return
                h.update(piece)
                left -= len(piece)
            conn.sendall(h.digest())
            for piece in chunks(seed + 1, down):
                conn.sendall(piece)
        except OSError:
            pass


@pytest.fixture
def service() -> Iterator[int]:
    def serve(conn: socket.socket, _index: int) -> None:
        conn.settimeout(None)
        serve_one(conn)

    with tcp_source(lambda: 0, serve, threading.Event()) as port:
        yield port


def exchange(socks_port: int, service_port: int, up: int, down: int, seed: int, timeout_s: float):  # type: ignore[no-untyped-def]
    """('complete' | 'error: …' | 'truncated: …', seconds) for one stream through SOCKS5."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", socks_port), timeout=timeout_s) as s:
            s.sendall(b"\x05\x01\x00")
            assert s.recv(2) == b"\x05\x00"
            s.sendall(b"\x05\x01\x00" + encode_addr("127.0.0.1", service_port))
            head = _read_exact(s, 10)
            if head[1] != 0:
                return f"error: SOCKS reply {head[1]}", time.monotonic() - t0
            s.sendall(_HEAD.pack(up, down, seed))
            for piece in chunks(seed, up):
                s.sendall(piece)
            got, h = 0, hashlib.sha256()
            answer = b""
            while chunk := s.recv(CHUNK):
                if len(answer) < 32:
                    take = 32 - len(answer)
                    answer += chunk[:take]
                    chunk = chunk[take:]
                h.update(chunk)
                got += len(chunk)
    except OSError as exc:
        return f"error: {exc!r}", time.monotonic() - t0
    seconds = time.monotonic() - t0
    if answer == digest(seed, up) and got == down and h.digest() == digest(seed + 1, down):
        return "complete", seconds
    return f"truncated: {len(answer) + got} of {32 + down} B", seconds


def _free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(pred, what: str, timeout_s: float, procs: list) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        for proc in procs:
            assert proc.poll() is None, f"{what}: a relay process ended ({proc.args})"
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def run_bulk(  # type: ignore[no-untyped-def]
    tmp: Path,
    service_port: int,
    path: OneWayPath,
    pairs: list[tuple[int, int]],
    timeout_s: float,
    extra: tuple[str, ...] = (),
):
    """Gateway and client as processes behind ``path`` each way; run ``pairs`` at once.
    Returns (outcomes with seconds, the two paths, the processes' logs)."""
    key = tmp / "relay.key"
    subprocess.run([*CLI, "relay", "keygen", "--out", str(key)], check=True)
    gw_port, socks_port = _free_port(socket.SOCK_DGRAM), _free_port(socket.SOCK_STREAM)
    logs = {name: tmp / f"{name}.log" for name in ("gateway", "client")}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs: list[subprocess.Popen] = []
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    up, down = replace(path), replace(path)  # fresh state each way
    impaired = ImpairedPath(("127.0.0.1", gw_port), up, down, seed=5)
    try:
        with logs["gateway"].open("w") as err:
            procs.append(subprocess.Popen(
                [*CLI, "relay", "gateway", "--listen", f"127.0.0.1:{gw_port}",
                 "--allow", f"127.0.0.1:{service_port}", "--key-file", str(key), *extra],
                stderr=err, env=env))  # fmt: skip
        _wait_for(lambda: "listening" in logs["gateway"].read_text(), "gateway", 20, procs)
        front = asyncio.run_coroutine_threadsafe(impaired.start(), loop).result(10)
        with logs["client"].open("w") as err:
            procs.append(subprocess.Popen(
                [*CLI, "relay", "client", "--gateway", f"127.0.0.1:{front[1]}",
                 "--socks", f"127.0.0.1:{socks_port}", "--key-file", str(key), *extra],
                stderr=err, env=env))  # fmt: skip
        _wait_for(lambda: _listening(socks_port), "client", 30, procs)
        with ThreadPoolExecutor(len(pairs)) as pool:
            futures = [
                pool.submit(exchange, socks_port, service_port, u, d, 1000 + i, timeout_s)
                for i, (u, d) in enumerate(pairs)
            ]
            outcomes = [f.result() for f in futures]
        cpu_s = {name: _cpu_s(proc.pid) for name, proc in zip(logs, procs, strict=True)}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        loop.call_soon_threadsafe(impaired.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    return outcomes, (up, down), {k: v.read_text() for k, v in logs.items()}, cpu_s


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


LOSSY = OneWayPath(delay_s=0.01, loss=0.14)


@pytest.mark.slow
def test_hundred_megabytes_beside_random_streams_at_fourteen_percent_loss(
    tmp_path: Path, service: int
) -> None:
    """One 100 MB download beside 8 concurrent streams of random sizes (1 B–1 MB each
    way, seeded), at 14 % random loss each way, through real processes: byte-exact."""
    pairs = [(1000, 100_000_000), *sizes(12, 6, 1_000_000)]
    outcomes, paths, logs, cpu_s = run_bulk(tmp_path, service, LOSSY, pairs, timeout_s=300)
    report = [(pair, o, round(s, 1)) for pair, (o, s) in zip(pairs, outcomes, strict=True)]
    print(report, cpu_s, os.getloadavg())  # shown with -s: seconds per stream, CPU, load
    assert [o for o, _ in outcomes] == ["complete"] * len(pairs), (report, logs)
    up, down = paths
    assert down.sent > 100_000_000 / 1350 and up.sent > 1000, (up.sent, down.sent)
    for path in paths:  # the path did drop about 14 % each way
        assert 0.12 * path.sent < path.dropped < 0.16 * path.sent, (path.sent, path.dropped)


if (
    __name__ == "__main__"
):  # a smaller reproduction by hand: python -m tests.relay.test_bulk_processes MB
    import tempfile

    mb = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    up_mb = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    server = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    pairs = [(1000, mb * 1_000_000), *sizes(12, 6, 1_000_000)]
    pairs += [(up_mb * 1_000_000, 1000)] if up_mb else []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        outcomes, paths, logs, cpu_s = run_bulk(
            Path(tmp), server.getsockname()[1], LOSSY, pairs, 600
        )
        for pair, (o, s) in zip(pairs, outcomes, strict=True):
            print(pair, o, f"{s:.1f}s")
        print("total", f"{time.monotonic() - t0:.1f}s", "sent/dropped",
              [(p.sent, p.dropped) for p in paths], "cpu", cpu_s, os.getloadavg())  # fmt: skip
        for name, text in logs.items():
            print("----", name)
            print(text[-3000:])
