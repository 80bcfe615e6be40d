"""Benchmark: competing flows — simulated data packets per second, and ns-3 side by side.

64 CUBIC flows (staggered starts, 10 ms apart) share one bottleneck of 100 Mbit/s,
100 ms RTT and a one-BDP drop-tail queue (1,023 packets of 1,222 B) for --seconds of
simulated time; 1,168-byte segments, 54-byte headers and ACKs, IW 10. The throughput
is the bottleneck's data packets (retransmissions included) per second of CPU time
(the machine is shared: wall time is noisy). ns-3 3.37 runs the same dumbbell in
between (its CPU time from the child's rusage), alternating ``--repeat`` times; the
ratio is ours over theirs, in CPU time per data packet.

    python benchmarks/sim_flows.py [--flows 64] [--seconds 20] [--repeat 2] [--profile]

Two CUBIC flows and CUBIC against BBR, ours against ns-3 on goodput shares:

    python benchmarks/sim_flows.py --shares [--seconds 120]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

from rich.progress import Progress

from tierwise.sim import PathSpec, TcpSpec
from tierwise.sim.flows import FlowSpec, run_flows

sys.path.insert(0, str(Path(__file__).resolve().parent / "ns3"))
from ns3_runner import available, run_ns3_flows

MBIT = 125_000.0
TCP = TcpSpec(mss=1168, header=54, ack_bytes=54, initial_window=10)


def ours(rate_mbit: float, queue: int, flows: list[tuple[str, float, float]]) -> tuple[dict, float]:
    """(result, CPU s) of the flows in tierwise.sim."""
    path = PathSpec(rate_mbit * MBIT, rate_mbit * MBIT, 0.1, queue_packets=queue)
    specs = [FlowSpec(cc, start, duration_s=duration) for cc, start, duration in flows]
    t0 = time.process_time()
    r = run_flows(path, TCP, specs, seed=1)
    return r, time.process_time() - t0


def theirs(
    rate_mbit: float, queue: int, flows: list[tuple[str, float, float]]
) -> tuple[dict, float]:
    """(result, CPU s of the child) of the same flows in ns-3."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = run_ns3_flows(flows, rate=f"{rate_mbit:g}Mbps", queue_packets=queue)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def speed(n: int, seconds: float, repeat: int) -> None:
    """Data packets per CPU second, ours and ns-3's, alternating."""
    flows = [("cubic", 0.01 * i, seconds - 0.01 * i) for i in range(n)]
    rate, queue = 100.0, 1023
    print(f"{n} CUBIC flows, {rate:g} Mbit/s, 100 ms, queue {queue} packets, {seconds:g} s")
    with Progress(transient=True) as bar:
        task = bar.add_task("running", total=repeat * (2 if available() else 1))
        for _ in range(repeat):
            r, cpu = ours(rate, queue, flows)
            print(
                f"  tierwise.sim: {r['data_packets']:,} data packets in {cpu:.2f} s CPU "
                f"= {r['data_packets'] / cpu:,.0f} packets/s; Jain {r['jain_index']:.3f}"
            )
            bar.advance(task)
            if available():
                t, tcpu = theirs(rate, queue, flows)
                pk = t["bottleneck_data_packets"]
                print(
                    f"  ns-3 3.37:    {pk:,} data packets in {tcpu:.2f} s CPU "
                    f"= {pk / tcpu:,.0f} packets/s; ratio (our CPU per packet / theirs) "
                    f"{(cpu / r['data_packets']) / (tcpu / pk):.2f}"
                )
                bar.advance(task)


def shares(seconds: float) -> None:
    """Goodput shares of two CUBIC flows and of CUBIC against BBR, ours and ns-3's."""
    for pair in (("cubic", "cubic"), ("cubic", "bbr")):
        flows = [(cc, 0.0, seconds) for cc in pair]
        r, _ = ours(20.0, 205, flows)
        line = " / ".join(f"{f['share']:.3f}" for f in r["flows"])
        print(f"{pair[0]} vs {pair[1]}, {seconds:g} s: tierwise.sim shares {line}", end="")
        if available():
            t, _ = theirs(20.0, 205, flows)
            total = sum(f["goodput_bytes_per_s"] for f in t["flows"])
            print(
                "; ns-3 "
                + " / ".join(f"{f['goodput_bytes_per_s'] / total:.3f}" for f in t["flows"])
            )
        else:
            print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flows", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--shares", action="store_true", help="the ns-3 share cross-check instead")
    ap.add_argument("--profile", action="store_true", help="cProfile one run of ours")
    a = ap.parse_args()
    if a.profile:
        import cProfile
        import pstats

        flows = [("cubic", 0.01 * i, a.seconds - 0.01 * i) for i in range(a.flows)]
        prof = cProfile.Profile()
        prof.runcall(ours, 100.0, 1023, flows)
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    elif a.shares:
        shares(a.seconds)
    else:
        speed(a.flows, a.seconds, a.repeat)


if __name__ == "__main__":
    main()
