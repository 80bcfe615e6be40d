"""Benchmark: vectorised Monte Carlo against a plain-Python loop over trials.

100,000 trials × 20 rounds × 3 sites of the §12.5 deployment with per-round
uplink, RTT jitter and disconnects on both remote sites. The loop is the naive
model (every trial, every round drawn with Python's ``random`` and added); the
vectorised path uses sufficient statistics where a distribution has them. Both
answer the same question, so P(T ≤ 45 s), p50 and p99 are printed side by side
and must agree within Monte Carlo error. Runs alternate (vectorised, loop, ...)
and the medians of the wall times are compared.

    python benchmarks/mc_vs_loop.py [--trials 100000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from _args import positive_int, run
from rich.progress import Progress

from tierwise.catalog import load_catalog
from tierwise.plan.montecarlo import site_spec, totals, totals_python
from tierwise.plan.resolve import resolve_site
from tierwise.scenario.loader import bundled_example, parse_scenario

VARIABILITY = """
[variability]
trials = {trials}
seed = 1
[variability.site.workstation]
uplink = {{ dist = "lognormal", median = "80 Mbit/s", sigma = 0.3 }}
rtt_jitter = {{ dist = "exponential", mean = "2 ms" }}
disconnect_probability = 0.01
reconnect = "1 s"
[variability.site.cloud]
uplink = {{ dist = "choice", values = ["6 Mbit/s", "10 Mbit/s"] }}
rtt_jitter = {{ dist = "exponential", mean = "20 ms" }}
disconnect_probability = 0.01
reconnect = "1 s"
progress = "lost"
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=positive_int, default=100_000)
    ap.add_argument("--repeats", type=positive_int, default=3)
    args = ap.parse_args()
    text = Path(bundled_example("deployment")).read_text()
    text = text.replace("[decision]", VARIABILITY.format(trials=args.trials) + "\n[decision]")
    scn = parse_scenario(text, source="benchmark")
    cat = load_catalog()
    costs = [resolve_site(scn, s, cat, "benchmark") for s in scn.site]

    specs = [site_spec(scn, c, "benchmark") for c in costs]

    def vectorised() -> list[np.ndarray]:
        return [totals(sp, args.trials, 1, i) for i, sp in enumerate(specs)]

    def plain() -> list[np.ndarray]:
        return [np.asarray(totals_python(sp, args.trials, 100 + i)) for i, sp in enumerate(specs)]

    fast_t, slow_t = [], []
    with Progress() as progress:
        task = progress.add_task("alternating runs", total=2 * args.repeats)
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fast = vectorised()
            fast_t.append(time.perf_counter() - t0)
            progress.advance(task)
            t0 = time.perf_counter()
            slow = plain()
            slow_t.append(time.perf_counter() - t0)
            progress.advance(task)
    vf, vs = statistics.median(fast_t), statistics.median(slow_t)
    cells = args.trials * scn.task.rounds * len(costs)
    print(f"trials={args.trials} rounds={scn.task.rounds} sites={len(costs)} cells={cells:,}")
    print(f"vectorised: median {vf * 1e3:.1f} ms over {args.repeats} runs")
    print(f"plain loop: median {vs * 1e3:.1f} ms over {args.repeats} runs")
    print(f"speed-up: {vs / vf:.0f}x (goal >= 50x)")
    print(f"{'site':12s} {'P(T<=45 s)':>22s} {'p50 s':>16s} {'p99 s':>16s}   (vectorised / loop)")
    for c, f, s in zip(costs, fast, slow, strict=True):
        print(
            f"{c.site.name:12s} {np.mean(f <= 45):10.4f} / {np.mean(s <= 45):.4f}"
            f" {np.median(f):7.2f} / {np.median(s):6.2f}"
            f" {np.quantile(f, 0.99):7.2f} / {np.quantile(s, 0.99):6.2f}"
        )


if __name__ == "__main__":
    run(main)
