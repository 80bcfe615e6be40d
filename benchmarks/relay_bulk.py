"""Benchmark: bulk bytes through the real relay processes on loopback, against kernel TCP.

``tierwise relay gateway`` and ``tierwise relay client --forward`` run as real
processes on 127.0.0.1; this script writes ``--mb`` megabytes into the forward
port, a sink thread counts them at the destination, and the CPU seconds of the
two relay processes (``/proc/<pid>/stat``: user + system, over the transfer
only) are divided by the gigabytes moved. Kernel TCP loopback (the same sender
and sink, no relay) runs in the same go as the peer; its CPU is this process's.

    python benchmarks/relay_bulk.py [--mb 100] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _args import positive_float, positive_int, run
from rich.progress import Progress

CHUNK = 256 * 1024
TICKS = os.sysconf("SC_CLK_TCK")


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def sink(server: socket.socket) -> None:
    """Accept connections; count each one's bytes and answer the count (8 bytes).

    A connection the relay resets (the readiness probe closes before the count comes
    back, so the relay resets its stream) must not end the sink: it once did, and every
    later push waited for an accept that never came."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            total = 0
            try:
                while data := conn.recv(CHUNK):
                    total += len(data)
                conn.sendall(total.to_bytes(8, "big"))
            except OSError:
                pass  # reset (the readiness probe's stream): its pusher, if any, reports it


def push(port: int, nbytes: int) -> float:
    """Seconds to send ``nbytes`` to ``port`` and hear the sink confirm all of them."""
    block = os.urandom(CHUNK)
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        sent = 0
        while sent < nbytes:
            n = min(CHUNK, nbytes - sent)
            s.sendall(block[:n])
            sent += n
        s.shutdown(socket.SHUT_WR)
        got = b""
        while len(got) < 8 and (data := s.recv(8)):
            got += data
    elapsed = time.perf_counter() - start
    if int.from_bytes(got, "big") != nbytes:
        raise SystemExit(f"sink confirmed {int.from_bytes(got, 'big')} of {nbytes} bytes")
    return elapsed


def start_relay(tmp: Path, sink_port: int) -> tuple[list[subprocess.Popen], int]:
    key = tmp / "relay.key"
    subprocess.run(["tierwise", "relay", "keygen", "--out", str(key)], check=True)
    gw_port, fwd_port, socks_port = free_port(socket.SOCK_DGRAM), free_port(), free_port()
    common = ["--key-file", str(key), "--log-level", "warning"]
    gw = subprocess.Popen(
        [
            "tierwise",
            "relay",
            "gateway",
            "--listen",
            f"127.0.0.1:{gw_port}",
            "--allow",
            f"127.0.0.1:{sink_port}",
            *common,
        ]
    )
    cl = subprocess.Popen(
        [
            "tierwise",
            "relay",
            "client",
            "--gateway",
            f"127.0.0.1:{gw_port}",
            "--socks",
            f"127.0.0.1:{socks_port}",
            "--forward",
            f"127.0.0.1:{fwd_port}=127.0.0.1:{sink_port}",
            *common,
        ]
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", fwd_port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    push(fwd_port, 1000)  # the session is open and warm before timing
    return [gw, cl], fwd_port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=positive_float, default=100)
    parser.add_argument("--repeats", type=positive_int, default=1)
    args = parser.parse_args()
    nbytes = int(args.mb * 1e6)
    server = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=sink, args=(server,), daemon=True).start()
    sink_port = server.getsockname()[1]
    rows: dict[str, list[tuple[float, float]]] = {"kernel TCP": [], "relay": []}
    with tempfile.TemporaryDirectory() as tmp, Progress(transient=True) as progress:
        procs, fwd_port = start_relay(Path(tmp), sink_port)
        task = progress.add_task(f"{args.mb:g} MB, alternating", total=2 * args.repeats)
        try:
            for _ in range(args.repeats):
                cpu0 = time.process_time()
                seconds = push(sink_port, nbytes)
                rows["kernel TCP"].append((seconds, time.process_time() - cpu0))
                progress.advance(task)
                before = [cpu_s(p.pid) for p in procs]
                seconds = push(fwd_port, nbytes)
                relay_cpu = sum(cpu_s(p.pid) - b for p, b in zip(procs, before, strict=True))
                rows["relay"].append((seconds, relay_cpu))
                progress.advance(task)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=10)
    server.close()
    print(f"{args.mb:g} MB over 127.0.0.1, {args.repeats} run(s), Python {sys.version.split()[0]}")
    print("| path | goodput Mbit/s | CPU s per GB |\n|---|---|---|")
    for name, runs in rows.items():
        seconds = sorted(r[0] for r in runs)[len(runs) // 2]
        cpu = sorted(r[1] for r in runs)[len(runs) // 2]
        print(f"| {name} | {nbytes * 8 / seconds / 1e6:.0f} | {cpu / (nbytes / 1e9):.1f} |")


if __name__ == "__main__":
    run(main)
