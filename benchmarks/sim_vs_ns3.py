"""Benchmark: tierwise.sim against ns-3 3.37 on the same bulk transfer, alternating runs.

30 MB over a 20 Mbit/s point-to-point link, 100 ms RTT, 1,168-byte segments
(1,222 bytes on the wire: TCP with timestamps, IPv4, PPP), 54-byte ACKs, initial
window 10, an ACK per packet, NewReno, no loss. Both sides use the same queue (by
default 100,000 packets, so nothing drops). Reports wall time, events and events
per second of each, and the completion times (which must agree within 2 %).

    python benchmarks/sim_vs_ns3.py [--repeats 3] [--queue 100000] [--cc newreno]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).resolve().parent / "ns3"))

from ns3_runner import available, run_ns3

from tierwise.sim import PathSpec, TcpSpec, run_request

MBIT = 125_000.0


def ours(cc: str, queue: int) -> tuple[float, int, float]:
    path = PathSpec(20 * MBIT, 20 * MBIT, 0.1, queue_packets=queue)
    tcp = TcpSpec(cc=cc, mss=1168, header=54, ack_bytes=54, initial_window=10)
    t0 = time.perf_counter()
    r = run_request(path, tcp, 30_000_000, 0, 0.0)
    return r.time_s, r.events, time.perf_counter() - t0


def theirs(cc: str, queue: int) -> tuple[float, int, float]:
    r = run_ns3(cc, 0.0, queue_packets=queue, instrument=False)
    return r["completion_from_first_data_s"], int(r.get("events") or 0), r["wall_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--queue", type=int, default=100_000)
    ap.add_argument("--cc", default="newreno")
    args = ap.parse_args()
    if not available():
        sys.exit("ns-3 is not installed: apt-get install -y libns3-dev g++ pkg-config")
    runs: dict[str, list[tuple[float, int, float]]] = {"tierwise.sim": [], "ns-3": []}
    with Progress() as progress:
        task = progress.add_task("alternating runs", total=2 * args.repeats)
        for _ in range(args.repeats):
            runs["tierwise.sim"].append(ours(args.cc, args.queue))
            progress.advance(task)
            runs["ns-3"].append(theirs(args.cc, args.queue))
            progress.advance(task)
    print(
        f"30 MB, 20 Mbit/s, 100 ms RTT, {args.cc}, queue {args.queue} packets, "
        f"{args.repeats} alternating runs each"
    )
    print(
        f"{'simulator':14s} {'completion s':>13s} {'events':>9s} {'wall median s':>14s} "
        f"{'events/s':>10s}"
    )
    walls = {}
    for name, rs in runs.items():
        completion, events, _ = rs[0]
        wall = statistics.median(r[2] for r in rs)
        walls[name] = wall
        rate = f"{events / wall:,.0f}" if events else "n/a"
        print(f"{name:14s} {completion:13.6f} {events:9,d} {wall:14.3f} {rate:>10s}")
    ratio = walls["tierwise.sim"] / walls["ns-3"]
    print(f"wall time ratio tierwise.sim / ns-3 = {ratio:.2f} (goal ≤ 0.5)")
    a, b = runs["tierwise.sim"][0][0], runs["ns-3"][0][0]
    print(f"completion difference: {100 * (a - b) / b:+.3f} %")


if __name__ == "__main__":
    main()
