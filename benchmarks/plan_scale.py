"""Benchmark: planning at scale — 1,000 sites, and loops of 10^9 identical rounds.

Two measurements, each side by side with a peer run in the same go:

* ``sites``: the §12.5 task over N remote sites (varied uplink and RTT), planned
  with thresholds, by this checkout and by another checkout's source tree
  (``--against PEER/src``: measured against the algorithm before the linear search,
  whose threshold search chose among every option at every probe). Runs alternate (new, old, ...)
  in fresh interpreters and the median wall times are compared; the thresholds
  of both are checked to agree to 1e-9.
* ``rounds``: the bundled §12.5 plan with ``task.rounds`` = 20, 10^5, 10^6 and 10^9:
  wall time and peak traced memory (the old code builds per-round arrays and
  lists at every probe of the threshold search, so it runs only up to 10^5: at
  10^9 it needs 8 GB per array).

    python benchmarks/plan_scale.py [--sites 1000] [--against PEER/src] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _args import positive_int, run
from rich.console import Console
from rich.progress import Progress

HERE = Path(__file__).resolve().parent.parent / "src"

SITES_RUN = """
import json, sys, time
from tierwise.plan.planner import plan_file
t = time.perf_counter()
p = plan_file(sys.argv[1])
print(json.dumps({"s": time.perf_counter() - t, "choice": p.choice,
                  "thresholds": [[t["kind"], t["site"], t.get("uplink_bytes_per_s")]
                                 for t in p.thresholds]}))
"""

ROUNDS_RUN = """
import json, sys, time, tracemalloc
from pathlib import Path
from tierwise.plan.planner import plan
from tierwise.scenario.loader import bundled_example, parse_scenario
path = bundled_example("deployment")
scn = parse_scenario(Path(path).read_text(), source=str(path),
                     overrides=[f"task.rounds={sys.argv[1]}", "task.deadline=1e12 s"])
tracemalloc.start()
t = time.perf_counter()
p = plan(scn, source=str(path))
s = time.perf_counter() - t
print(json.dumps({"s": s, "peak_mb": tracemalloc.get_traced_memory()[1] / 1e6,
                  "cloud_s": p.option("cloud").time_s}))
"""


def many_sites(n: int) -> str:
    """The §12.5 task over ``n`` remote sites (the regression test's generator)."""
    base = (HERE / "tierwise/examples/deployment.toml").read_text()
    sites = [
        f'[[site]]\nname = "s{i}"\ntier = "{"edge" if i % 2 else "cloud"}"\n'
        f'hardware = "{"rtx-pro-6000" if i % 2 else "h100-sxm"}"\n'
        f'uplink = "{5 + (i * 37) % 100} Mbit/s"\nrtt = "{10 + (i * 13) % 200} ms"\n'
        for i in range(n)
    ]
    return base.split("[[site]]")[0] + "\n".join(sites) + '\n[decision]\nobjective = "energy"\n'


def _run(src: Path, code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_sites(n: int, against: Path | None, repeats: int, console: Console) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "sites.toml"
        f.write_text(many_sites(n))
        peers = {"new": HERE} | ({"old": against} if against else {})
        times: dict[str, list[float]] = {k: [] for k in peers}
        last: dict[str, dict] = {}
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task(f"{n} sites", total=repeats * len(peers))
            for _ in range(repeats):
                for name, src in peers.items():
                    last[name] = _run(src, SITES_RUN, str(f))
                    times[name].append(last[name]["s"])
                    bar.advance(task)
    new = statistics.median(times["new"])
    console.print(
        f"{n} sites: new {new:.2f} s (runs {', '.join(f'{t:.2f}' for t in times['new'])})"
    )
    if against:
        old = statistics.median(times["old"])
        same = _same_thresholds(last["new"]["thresholds"], last["old"]["thresholds"])
        console.print(
            f"{n} sites: old {old:.2f} s — {old / new:.1f}× slower; "
            f"same choice {last['new']['choice'] == last['old']['choice']}, "
            f"same thresholds {same}"
        )


def _same_thresholds(a: list, b: list) -> bool:
    def close(x, y):
        return x == y or (x is not None and y is not None and abs(x - y) <= 1e-9 * abs(y))

    return len(a) == len(b) and all(
        p[:2] == q[:2] and close(p[2], q[2]) for p, q in zip(a, b, strict=True)
    )


def bench_rounds(against: Path | None, console: Console) -> None:
    for rounds in (20, 10**5, 10**6, 10**9):
        for name, src in {"new": HERE, "old": against}.items():
            if src is None or (name == "old" and rounds > 10**5):
                continue
            r = _run(src, ROUNDS_RUN, str(rounds))
            console.print(
                f"{rounds:>13,} rounds, {name}: {r['s']:.3f} s, peak {r['peak_mb']:.1f} MB, "
                f"cloud {r['cloud_s']:.6g} s"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sites", type=positive_int, default=1000)
    ap.add_argument("--against", type=Path, help="another checkout's src/ to compare with")
    ap.add_argument("--repeats", type=positive_int, default=3)
    ap.add_argument("--only", choices=["sites", "rounds"])
    args = ap.parse_args()
    console = Console(stderr=True)
    if args.only != "rounds":
        bench_sites(args.sites, args.against, args.repeats, console)
    if args.only != "sites":
        bench_rounds(args.against, console)


if __name__ == "__main__":
    run(main)
