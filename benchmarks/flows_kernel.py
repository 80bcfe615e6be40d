"""Cross-check: CUBIC against BBR in the real kernel (the lab) beside tierwise.sim and ns-3.

The kernel runs come from ``tierwise lab flows`` records (needs root and the lab; lab
runs must not overlap, so run one at a time)::

    tierwise lab flows --cc cubic,bbr --duration 240s \\
        --queue-packets 615 --windows 0-30,30-60,60-120,120-240,0-240 --record k615-1.json

This script reads one or more such records of the same case (repeats), runs the same
dumbbell in tierwise.sim — 20 Mbit/s, 100 ms, a drop-tail queue of the record's
``queue_packets`` packets, 1,168 B segments with 54 B of headers (the kernel's IP
packets are 1,220 B; the emulator's byte queue is ``queue_packets × 1,222`` B), IW 10,
both flows from 0 s — with ``cubic-hystart`` against ``bbr-linux`` and against
``bbr-v1``, and (``--ns3``) ns-3 3.37 with TcpCubic's HyStart on, and prints BBR's share
per window of each beside the kernel's. ``--trace STEP`` also prints both flows' window
and BBR's model every STEP seconds, kernel (``TCP_INFO``/``TCP_CC_INFO``) against ours,
and when each BBR entered ProbeRTT::

    python benchmarks/flows_kernel.py k615-1.json k615-2.json [--ns3] [--trace 10]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from tierwise.lab.experiments.flows import window_shares
from tierwise.sim import PathSpec, TcpSpec
from tierwise.sim.flows import FlowSpec, run_flows

sys.path.insert(0, str(Path(__file__).resolve().parent / "ns3"))
from _args import positive_float, run
from ns3_runner import available, run_ns3_flows

TCP = TcpSpec(mss=1168, header=54, ack_bytes=54, initial_window=10)
OURS = (("cubic-hystart", "bbr-linux"), ("cubic-hystart", "bbr-v1"))
PROBE_RTT_PACKETS = 4  # BBR's window in ProbeRTT (both ours and Linux's)


def ours(queue: int, seconds: float, rate_bps: float, rtt_s: float, pair: tuple[str, str]):
    """tierwise.sim on the record's dumbbell: the result with its series, and CPU s."""
    path = PathSpec(rate_bps, rate_bps, rtt_s, queue_packets=queue)
    t0 = time.process_time()
    r = run_flows(path, TCP, [FlowSpec(cc, 0.0, duration_s=seconds) for cc in pair], series=True)
    return r, time.process_time() - t0


def ns3_series(queue: int, seconds: float) -> tuple[list[float], list[list[int]], list[int]]:
    """ns-3's (times, delivered per flow, RTOs per flow), CUBIC with HyStart against TcpBbr."""
    import csv

    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "ns3.csv"
        t = run_ns3_flows(
            [("cubic", 0.0, seconds), ("bbr", 0.0, seconds)],
            queue_packets=queue,
            trace_file=csv_path,
        )
        rows: dict[int, dict[float, int]] = {}
        with csv_path.open(encoding="utf-8") as f:
            for row in csv.DictReader(f):
                when = round(float(row["time_s"]), 1)
                rows.setdefault(int(row["flow"]), {})[when] = int(float(row["delivered_bytes"]))
    times = sorted(rows[0])
    return (
        times,
        [[rows[f].get(x, 0) for x in times] for f in (0, 1)],
        [f["timeouts"] for f in t["flows"]],
    )


def probe_rtt_entries(cwnd_packets: list[float | None], times: list[float]) -> list[float]:
    """When the window first falls to ProbeRTT's 4 packets after being above it."""
    out, inside = [], False
    for t, w in zip(times, cwnd_packets, strict=True):
        low = w is not None and w <= PROBE_RTT_PACKETS
        if low and not inside and t > 1.0:
            out.append(round(t, 1))
        inside = low
    return out


def kernel_probe_rtt(record: dict) -> list[float]:
    """When the kernel's BBR entered ProbeRTT (its cwnd gain reads 1 only there)."""
    s, f = record["series"], record["parameters"]["ccs"].index("bbr")
    out, inside = [], False
    for t, state in zip(s["time_s"], s["senders"][f], strict=True):
        now = bool(state) and state.get("bbr_cwnd_gain") == 1.0
        if now and not inside and t > 1.0:
            out.append(round(t, 1))
        inside = now
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", type=Path, help="tierwise lab flows --record files")
    ap.add_argument("--ns3", action="store_true", help="also run ns-3 3.37 (if built)")
    ap.add_argument(
        "--trace", type=positive_float, metavar="STEP", help="print the state every STEP s"
    )
    ap.add_argument(
        "--until", type=positive_float, metavar="S", help="with --trace: up to S seconds"
    )
    a = ap.parse_args()
    kernel = []
    for path in a.records:
        try:
            kernel.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            print(
                f"{path}: not a readable `tierwise lab flows --record` file ({exc})",
                file=sys.stderr,
            )
            sys.exit(2)
    try:
        p = kernel[0]["parameters"]
        queue, seconds = p["queue_packets"], p["duration_s"]
        windows = [(w["from_s"], w["to_s"]) for w in kernel[0]["windows"]]
        bbr = p["ccs"].index("bbr")
    except (KeyError, TypeError, ValueError) as exc:
        print(f"{a.records[0]}: not a CUBIC-against-BBR `tierwise lab flows --record` file "
              f"(missing or bad {exc})", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    columns: dict[str, list[float]] = {}
    for i, k in enumerate(kernel):
        columns[f"kernel #{i + 1}"] = [w["shares"][bbr] for w in k["windows"]]
    runs = {}
    for pair in OURS:
        r, cpu = ours(queue, seconds, p["rate_bytes_per_s"], p["rtt_s"], pair)
        runs[pair] = r
        got = window_shares(r["series"]["time_s"], r["series"]["delivered_bytes"], windows)
        columns[f"ours {pair[0]} + {pair[1]}"] = [g[1] for g in got]
        print(f"ours {pair}: {cpu:.1f} s CPU, RTOs {[f['timeouts'] for f in r['flows']]}")
    if a.ns3 and available():
        times, delivered, rtos = ns3_series(queue, seconds)
        columns["ns-3 3.37"] = [g[1] for g in window_shares(times, delivered, windows)]
        print(f"ns-3 RTOs per flow: {rtos}")
    print(
        f"\nBBR's share per window, queue {queue} packets × 1,222 B, {seconds:g} s "
        f"(kernel {kernel[0]['kernel']}; Jain: "
        + ", ".join(f"{k['jain_index']:.3f}" for k in kernel)
        + "; bottleneck tail drops: "
        + ", ".join(f"{k['emulator']['up']['dropped']:,}" for k in kernel)
        + ")"
    )
    print("| window | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for j, (lo, hi) in enumerate(windows):
        print(f"| {lo:g}–{hi:g} s | " + " | ".join(f"{v[j]:.3f}" for v in columns.values()) + " |")
    print("\nProbeRTT entries (s):")
    for i, k in enumerate(kernel):
        print(f"  kernel #{i + 1}: {kernel_probe_rtt(k)}")
    for pair, r in runs.items():
        s = r["series"]
        cwnd = [None if w is None else w / TCP.mss for w in s["cwnd_bytes"][1]]
        print(f"  ours {pair[1]}: {probe_rtt_entries(cwnd, s['time_s'])}")
    if a.trace:
        trace(kernel[0], runs[OURS[0]], a.trace, a.until or seconds)


def trace(k: dict, r: dict, step_s: float, seconds: float) -> None:
    """Windows (packets), BBR's bandwidth (Mbit/s) and RTprop (ms): kernel #1 against ours."""
    ks, s = k["series"], r["series"]

    def at(times: list[float], t: float) -> int:
        return min(range(len(times)), key=lambda i: abs(times[i] - t))

    print(
        "\n| t (s) | CUBIC cwnd kernel | ours | BBR cwnd kernel | ours | BBR bw kernel | ours "
        "| RTprop kernel | ours | srtt kernel | ours |"
    )
    print("|---" * 11 + "|")
    t = step_s
    while t <= seconds + 1e-9:
        i, j = at(ks["time_s"], t), at(s["time_s"], t)
        c, b = ks["senders"][0][i] or {}, ks["senders"][1][i] or {}
        row = [
            c.get("cwnd_segments", 0),
            (s["cwnd_bytes"][0][j] or 0) / TCP.mss,
            b.get("cwnd_segments", 0),
            (s["cwnd_bytes"][1][j] or 0) / TCP.mss,
            b.get("bbr_bw_bytes_per_s", 0) * 8e-6,
            (s["btlbw_bytes_per_s"][1][j] or 0) * 8e-6,
            b.get("bbr_min_rtt_s", 0) * 1e3,
            (s["min_rtt_s"][1][j] or 0) * 1e3,
            c.get("srtt_s", 0) * 1e3,
            (s["srtt_s"][0][j] or 0) * 1e3,
        ]
        print(
            f"| {t:g} | "
            + " | ".join(f"{v:.0f}" if n < 4 else f"{v:.1f}" for n, v in enumerate(row))
            + " |"
        )
        t = round(t + step_s, 9)


if __name__ == "__main__":
    run(main)
