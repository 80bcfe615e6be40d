"""Benchmark: tierwise.sim against ns-3 3.37 over the issue-14 matrix, alternating runs.

A bulk transfer (30 MB by default) over a 20 Mbit/s point-to-point link, 100 ms RTT,
1,168-byte segments (1,222 bytes on the wire: TCP with timestamps, IPv4, PPP), 54-byte
ACKs, initial window 10, an ACK per packet, for NewReno, CUBIC and BBR in three
regimes: a 100,000-packet queue (nothing drops), a one-BDP queue (205 packets) and
1 % random loss on the data packets (queue 100,000). Runs alternate ours / ns-3.

Two ratios per cell, medians over the repeats:

- in-process: ``run_request`` wall time (in a fresh worker process, so each hot path
  is timed on its own) against ns-3's ``Simulator::Run`` wall time;
- whole-process: ``tierwise sim FILE`` as a subprocess (Python start-up, imports,
  loading the file) against the whole ns-3 process.

Both for the pure-Python hot path (``TIERWISE_PURE_PYTHON=1``) and, when it is built
(``python -m tierwise.sim.build``), the compiled one; completions must agree.

    python benchmarks/sim_vs_ns3.py [--repeats 3] [--size-mb 30] [--cells newreno:bdp,...]
    python benchmarks/sim_vs_ns3.py --no-whole      # in-process ratios only
    python benchmarks/sim_vs_ns3.py --paths pure    # only the pure-Python path
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).resolve().parent / "ns3"))

from _args import run
from ns3_runner import available, run_ns3

from tierwise.sim import PathSpec, TcpSpec, run_request

MBIT = 125_000.0
CONTROLLERS = ("newreno", "cubic", "bbr")
REGIMES = {  # name: (queue packets, loss on data packets)
    "huge": (100_000, 0.0),
    "bdp": (205, 0.0),
    "loss": (100_000, 0.01),
}
REGIME_TITLES = {"huge": "huge queue", "bdp": "one-BDP queue", "loss": "1 % random loss"}
SIM_FILE = """[path]
uplink = "20 Mbit/s"
downlink = "20 Mbit/s"
rtt = "100 ms"
loss_up = {loss}
queue_packets = {queue}

[tcp]
cc = "{cc}"
mss = "1168 B"
header = "54 B"
ack = "54 B"
initial_window = 10

[workload]
kind = "request"
upload = "{size} B"

[run]
seed = 1
"""


def ours(cc: str, regime: str, size: int) -> tuple[float, int, float]:
    """(completion s, events, wall s) of run_request in this process."""
    queue, loss = REGIMES[regime]
    path = PathSpec(20 * MBIT, 20 * MBIT, 0.1, up_loss=loss, queue_packets=queue)
    tcp = TcpSpec(cc=cc, mss=1168, header=54, ack_bytes=54, initial_window=10)
    t0 = time.perf_counter()
    r = run_request(path, tcp, size, 0, 0.0, seed=1)
    return r.time_s, r.events, time.perf_counter() - t0


def _env(path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TIERWISE_PURE_PYTHON"}
    if path == "pure":
        env["TIERWISE_PURE_PYTHON"] = "1"
    return env


def ours_worker(cc: str, regime: str, size: int, path: str) -> tuple[float, int, float]:
    """:func:`ours` in a fresh process running the ``path`` hot path (pure or compiled)."""
    cmd = [sys.executable, __file__, "--worker", f"{cc}:{regime}", "--size-mb", str(size / 1e6)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=_env(path))
    got = json.loads(out.stdout)
    if got["path"] != path:
        sys.exit(f"asked for the {path} hot path, the worker ran {got['path']}")
    return got["time_s"], got["events"], got["wall_s"]


def ours_process(cc: str, regime: str, size: int, tmp: Path, path: str) -> float:
    """Wall time of ``tierwise sim FILE`` as a whole process."""
    queue, loss = REGIMES[regime]
    sim_file = tmp / f"{cc}-{regime}.toml"
    sim_file.write_text(SIM_FILE.format(cc=cc, queue=queue, loss=loss, size=size))
    exe = shutil.which("tierwise") or str(Path(sys.executable).parent / "tierwise")
    t0 = time.perf_counter()
    cmd = [exe, "sim", str(sim_file), "--json"]
    subprocess.run(cmd, check=True, capture_output=True, env=_env(path))
    return time.perf_counter() - t0


def theirs(cc: str, regime: str, size: int) -> tuple[float, int, float, float]:
    """(completion s, events, Simulator::Run wall s, whole-process wall s) of ns-3."""
    queue, loss = REGIMES[regime]
    r = run_ns3(cc, loss, seed=1, size_bytes=size, queue_packets=queue, instrument=False)
    return (
        r["completion_from_first_data_s"],
        int(r.get("events") or 0),
        r["wall_s"],
        r["wall_process_s"],
    )


def _cell(cc: str, regime: str, args: argparse.Namespace, progress, task) -> dict:
    """Alternate ours (each path) / ns-3 for one cell; medians over the repeats."""
    mine: dict[str, list] = {p: [] for p in args.paths}
    whole: dict[str, list] = {p: [] for p in args.paths}
    peer = []
    for _ in range(args.repeats):
        for p in args.paths:
            mine[p].append(ours_worker(cc, regime, args.size, p))
            progress.advance(task)
        peer.append(theirs(cc, regime, args.size))
        progress.advance(task)
        for p in args.paths if args.whole else ():
            whole[p].append(ours_process(cc, regime, args.size, args.tmp, p))
            progress.advance(task)
    row = {
        "cc": cc,
        "regime": regime,
        "ns3_s": peer[0][0],
        "ns3_events": peer[0][1],
        "ns3_wall": statistics.median(x[2] for x in peer),
        "ns3_process": statistics.median(x[3] for x in peer),
    }
    for p in args.paths:
        if {m[:2] for m in mine[p]} != {mine[args.paths[0]][0][:2]}:
            sys.exit(f"{cc} {regime}: the {p} path's completion or events differ: {mine}")
        row["ours_s"], row["ours_events"] = mine[p][0][:2]
        row[f"{p}_wall"] = statistics.median(m[2] for m in mine[p])
        row[f"{p}_ratio"] = row[f"{p}_wall"] / row["ns3_wall"]
        if whole[p]:
            row[f"{p}_process"] = statistics.median(whole[p])
            row[f"{p}_process_ratio"] = row[f"{p}_process"] / row["ns3_process"]
    return row


def measure(cells: list[tuple[str, str]], args: argparse.Namespace) -> list[dict]:
    """Every cell in turn, ours and ns-3 alternating within it."""
    rows = []
    per_repeat = len(args.paths) * (2 if args.whole else 1) + 1
    with Progress() as progress, tempfile.TemporaryDirectory() as tmp:
        args.tmp = Path(tmp)
        task = progress.add_task("alternating runs", total=len(cells) * args.repeats * per_repeat)
        for cc, regime in cells:
            rows.append(_cell(cc, regime, args, progress, task))
    return rows


def _seconds(value: float | None) -> str:
    """A completion time, or what it means that ns-3 reported none."""
    return "did not finish" if value is None else f"{value:.3f}"


def report(rows: list[dict], args: argparse.Namespace) -> None:
    """A markdown table per hot path: completions, events, walls, both ratios."""
    print(
        f"{args.size / 1e6:g} MB, 20 Mbit/s, 100 ms RTT, segment 1,168, IW 10, "
        f"{args.repeats} alternating runs per cell (medians)"
    )
    for p in args.paths:
        print(f"\n{p} hot path\n")
        print(
            "| controller | regime | completion ours / ns-3 (s) | events ours / ns-3 "
            "| wall ours / ns-3 (s) | in-process ratio (≤ 0.5) "
            "| whole process ours / ns-3 (s) | whole-process ratio (≤ 1.0) |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            whole = (
                f"{r[p + '_process']:.2f} / {r['ns3_process']:.2f} "
                f"| **{r[p + '_process_ratio']:.2f}**"
                if p + "_process_ratio" in r
                else "— | —"
            )
            print(
                f"| {r['cc']} | {REGIME_TITLES[r['regime']]} "
                f"| {r['ours_s']:.3f} / {_seconds(r['ns3_s'])} "
                f"| {r['ours_events']:,} / {r['ns3_events']:,} "
                f"| {r[p + '_wall']:.3f} / {r['ns3_wall']:.3f} | **{r[p + '_ratio']:.2f}** "
                f"| {whole} |"
            )


def _worker(cell: str, size: int) -> None:
    """Print one in-process timing as JSON (the parent picks the hot path by env)."""
    import numpy  # noqa: F401  (loaded before timing, as ns-3's libraries are before Run)

    from tierwise.sim.build import active

    cc, regime = cell.split(":", 1)
    time_s, events, wall_s = ours(cc, regime, size)
    path = "compiled" if active() else "pure"
    print(json.dumps({"path": path, "time_s": time_s, "events": events, "wall_s": wall_s}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size-mb", type=float, default=30.0)
    ap.add_argument(
        "--cells",
        default="",
        help="comma-separated cc:regime (regimes: huge, bdp, loss); default: all nine",
    )
    ap.add_argument("--no-whole", dest="whole", action="store_false", help="skip whole-process")
    ap.add_argument("--paths", default="", help="pure,compiled (default: both if built, else pure)")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.size = int(args.size_mb * 1e6)
    if args.worker:
        _worker(args.worker, args.size)
        return
    from tierwise.sim.build import status

    built = status() == "compiled (mypyc)"
    args.paths = args.paths.split(",") if args.paths else ["pure", "compiled"][: 1 + built]
    if "compiled" in args.paths and not built:
        sys.exit(f"no compiled hot path: {status()}; run python -m tierwise.sim.build")
    if not available():
        sys.exit("ns-3 is not installed: apt-get install -y libns3-dev g++ pkg-config")
    if args.cells:
        cells = [tuple(c.split(":", 1)) for c in args.cells.split(",")]
        for cell in cells:
            if len(cell) != 2 or cell[0] not in CONTROLLERS or cell[1] not in REGIMES:
                print(
                    f"--cells: {':'.join(cell)!r} is not CC:REGIME with CC one of "
                    f"{', '.join(CONTROLLERS)} and REGIME one of {', '.join(REGIMES)}",
                    file=sys.stderr,
                )
                sys.exit(2)
    else:
        cells = [(cc, regime) for cc in CONTROLLERS for regime in REGIMES]
    report(measure(cells, args), args)  # type: ignore[arg-type]


if __name__ == "__main__":
    run(main)
