"""Benchmark: the lab emulator's own CPU and release timing on a busy path, polling
before each release (the old loop) against sleeping with fine timer slack (the new).

The emulator's forward loop runs in a child process between two pairs of
SOCK_SEQPACKET sockets (no root, no namespaces: the same loop the lab runs between
its TUN devices). A sender process paces ``--rate`` of ``--size``-byte packets
through a direction with ``--delay`` and a bottleneck at ``--path-rate``; a reader
process takes them off the far side. Reported per variant: the emulator's CPU
seconds per second of the run (user + system), the packets it carried and delivered,
and how late it released each packet against the release time it had scheduled
(median, p90, p99, taken inside the emulator as each leaves its timer heap, so the
sender's and reader's own scheduling are not in it; never early is checked).
Variants alternate, ``--repeats`` times each, in one run.

    python benchmarks/lab_emulator.py [--rate 20000] [--seconds 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import heapq
import multiprocessing as mp
import os
import socket
import statistics
import time

from _args import positive_float, positive_int, run

from tierwise.lab.bench.emulator import (
    EMULATOR_NICE,
    SPIN_S,
    Direction,
    Shaper,
    fine_timer_slack,
    forward,
    raise_priority,
)

VARIANTS = {
    "poll 0.3 ms, 50 µs slack (old)": (0.0003, False, 0),
    "sleep, 1 ns slack": (SPIN_S, True, 0),
    f"sleep, 1 ns slack, nice {EMULATOR_NICE} (new)": (SPIN_S, True, EMULATOR_NICE),
}


def _emulate(fds, direction: Direction, spin_s: float, fine: bool, nice: int, out) -> None:
    if nice:
        raise_priority(nice)
    if fine:
        fine_timer_slack()
    a_to_b, b_to_a = Shaper(direction), Shaper(Direction(), stream=1)
    for fd in fds[:2]:
        os.set_blocking(fd, False)
    late: list[float] = []
    clock, real_pop = time.monotonic, heapq.heappop

    def pop(heap: list) -> tuple:  # forward() binds heapq.heappop when it starts
        item = real_pop(heap)
        late.append(clock() - item[0])
        return item

    heapq.heappop = pop
    start = os.times()
    forward(fds[0], fds[1], a_to_b, b_to_a, fds[2], spin_s=spin_s)
    end = os.times()
    cpu = end.user + end.system - start.user - start.system
    out.put((cpu, a_to_b.stats.packets, a_to_b.stats.write_errors, sorted(late)))


def _send(sock: socket.socket, rate: float, size: int, seconds: float) -> None:
    packet = bytes(size)
    per_ms = rate / 1000
    start = time.monotonic()
    sent = 0.0
    while (now := time.monotonic()) - start < seconds:
        due = (now - start) * 1000 * per_ms
        while sent < due:
            sock.send(packet)
            sent += 1
        time.sleep(0.0005)


def _read(sock: socket.socket, out) -> None:
    sock.settimeout(2.0)
    got = 0
    try:
        while True:
            sock.recv(65536)
            got += 1
    except TimeoutError:
        pass
    out.put(got)


def once(spin_s: float, fine: bool, nice: int, args: argparse.Namespace) -> dict[str, float]:
    """One run of one variant: emulator CPU per second, packets, lateness percentiles."""
    a_out, a_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    b_out, b_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stop_r, stop_w = os.pipe()
    for s in (a_in, b_in, a_out, b_out):  # room for a path's worth of packets in flight
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 24)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    rate_bytes = args.path_rate / 8
    direction = Direction(delay_s=args.delay, rate_bytes_per_s=rate_bytes, queue_bytes=1 << 30)
    ctx = mp.get_context("fork")
    cpu_q, late_q = ctx.Queue(), ctx.Queue()
    emu = ctx.Process(
        target=_emulate,
        args=((a_in.fileno(), b_in.fileno(), stop_r), direction, spin_s, fine, nice, cpu_q),
    )
    reader = ctx.Process(target=_read, args=(b_out, late_q))
    emu.start()
    reader.start()
    started = time.monotonic()
    _send(a_out, args.rate, args.size, args.seconds)
    delivered = late_q.get()
    elapsed = time.monotonic() - started - 2.0  # less the reader's idle timeout
    os.write(stop_w, b"stop\n")
    cpu, packets, write_errors, late = cpu_q.get()
    emu.join()
    reader.join()
    for s in (a_out, a_in, b_out, b_in):
        s.close()
    for fd in (stop_r, stop_w):
        os.close(fd)
    q = lambda p: late[min(len(late) - 1, int(p * (len(late) - 1)))] * 1e6  # noqa: E731
    return {
        "cpu_per_s": cpu / elapsed,
        "packets": packets,
        "delivered": delivered,
        "write_errors": write_errors,
        "early_us": min(0.0, late[0] * 1e6),
        "p50_us": q(0.5),
        "p90_us": q(0.9),
        "p99_us": q(0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=positive_float, default=20000, help="packets/s sent")
    parser.add_argument("--size", type=positive_int, default=1400, help="bytes per packet")
    parser.add_argument("--delay", type=positive_float, default=0.1, help="one-way delay, s")
    parser.add_argument("--path-rate", type=positive_float, default=333e6, help="bit/s")
    parser.add_argument("--seconds", type=positive_float, default=4.0)
    parser.add_argument("--repeats", type=positive_int, default=3)
    args = parser.parse_args()
    if not 20 <= args.size <= 65000:
        parser.error("--size must be 20–65,000 bytes (an IP packet)")
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    for _ in range(args.repeats):
        for name, (spin_s, fine, nice) in VARIANTS.items():
            rows[name].append(once(spin_s, fine, nice, args))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    print(
        f"{args.rate:g} packets/s of {args.size} B, {args.delay * 1e3:g} ms, "
        f"{args.path_rate / 1e6:g} Mbit/s, {args.seconds:g} s × {args.repeats} (medians)"
    )
    print(
        "| variant | emulator CPU s per s | release lateness µs p50 / p90 / p99 "
        "| earliest | delivered |"
    )
    print("|---|---|---|---|---|")
    for name, runs in rows.items():
        m = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(
            f"| {name} | {m['cpu_per_s']:.2f} | {m['p50_us']:.0f} / {m['p90_us']:.0f} / "
            f"{m['p99_us']:.0f} | {min(r['early_us'] for r in runs):.0f} µs | "
            f"{m['delivered']:.0f} of {m['packets']:.0f} |"
        )


if __name__ == "__main__":
    run(main)
