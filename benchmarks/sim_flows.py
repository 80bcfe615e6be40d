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

    python benchmarks/sim_flows.py --shares [--plot docs/img]

CUBIC against BBR traced side by side (every 100 ms: each flow's goodput, cwnd,
pacing rate and the queue, ours from ``run_flows(series=True)``, ns-3's from its
``--traceFile``), printed every --step seconds and plotted:

    python benchmarks/sim_flows.py --trace 615:90 [--bbr bbr-v1] [--plot docs/img]

BBR's share per time window, ours with ``cubic-hystart`` and ``cubic`` against ``bbr-v1``,
ns-3's with TcpCubic's HyStart on (its default) and off (docs/validation.md, "Competing
flows against ns-3"):

    python benchmarks/sim_flows.py --windows 1025:60 [--cut 0-10,0-30,30-60,0-60]
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
from _args import positive_float, positive_int, queue_seconds, run
from _args import windows as windows_arg
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


# (controllers, seconds, queue packets): the share cross-checks, one-BDP queue = 205
# ns-3's TcpBbr implements draft-00 (BBRv1's gains, no pacing margin): ours is "bbr-v1".
SHARE_CASES = [
    (("cubic", "cubic"), 30.0, 205),
    (("cubic", "cubic"), 120.0, 205),
    (("cubic", "bbr-v1"), 30.0, 205),
    (("cubic", "bbr-v1"), 60.0, 1025),
    (("cubic", "bbr-v1"), 240.0, 615),
]


def _ns3_cc(cc: str) -> str:
    return "bbr" if cc.startswith("bbr") else "cubic" if cc.startswith("cubic") else cc


def _window_share(delivered: list[list[float]], times: list[float], a_s: float, b_s: float):
    """The second flow's share of the bytes both delivered between ``a_s`` and ``b_s``."""
    i = min(range(len(times)), key=lambda k: abs(times[k] - a_s))
    j = min(range(len(times)), key=lambda k: abs(times[k] - b_s))
    got = [col[j] - col[i] for col in delivered]
    return got[1] / (sum(got) or 1)


def windows(case: tuple[int, float], spans: list[tuple[float, float]]) -> None:
    """BBR's share per window: ours (cubic-hystart, cubic against bbr-v1) and ns-3's
    (HyStart on, off), each with its RTO count per flow."""
    import tempfile

    queue, seconds = case
    path = PathSpec(20 * MBIT, 20 * MBIT, 0.1, queue_packets=queue)
    columns: dict[str, tuple[list[float], list[int]]] = {}
    for cubic in ("cubic-hystart", "cubic"):
        flows = [FlowSpec(cc, 0.0, duration_s=seconds) for cc in (cubic, "bbr-v1")]
        r = run_flows(path, TCP, flows, series=True)
        s = r["series"]
        got = [_window_share(s["delivered_bytes"], s["time_s"], a, b) for a, b in spans]
        columns[f"ours {cubic}"] = (got, [f["timeouts"] for f in r["flows"]])
    for hystart in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            csv_path = Path(tmp) / "ns3.csv"
            t = run_ns3_flows(
                [("cubic", 0.0, seconds), ("bbr", 0.0, seconds)],
                queue_packets=queue,
                hystart=hystart,
                trace_file=csv_path,
            )
            ns3 = _ns3_trace(csv_path)
        times = sorted(ns3[0])
        delivered = [[ns3[f][x]["delivered_bytes"] for x in times] for f in (0, 1)]
        got = [_window_share(delivered, times, a, b) for a, b in spans]
        columns[f"ns-3 HyStart {'on' if hystart else 'off'}"] = (
            got,
            [f["timeouts"] for f in t["flows"]],
        )
    print(f"BBR's share per window, queue {queue} packets, {seconds:g} s (RTOs per flow)")
    print("| window | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for k, (a, b) in enumerate(spans):
        print(f"| {a:g}–{b:g} s | " + " | ".join(f"{v[0][k]:.3f}" for v in columns.values()) + " |")
    print("| RTOs | " + " | ".join(str(v[1]) for v in columns.values()) + " |")


def shares(plot: Path | None) -> None:
    """Goodput shares of two CUBIC flows and of CUBIC against BBR, ours and ns-3's."""
    rows = []
    with Progress(transient=True) as bar:
        task = bar.add_task("share cases", total=len(SHARE_CASES))
        for pair, seconds, queue in SHARE_CASES:
            flows = [(cc, 0.0, seconds) for cc in pair]
            r, _ = ours(20.0, queue, flows)
            mine = [f["share"] for f in r["flows"]]
            peer = None
            if available():
                t, _ = theirs(20.0, queue, [(_ns3_cc(cc), 0.0, seconds) for cc in pair])
                total = sum(f["goodput_bytes_per_s"] for f in t["flows"]) or 1.0
                peer = [f["goodput_bytes_per_s"] / total for f in t["flows"]]
            rows.append((pair, seconds, queue, mine, peer))
            bar.advance(task)
    for pair, seconds, queue, mine, peer in rows:
        theirs_text = " / ".join(f"{x:.3f}" for x in peer) if peer else "n/a"
        gap = f"{max(abs(a - b) for a, b in zip(mine, peer, strict=True)):.3f}" if peer else ""
        print(
            f"| {' + '.join(c.upper() for c in pair)} | {seconds:g} s | {queue:,} | "
            f"{' / '.join(f'{x:.3f}' for x in mine)} | {theirs_text} | {gap} |"
        )
    if plot is not None:
        _share_figure(rows, plot)


def _share_figure(rows: list, folder: Path) -> None:
    """The second flow's share, ours beside ns-3's, per case (PNG and SVG)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    labels = [f"{p[0]} + {p[1]}\n{s:g} s, queue {q:,}" for p, s, q, _, _ in rows]
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [m[1] for *_, m, _ in rows], 0.4, label="tierwise.sim")
    ax.bar([i + 0.2 for i in x], [p[1] if p else 0 for *_, p in rows], 0.4, label="ns-3 3.37")
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set_xticks(list(x), labels, fontsize="small")
    ax.set_ylabel("second flow's goodput share")
    ax.set_ylim(0, 1)
    ax.legend()
    folder.mkdir(parents=True, exist_ok=True)
    for suffix in ("png", "svg"):
        fig.savefig(
            folder / f"flows-ns3.{suffix}",
            dpi=150,
            metadata={"Date": None} if suffix == "svg" else {},
        )


def _ns3_trace(path: Path) -> dict[int, dict[float, dict[str, float]]]:
    """ns-3's per-flow samples: flow → time (rounded to 0.1 s) → column → value."""
    import csv

    out: dict[int, dict[float, dict[str, float]]] = {}
    with path.open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            t = round(float(row["time_s"]), 1)
            out.setdefault(int(row["flow"]), {})[t] = {k: float(v) for k, v in row.items()}
    return out


def trace(case: tuple[int, float], bbr: str, step_s: float, plot: Path | None) -> None:
    """CUBIC against ``bbr`` over ``QUEUE:SECONDS``: ours and ns-3's time series."""
    import tempfile

    queue, seconds = case
    pair = ("cubic", bbr)
    path = PathSpec(20 * MBIT, 20 * MBIT, 0.1, queue_packets=queue)
    r = run_flows(path, TCP, [FlowSpec(cc, 0.0, duration_s=seconds) for cc in pair], series=True)
    s = r["series"]
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "ns3.csv"
        t = run_ns3_flows(
            [(cc, 0.0, seconds) for cc in ("cubic", "bbr")],
            queue_packets=queue,
            trace_file=csv_path,
        )
        ns3 = _ns3_trace(csv_path)
    total = sum(f["goodput_bytes_per_s"] for f in t["flows"])
    print(
        f"CUBIC + {bbr} (ns-3: TcpBbr), queue {queue}, {seconds:g} s: BBR share ours "
        f"{r['flows'][1]['share']:.3f}, ns-3 {t['flows'][1]['goodput_bytes_per_s'] / total:.3f}"
    )
    print("| t (s) | flow | ours Mbit/s | ours cwnd (pkts) | ns-3 Mbit/s | ns-3 cwnd (pkts) |")
    print("|---|---|---|---|---|---|")
    rows = _trace_rows(s, ns3, step_s, seconds)
    for t_s, f, mine, cwnd, theirs, their_cwnd in rows:
        print(
            f"| {t_s:g} | {pair[f]} | {mine:.1f} | {cwnd:.0f} | {theirs:.1f} | {their_cwnd:.0f} |"
        )
    if plot is not None:
        _trace_figure(pair, rows, plot, queue, seconds)


def _trace_rows(s: dict, ns3: dict, step_s: float, seconds: float) -> list[tuple]:
    """(t, flow, our Mbit/s, our cwnd, ns-3 Mbit/s, ns-3 cwnd) every ``step_s``."""
    times = s["time_s"]

    def at(t: float) -> int:
        return min(range(len(times)), key=lambda k: abs(times[k] - t))

    rows = []
    t_s = step_s
    while t_s <= seconds + 1e-9:
        i, j = at(t_s), at(t_s - step_s)
        for f in (0, 1):
            mine = (s["delivered_bytes"][f][i] - s["delivered_bytes"][f][j]) * 8 / step_s / 1e6
            a, b = ns3[f].get(round(t_s, 1)), ns3[f].get(round(t_s - step_s, 1))
            theirs = (
                (a["delivered_bytes"] - b["delivered_bytes"]) * 8 / step_s / 1e6 if a and b else 0.0
            )
            cwnd = s["cwnd_bytes"][f][i] / TCP.mss
            rows.append((t_s, f, mine, cwnd, theirs, a["cwnd_bytes"] / TCP.mss if a else 0.0))
        t_s = round(t_s + step_s, 9)
    return rows


def _trace_figure(pair: tuple, rows: list, folder: Path, queue: int, seconds: float) -> None:
    """Goodput and cwnd of both flows against time, ours (solid) and ns-3's (dashed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    for f, colour in ((0, "tab:blue"), (1, "tab:orange")):
        pts = [r for r in rows if r[1] == f]
        ts = [r[0] for r in pts]
        top.plot(ts, [r[2] for r in pts], color=colour, label=f"{pair[f]}, tierwise.sim")
        peer = "TcpBbr" if pair[f].startswith("bbr") else "TcpCubic"
        top.plot(ts, [r[4] for r in pts], color=colour, ls="--", label=f"{peer}, ns-3 3.37")
        bottom.plot(ts, [r[3] for r in pts], color=colour)
        bottom.plot(ts, [r[5] for r in pts], color=colour, ls="--")
    top.set_ylabel("goodput (Mbit/s)")
    top.legend(fontsize="small", ncols=2)
    top.set_title(f"CUBIC against BBR, 20 Mbit/s, 100 ms, queue {queue} packets")
    bottom.set_ylabel("cwnd (packets)")
    bottom.set_xlabel("time (s)")
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"flows-bbr-trace-{queue}"
    for suffix in ("png", "svg"):
        fig.savefig(
            folder / f"{stem}.{suffix}", dpi=150, metadata={"Date": None} if suffix == "svg" else {}
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flows", type=positive_int, default=64)
    ap.add_argument("--seconds", type=positive_float, default=20.0)
    ap.add_argument("--repeat", type=positive_int, default=2)
    ap.add_argument("--shares", action="store_true", help="the ns-3 share cross-check instead")
    ap.add_argument("--plot", type=Path, help="with --shares: save flows-ns3.png/.svg here")
    ap.add_argument("--profile", action="store_true", help="cProfile one run of ours")
    ap.add_argument(
        "--trace", type=queue_seconds, metavar="QUEUE:SECONDS", help="CUBIC against BBR, traced"
    )
    ap.add_argument("--bbr", default="bbr-v1", help="with --trace: our BBR controller")
    ap.add_argument("--step", type=positive_float, default=5.0, help="with --trace: table step (s)")
    ap.add_argument(
        "--windows", type=queue_seconds, metavar="QUEUE:SECONDS", help="BBR's share per window"
    )
    ap.add_argument(
        "--cut",
        type=windows_arg,
        default="0-10,0-30,30-60,0-60",
        help="with --windows: windows (s)",
    )
    a = ap.parse_args()
    if a.profile:
        import cProfile
        import pstats

        flows = [("cubic", 0.01 * i, a.seconds - 0.01 * i) for i in range(a.flows)]
        prof = cProfile.Profile()
        prof.runcall(ours, 100.0, 1023, flows)
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    elif a.windows:
        windows(a.windows, a.cut)
    elif a.trace:
        trace(a.trace, a.bbr, a.step, a.plot)
    elif a.shares:
        shares(a.plot)
    else:
        speed(a.flows, a.seconds, a.repeat)


if __name__ == "__main__":
    run(main)
