"""Cross-check table: tierwise.sim against ns-3 3.37 on the bulk transfer with random loss.

30 MB, 20 Mbit/s, 100 ms RTT, segment 1,168 (1,222 B on the wire), IW 10, ACK
every packet, loss on data packets only, seeds 1..N. Prints the median completion
(from the first data byte) of each, per congestion controller and loss rate.

    python benchmarks/ns3_crosscheck.py [--seeds 3] [--cc newreno cubic bbr]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).resolve().parent / "ns3"))

from _args import fraction, positive_int, run
from ns3_runner import available, run_ns3

from tierwise.proto import CONTROLLERS
from tierwise.sim import PathSpec, TcpSpec, run_request

MBIT = 125_000.0


def ours(cc: str, loss: float, seed: int) -> dict:
    path = PathSpec(20 * MBIT, 20 * MBIT, 0.1, up_loss=loss)
    tcp = TcpSpec(cc=cc, mss=1168, header=54, ack_bytes=54, initial_window=10)
    r = run_request(path, tcp, 30_000_000, 0, 0.0, seed=seed, until=100_000.0)
    return {"time": r.time_s, "retx": r.up["retransmissions"], "rto": r.up["rtos"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=positive_int, default=3)
    ap.add_argument("--cc", nargs="+", choices=CONTROLLERS, default=["newreno", "cubic", "bbr"])
    ap.add_argument("--loss", nargs="+", type=fraction, default=[0.0, 0.01, 0.14])
    args = ap.parse_args()
    if not available():
        sys.exit("ns-3 is not installed: apt-get install -y libns3-dev g++ pkg-config")
    ccs = [c for c in args.cc if c in CONTROLLERS]
    rows = []
    with Progress() as progress:
        task = progress.add_task("runs", total=len(ccs) * len(args.loss) * args.seeds)
        for cc in ccs:
            for loss in args.loss:
                a, b = [], []
                for seed in range(1, args.seeds + 1):
                    a.append(ours(cc, loss, seed))
                    b.append(run_ns3(cc, loss, seed=seed, timeout=3600))
                    progress.advance(task)
                rows.append((cc, loss, a, b))
    print("| cc | loss | tierwise.sim median s (RTOs) | ns-3 median s (timeouts) | ratio |")
    print("|---|---|---|---|---|")
    for cc, loss, a, b in rows:
        ta = statistics.median(x["time"] for x in a)
        tb = statistics.median(x["completion_from_first_data_s"] for x in b)
        ra = statistics.median(x["rto"] for x in a)
        rb = statistics.median(x.get("timeouts") or 0 for x in b)
        print(f"| {cc} | {loss:.0%} | {ta:.3f} ({ra:.0f}) | {tb:.3f} ({rb:.0f}) | {ta / tb:.3f} |")


if __name__ == "__main__":
    run(main)
