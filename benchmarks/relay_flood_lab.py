"""Benchmark: the relay gateway flooded in the lab, where its sessions cross a long path.

``relay_flood.py`` floods a gateway whose client is beside it on loopback. Here the
client sits behind the lab's emulated path (200 ms, 100 Mbit/s by default: the request
case of docs/benchmarks.md) and the flood comes from the gateway's own side, as an
attacker on the gateway's network would send it: ``tests/relay/flooder.py`` runs in the
server namespace and sends to the gateway's UDP port as fast as one core does, one class
at a time, each between two quiet runs:

``spin`` (sends nothing, keeps its core busy: the control), ``random`` bytes, ``unknown``
session ids, ``hello``-shaped (dated now, no admission tag), ``hello-observed`` (the
key's current admission tag, as copied off the path), ``replay`` (authentic datagrams of
a live session, recorded here and replayed) and ``badtag`` (that session's id, a bad
tag). The client-side and spoofed classes stay on loopback (``relay_flood.py``): a
flood at the client would cross the emulator, whose own ceiling it would measure.

Per run: an established session's bulk goodput (a download through the same session for
``--bulk-seconds``), the median of ``--requests`` requests of 354,640 B up and 1,000 B
back (30 ms at the service; floor 0.258 s), and the seconds a new client's session
takes to come up (10 s: never), from this process in the client namespace. Goals (issue
30): bulk ≥ 50 % of quiet, request ≤ 1.5 × quiet, new session ≤ 2 s.

``--pin`` puts the flooder on CPU 0 and everything else — the emulator, both relay
processes, the service and this process — on CPU 1 (quiet runs too, with a process that
naps on CPU 0: ``relay_flood.py``'s docstring says why). Root, /dev/net/tun and ``ip``;
hold the lab's lock::

    flock /tmp/tierwise-lab.lock python benchmarks/relay_flood_lab.py [--pin] \\
        [--classes spin,random,...] [--seconds 20] [--requests 9] [--bulk-seconds 6]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import relay_flood
from _args import positive_float, positive_int, run

from tierwise.lab.bench import netns
from tierwise.lab.bench.path import EmulatedPath, PathConfig
from tierwise.lab.bench.service import ModelService, ServiceConfig
from tierwise.lab.experiments.tunnels import (
    GATEWAY_PORT,
    open_tunnel,
    process_cpu_s,
    upload_body,
)
from tierwise.lab.experiments.via import _request, _Source
from tierwise.proto.relay.crypto import admission_key, admission_tag

FLOODER = relay_flood.FLOODER
CLASSES = ("spin", "random", "unknown", "hello", "hello-observed", "replay", "badtag")
REQUEST_BYTES, RESPONSE_BYTES, PROCESSING_S = 354_640, 1000, 0.03
BULK_BYTES = 10**9  # more than any bound: the download runs for --bulk-seconds


def _on_cpus(cpus: set[int] | None):  # type: ignore[no-untyped-def]
    return None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))


def kernel_drops(pid: int, port: int) -> int:
    """The kernel's drops summed over the UDP sockets on ``port`` in ``pid``'s namespace
    (the gateway's ``SO_REUSEPORT`` group: queue overflows and socket filters' drops)."""
    total = 0
    for line in Path(f"/proc/{pid}/net/udp").read_text().splitlines()[1:]:
        cols = line.split()
        if int(cols[1].split(":")[1], 16) == port:
            total += int(cols[-1])
    return total


def new_session_s(psk: bytes, gateway: tuple[str, int], namespace: str) -> float:
    """Seconds from a new client's start, in ``namespace``, to its session being up."""
    with netns.entered(namespace):
        return relay_flood.new_session_s(psk, gateway)


def bulk_goodput(path: EmulatedPath, port: int, seconds: float) -> float:
    """Bytes a second of a download through the relay's bulk forward, read for ``seconds``."""
    sock = path.socket("client")
    with sock:
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        got, start = 0, time.perf_counter()
        stop = start + seconds
        while (now := time.perf_counter()) < stop:
            sock.settimeout(max(stop - now, 0.01))
            try:
                data = sock.recv(1 << 18)
            except TimeoutError:
                break
            if not data:
                break
            got += len(data)
        return got / (time.perf_counter() - start)


def measure(path: EmulatedPath, tunnel, body: bytes, psk: bytes, args) -> dict:  # type: ignore[no-untyped-def]
    gateway = (path.server_addr, GATEWAY_PORT)
    session_s = new_session_s(psk, gateway, path.client_ns)
    goodput = bulk_goodput(path, tunnel.extra_ports["bulk"], args.bulk_seconds)
    times = []
    for _ in range(args.requests):
        conn = _request(path, tunnel, body, None)
        times.append(conn.events["last_response"] - conn.events["connect_start"])
    return {
        "goodput_mbit": goodput * 8e-6,
        "request_s": statistics.median(times),
        "session_s": session_s,
    }


def flooder(kind: str, args: argparse.Namespace, ctx: dict) -> list[str]:
    cmd = [sys.executable, str(FLOODER), "--seconds", str(args.seconds), f"--to={ctx['to']}"]
    if kind in ("spin", "nap", "random", "unknown", "hello"):
        return [*cmd, "--kind", kind]
    if kind == "hello-observed":
        return [*cmd, "--kind", "hello", "--tag", ctx["tag"]]
    if kind == "replay":
        return [*cmd, "--kind", "file", "--payloads", ctx["replay"]]
    assert kind == "badtag"
    return [*cmd, "--kind", "badtag", "--cid", ctx["cid"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", default=",".join(CLASSES))
    parser.add_argument("--seconds", type=positive_float, default=20, help="a flood's bound")
    parser.add_argument("--requests", type=positive_int, default=9)
    parser.add_argument("--bulk-seconds", type=positive_float, default=6)
    parser.add_argument("--rtt-ms", type=positive_float, default=200)
    parser.add_argument("--rate-mbit", type=positive_float, default=100)
    parser.add_argument("--pin", action="store_true", help="flooder on CPU 0, the rest on CPU 1")
    args = parser.parse_args()
    classes = [c for c in args.classes.split(",") if c]
    for c in classes:
        if c not in CLASSES:
            parser.error(f"--classes: unknown class {c!r}; known: {', '.join(CLASSES)}")
    netns.require_lab()
    flood_cpu = rest_cpu = None
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            parser.error("--pin needs two CPUs")
        flood_cpu, rest_cpu = {cpus[0]}, {cpus[1]}
        os.sched_setaffinity(0, rest_cpu)  # before any thread or child: they inherit it
    rate = args.rate_mbit * 1e6 / 8
    config = PathConfig.symmetric(rtt_s=args.rtt_ms / 1e3, rate_bytes_per_s=rate)
    body = upload_body(REQUEST_BYTES, 0)
    service = ServiceConfig(PROCESSING_S, RESPONSE_BYTES, None, None, digest=True)
    where = f"flooder on CPU {flood_cpu}, the rest on CPU {rest_cpu}" if args.pin else "unpinned"
    print(f"placement: {where}; load {os.getloadavg()[0]:.2f}", flush=True)
    path = EmulatedPath(config)
    rows: list[tuple[str, dict, int, float, int]] = []
    with (
        path,
        ModelService(path.server_ns, path.server_addr, service) as svc,
        contextlib.ExitStack() as stack,
        tempfile.TemporaryDirectory(prefix="tw-flood-") as tmp,
    ):
        source = _Source(path, BULK_BYTES, "cubic")
        stack.callback(source.close)
        target = (path.server_addr, svc.port)
        extra = {"bulk": source.address}
        tunnel = stack.enter_context(
            open_tunnel("relay", path, target, args.rtt_ms / 1e3, rate, extra=extra)
        )
        gateway_pid = tunnel.processes["server"].pid
        key = Path(tunnel.logs["server"]).parent / "relay.key"
        psk = bytes.fromhex(key.read_text().strip())
        for _ in range(3):  # warm: the session learns the path
            _request(path, tunnel, body, None)
        second = relay_flood.Recorder(psk, (path.server_addr, GATEWAY_PORT), None, path.client_ns)
        stack.callback(second.close)
        replay = Path(tmp) / "replay.hex"
        replay.write_text("\n".join(d.hex() for d in second.sent))
        ctx = {
            "to": f"{path.server_addr}:{GATEWAY_PORT}",
            "tag": admission_tag(admission_key(psk), time.time()).hex(),
            "replay": str(replay),
            "cid": second.cid.hex(),
        }

        def spawn(kind: str) -> subprocess.Popen[str]:
            argv = netns.exec_argv(path.server_ns, flooder(kind, args, ctx))
            return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                                    preexec_fn=_on_cpus(flood_cpu))  # fmt: skip

        def quiet() -> dict:
            if not args.pin:
                return measure(path, tunnel, body, psk, args)
            nap = spawn("nap")
            try:
                return measure(path, tunnel, body, psk, args)
            finally:
                nap.terminate()
                nap.communicate(timeout=30)

        rows.append(("quiet", quiet(), 0, 0.0, 0))
        for kind in classes:
            drops0, cpu0 = kernel_drops(gateway_pid, GATEWAY_PORT), process_cpu_s(gateway_pid)
            ctx["tag"] = admission_tag(admission_key(psk), time.time()).hex()
            flood = spawn(kind)
            time.sleep(0.5)
            try:
                row = measure(path, tunnel, body, psk, args)
            finally:
                flood.terminate()
                out = flood.communicate(timeout=30)[0].split()
            sent = int(int(out[0]) / float(out[1])) if len(out) == 2 else 0
            cpu = process_cpu_s(gateway_pid) - cpu0
            drops = kernel_drops(gateway_pid, GATEWAY_PORT) - drops0
            rows.append((kind, row, sent, cpu, drops))
            tunnel.check_alive()
            rows.append(("quiet", quiet(), 0, 0.0, 0))
            print(f"  {kind}: done", flush=True)
    report(rows, args)


def report(rows: list[tuple[str, dict, int, float, int]], args: argparse.Namespace) -> None:
    quiet = [r for name, r, *_ in rows if name == "quiet"]
    q_bulk = statistics.median(r["goodput_mbit"] for r in quiet)
    q_req = statistics.median(r["request_s"] for r in quiet)
    q_new = statistics.median(r["session_s"] for r in quiet)
    floor = (args.rtt_ms / 1e3 + REQUEST_BYTES * 8 / (args.rate_mbit * 1e6) + PROCESSING_S
             + RESPONSE_BYTES * 8 / (args.rate_mbit * 1e6))  # fmt: skip
    print(f"quiet (median of {len(quiet)}): bulk {q_bulk:.1f} Mbit/s, request "
          f"{q_req * 1e3:.1f} ms ({q_req / floor:.3f} x the floor), new session "
          f"{q_new:.2f} s")  # fmt: skip
    print(f"{'class':<16}{'flood/s':>10}{'bulk':>16}{'request':>18}{'session':>10}"
          f"{'gateway CPU s':>15}{'kernel drops':>14}  goals")  # fmt: skip
    for name, r, sent, cpu, drops in rows:
        if name == "quiet":
            continue
        share, ratio = r["goodput_mbit"] / q_bulk, r["request_s"] / q_req
        ok = share >= 0.5 and ratio <= 1.5 and r["session_s"] <= 2.0
        print(f"{name:<16}{sent:>10}{r['goodput_mbit']:>9.1f} ({share:>4.0%})"
              f"{r['request_s'] * 1e3:>10.1f} ms x{ratio:.2f}{r['session_s']:>8.2f} s"
              f"{cpu:>15.1f}{drops:>14}  {'ok' if ok else 'MISSED'}")  # fmt: skip
    print(f"load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    run(main)
