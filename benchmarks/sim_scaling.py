"""Benchmark: does the simulator's wall time grow linearly with the transfer size?

One bulk transfer per size and regime (20 Mbit/s, 100 ms RTT, 1,168-byte segments,
54-byte headers and ACKs, IW 10): a 100,000-packet queue (slow start overshoots it
once the window passes ~120 MB, leaving tens of thousands of SACK ranges), the same
queue with 1 % random loss, and a one-BDP queue (205 packets). Prints CPU time,
events, microseconds per event and each size's CPU time over the previous one's
(10.0 for a 10× size is linear).

    python benchmarks/sim_scaling.py [--sizes 30,300] [--cc newreno]
    PYTHONPATH=/path/to/other/checkout/src python benchmarks/sim_scaling.py   # compare
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy  # noqa: F401  (loaded before timing: a lossy run's first draw would load it)
from _args import run as run_main
from rich.progress import Progress

from tierwise.sim import PathSpec, TcpSpec, run_request

MBIT = 125_000.0
REGIMES = {
    "huge queue": {"queue_packets": 100_000},
    "huge queue + 1 % loss": {"queue_packets": 100_000, "up_loss": 0.01},
    "one-BDP queue": {"queue_packets": 205},
}


def run(cc: str, size_mb: float, regime: dict) -> tuple[float, int, float]:
    """(completion s, events, CPU s) of one transfer."""
    path = PathSpec(20 * MBIT, 20 * MBIT, 0.1, **regime)
    tcp = TcpSpec(cc=cc, mss=1168, header=54, ack_bytes=54, initial_window=10)
    t0 = time.process_time()  # CPU time: the machines are shared, wall time is noisy
    r = run_request(path, tcp, int(size_mb * 1e6), 0, 0.0, seed=1)
    return r.time_s, r.events, time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="30,300", help="MB, comma-separated, ascending")
    ap.add_argument("--cc", default="newreno")
    ap.add_argument("--regimes", default=",".join(REGIMES), help="comma-separated names")
    args = ap.parse_args()
    try:
        sizes = [float(s) for s in args.sizes.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(not 0 < s < 1e5 for s in sizes):
        print(
            f"--sizes: {args.sizes!r} is not a comma-separated list of MB (each > 0)",
            file=sys.stderr,
        )
        sys.exit(2)
    names = [n.strip() for n in args.regimes.split(",")]
    for name in names:
        if name not in REGIMES:
            print(
                f"--regimes: {name!r} is not one of {', '.join(map(repr, REGIMES))}",
                file=sys.stderr,
            )
            sys.exit(2)
    rows = []
    with Progress(transient=True) as progress:
        task = progress.add_task("transfers", total=len(sizes) * len(names))
        for name in names:
            prev = None
            for size in sizes:
                completion, events, wall = run(args.cc, size, REGIMES[name])
                growth = f"{wall / prev:.1f}" if prev else "—"
                rows.append((name, size, completion, events, wall, growth))
                prev = wall
                progress.advance(task)
    print(f"{args.cc}: regime | MB | completion s | events | CPU s | µs/event | × previous")
    for name, size, completion, events, wall, growth in rows:
        print(
            f"{name} | {size:g} | {completion:.6f} | {events:,} | {wall:.2f} | "
            f"{1e6 * wall / events:.1f} | {growth}"
        )


if __name__ == "__main__":
    run_main(main)
