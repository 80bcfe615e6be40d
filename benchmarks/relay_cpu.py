"""Benchmark: CPU, datagrams and system calls per byte of the real relay processes on loopback.

No lab: ``tierwise relay gateway`` and ``tierwise relay client --forward`` run as real
processes on 127.0.0.1 in front of a local target, and each variant moves, in turn,

- ``upload``: ``--mb`` megabytes client → gateway (the gateway acknowledges),
- ``download``: ``--mb`` megabytes gateway → client (the client acknowledges; the
  lab's ``throughput`` direction),
- ``requests``: ``--requests`` sequential requests of 354,640 B up and an 8-byte answer
  (the issue's request, without the path's delay),

and reports per process CPU seconds per GB (``/proc/<pid>/stat``, user + system, over
that phase only, and the kernel's share of it), UDP datagrams per MB (the relay
client's own counters: what it sent and what it received) and system calls per MB
(``perf stat`` on each process: all calls, the send and receive calls, ``epoll_wait``;
skipped with a note where ``perf`` cannot
attach). The variants run alternately, repeat by repeat, in one go:

- ``relay``: this source tree;
- ``base``: the relay from ``--base-src DIR`` (``PYTHONPATH=DIR``; e.g. main's ``src``),
  so a change is measured as a ratio against its parent on the same loaded host;
- ``kcptun``: Debian's ``kcptun-client`` / ``kcptun-server`` at the lab's settings for a
  333 Mbit/s, 200 ms path (skipped cleanly where absent).

``--profile DIR`` runs each relay process under cProfile (the interpreter's view: a
compiled function shows as one call, its callees inside it) and prints, per variant and
process, the functions with the most time of their own; the profiles stay in ``DIR``
(``VARIANT-ROLE.prof``, for ``python -m pstats``). It covers the processes' whole life,
so choose one phase (``--phases download``); cProfile's own cost inflates the CPU figures.

    python benchmarks/relay_cpu.py [--mb 50] [--requests 20] [--repeats 2] \\
        [--base-src PEER/src] [--no-kcptun] [--phases download --profile DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _args import choices_list, positive_float, positive_int, run

from tierwise.lab.experiments.tunnels import kcptun_args, kcptun_unavailable_reason, process_cpu_s

CHUNK = 256 * 1024
REQUEST_BYTES = 354_640
PATH_RTT_S, PATH_RATE = 0.2, 333e6 / 8  # kcptun's windows are sized for the lab's bulk path
EVENTS = {
    "calls": "raw_syscalls:sys_enter",
    "send": "syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmmsg,"
    "syscalls:sys_enter_write",
    "recv": "syscalls:sys_enter_recvmsg,syscalls:sys_enter_recvfrom,syscalls:sys_enter_recvmmsg,"
    "syscalls:sys_enter_read",
    "epoll": "syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait",
}


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def target(server: socket.socket) -> None:
    """Serve ``U``/``D`` + u64: ``U`` reads that many bytes and answers the count (8 bytes;
    kcptun's streams carry no half-close); ``D`` sends that many bytes and closes."""
    block = os.urandom(CHUNK)

    def serve(conn: socket.socket) -> None:
        try:
            _serve(conn)
        except ConnectionError:
            pass  # the relay client's --forward check connects and resets once per start

    def _serve(conn: socket.socket) -> None:
        with conn:
            head = b""
            while len(head) < 9 and (data := conn.recv(9 - len(head))):
                head += data
            if len(head) < 9:
                return
            count = int.from_bytes(head[1:], "big")
            if head[:1] == b"D":
                sent = 0
                while sent < count:
                    n = min(CHUNK, count - sent)
                    conn.sendall(block[:n])
                    sent += n
                return
            total = 0
            while total < count and (data := conn.recv(CHUNK)):
                total += len(data)
            conn.sendall(total.to_bytes(8, "big"))

    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def upload(port: int, nbytes: int) -> None:
    block = os.urandom(CHUNK)
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        s.sendall(b"U" + nbytes.to_bytes(8, "big"))
        sent = 0
        while sent < nbytes:
            n = min(CHUNK, nbytes - sent)
            s.sendall(block[:n])
            sent += n
        got = b""
        while len(got) < 8 and (data := s.recv(8)):
            got += data
    if int.from_bytes(got, "big") != nbytes:
        raise SystemExit(f"the target confirmed {int.from_bytes(got, 'big')} of {nbytes} bytes")


def download(port: int, nbytes: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        s.sendall(b"D" + nbytes.to_bytes(8, "big"))
        got = 0
        while data := s.recv(CHUNK):
            got += len(data)
    if got != nbytes:
        raise SystemExit(f"downloaded {got} of {nbytes} bytes")


class Variant:
    """One transport's two processes and the local port that reaches the target."""

    def __init__(
        self,
        name: str,
        tmp: Path,
        target_port: int,
        base_src: str | None,
        profile: Path | None = None,
    ) -> None:
        self.name, self.socks = name, None
        self.port = free_port()
        udp = free_port(socket.SOCK_DGRAM)
        env = dict(os.environ)
        dest = f"127.0.0.1:{target_port}"
        if name == "kcptun":
            env["KCPTUN_KEY"] = os.urandom(16).hex()
            args = kcptun_args(PATH_RTT_S, PATH_RATE)
            argvs = [
                ["kcptun-server", "-l", f"127.0.0.1:{udp}", "-t", dest, *args],
                ["kcptun-client", "-l", f"127.0.0.1:{self.port}", "-r", f"127.0.0.1:{udp}", *args],
            ]
        else:
            if name == "base":
                env["PYTHONPATH"] = base_src or ""
            key = tmp / f"{name}.key"
            key.unlink(missing_ok=True)  # from the previous repeat
            subprocess.run(["tierwise", "relay", "keygen", "--out", str(key)], check=True, env=env)
            self.socks = free_port()
            common = ["--key-file", str(key), "--log-level", "warning"]
            argvs = [
                ["tierwise", "relay", "gateway", "--listen", f"127.0.0.1:{udp}", "--allow", dest],
                ["tierwise", "relay", "client", "--gateway", f"127.0.0.1:{udp}",
                 "--socks", f"127.0.0.1:{self.socks}",
                 "--forward", f"127.0.0.1:{self.port}={dest}"],
            ]  # fmt: skip
            argvs = [argv + common for argv in argvs]
            if profile is not None:  # the console script run under cProfile, in this Python
                script = shutil.which("tierwise") or "tierwise"
                argvs = [
                    [sys.executable, "-m", "cProfile", "-o", str(profile / f"{name}-{role}.prof"),
                     script, *argv[1:]]
                    for role, argv in zip(("gateway", "client"), argvs, strict=True)
                ]  # fmt: skip
        self.procs = {
            role: subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
            for role, argv in zip(("gateway", "client"), argvs, strict=True)
        }
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{name}: the client did not listen within 20 s") from None
                time.sleep(0.2)
        upload(self.port, 1000)  # the session is open and warm before timing

    def datagrams(self) -> tuple[int, int] | None:
        """Datagrams the relay client has sent and received so far (None for kcptun)."""
        if self.socks is None:
            return None
        with socket.create_connection(("127.0.0.1", self.socks), timeout=5) as s:
            s.sendall(b"GET /stats HTTP/1.0\r\n\r\n")
            raw = b""
            while data := s.recv(65536):
                raw += data
        stats = json.loads(raw.partition(b"\r\n\r\n")[2])
        return int(stats["packets_sent"]), int(stats["packets_received"])

    def stop(self) -> None:
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            p.wait(timeout=10)


def system_cpu_s(pid: int) -> float:
    """System (kernel) CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return int(fields[12]) / os.sysconf("SC_CLK_TCK")


def perf_start(pid: int, out: Path) -> subprocess.Popen | None:
    events = ",".join(EVENTS.values())
    try:
        return subprocess.Popen(
            ["perf", "stat", "-x,", "-o", str(out), "-e", events, "-p", str(pid)],
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return None


def perf_stop(proc: subprocess.Popen | None, out: Path) -> dict[str, int] | None:
    if proc is None:
        return None
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=10)
    counts = dict.fromkeys(EVENTS, 0)
    try:
        lines = out.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(",")
        if len(fields) < 3 or not fields[0].isdigit():
            continue
        for kind, names in EVENTS.items():
            if fields[2] in names.split(","):
                counts[kind] += int(fields[0])
    return counts if counts["calls"] else None


def measure(variant: Variant, phase: str, args: argparse.Namespace, tmp: Path) -> dict:
    nbytes = int(args.mb * 1e6) if phase != "requests" else REQUEST_BYTES * args.requests
    cpu0 = {role: process_cpu_s(p.pid) for role, p in variant.procs.items()}
    sys0 = {role: system_cpu_s(p.pid) for role, p in variant.procs.items()}
    outs = {role: tmp / f"perf-{role}.txt" for role in variant.procs}
    perfs = {role: perf_start(p.pid, outs[role]) for role, p in variant.procs.items()}
    time.sleep(0.3)  # perf attached
    dgrams0 = variant.datagrams()
    start = time.perf_counter()
    times = []
    if phase == "upload":
        upload(variant.port, nbytes)
    elif phase == "download":
        download(variant.port, nbytes)
    else:
        for _ in range(args.requests):
            t0 = time.perf_counter()
            upload(variant.port, REQUEST_BYTES)
            times.append(time.perf_counter() - t0)
    seconds = time.perf_counter() - start
    dgrams1 = variant.datagrams()
    calls = {role: perf_stop(perfs[role], outs[role]) for role in variant.procs}
    cpu = {role: process_cpu_s(p.pid) - cpu0[role] for role, p in variant.procs.items()}
    kernel = {role: system_cpu_s(p.pid) - sys0[role] for role, p in variant.procs.items()}
    mb = nbytes / 1e6
    return {
        "mbit_s": nbytes * 8 / seconds / 1e6,
        "cpu_gb": {role: c / (mb / 1e3) for role, c in cpu.items()},
        "sys_share": {role: kernel[role] / c if c > 0 else 0.0 for role, c in cpu.items()},
        "dgrams_mb": None
        if dgrams0 is None or dgrams1 is None
        else [(b - a) / mb for a, b in zip(dgrams0, dgrams1, strict=True)],
        "calls_mb": {
            role: None if c is None else {k: v / mb for k, v in c.items()}
            for role, c in calls.items()
        },
        "request_ms": statistics.median(times) * 1e3 if times else None,
    }


def fmt_calls(c: dict | None) -> str:
    if c is None:
        return "—"
    return f"{c['calls']:.0f} ({c['send']:.0f} / {c['recv']:.0f} / {c['epoll']:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=positive_float, default=50)
    parser.add_argument("--requests", type=positive_int, default=20)
    parser.add_argument("--repeats", type=positive_int, default=2)
    parser.add_argument("--base-src", help="a source tree (its src/) to run side by side")
    parser.add_argument("--no-kcptun", action="store_true")
    parser.add_argument(
        "--profile", type=Path, help="cProfile each relay process into this directory"
    )
    parser.add_argument("--top", type=positive_int, default=25, help="functions per profile shown")
    parser.add_argument(
        "--phases",
        type=choices_list(("upload", "download", "requests")),
        default="upload,download,requests",
    )
    args = parser.parse_args()
    names = ["relay"] + (["base"] if args.base_src else [])
    if args.profile is not None:
        if not args.profile.is_dir():
            parser.error(f"--profile {args.profile}: expected an existing directory")
        args.no_kcptun = True  # nothing of it to profile
    reason = kcptun_unavailable_reason()
    if not args.no_kcptun and reason is None:
        names.append("kcptun")
    elif not args.no_kcptun:
        print(f"kcptun skipped: {reason}", file=sys.stderr)
    phases = args.phases
    server = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=target, args=(server,), daemon=True).start()
    results: dict[tuple[str, str], list[dict]] = {}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for name in names:
                variant = Variant(
                    name, Path(tmp), server.getsockname()[1], args.base_src, args.profile
                )
                try:
                    for phase in phases:
                        row = measure(variant, phase, args, Path(tmp))
                        results.setdefault((name, phase), []).append(row)
                        print(f"  {name} {phase}: {row['mbit_s']:.0f} Mbit/s", file=sys.stderr)
                finally:
                    variant.stop()
                load.append(os.getloadavg()[0])
    server.close()
    print(
        f"{args.mb:g} MB bulk, {args.requests} requests of {REQUEST_BYTES:,} B, over 127.0.0.1, "
        f"{args.repeats} repeat(s) alternated, median shown; load average (1 min) "
        f"{min(load):.2f}–{max(load):.2f}; Python {sys.version.split()[0]}"
    )
    print(
        "| variant | phase | Mbit/s | CPU s/GB client / gateway | of it in the kernel "
        "| datagrams/MB client sent / received "
        "| syscalls/MB client (send / recv / epoll) | syscalls/MB gateway | request ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (name, phase), rows in results.items():

        def med(key, rows=rows):  # type: ignore[no-untyped-def]
            values = [key(r) for r in rows]
            if any(v is None for v in values):
                return None
            return statistics.median(values)

        cpu = [med(lambda r, role=role: r["cpu_gb"][role]) for role in ("client", "gateway")]
        kernel = [med(lambda r, role=role: r["sys_share"][role]) for role in ("client", "gateway")]
        calls = {
            role: None
            if any(r["calls_mb"][role] is None for r in rows)
            else {k: med(lambda r, role=role, k=k: r["calls_mb"][role][k]) for k in EVENTS}
            for role in ("client", "gateway")
        }
        dgrams = (
            None
            if rows[0]["dgrams_mb"] is None
            else [med(lambda r, i=i: r["dgrams_mb"][i]) for i in (0, 1)]
        )
        req = med(lambda r: r["request_ms"])
        print(
            f"| {name} | {phase} | {med(lambda r: r['mbit_s']):.0f} | {cpu[0]:.1f} / {cpu[1]:.1f} "
            f"| {kernel[0]:.0%} / {kernel[1]:.0%} "
            f"| {'—' if dgrams is None else f'{dgrams[0]:.0f} / {dgrams[1]:.0f}'} "
            f"| {fmt_calls(calls['client'])} "
            f"| {fmt_calls(calls['gateway'])} | {'—' if req is None else f'{req:.1f}'} |"
        )
    if args.profile is not None:
        for name in names:
            for role in ("client", "gateway"):
                path = args.profile / f"{name}-{role}.prof"
                print(f"\n## {name} {role} (the last repeat; {path.name}), by own time")
                pstats.Stats(str(path)).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    run(main)
