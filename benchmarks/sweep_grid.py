"""Vectorised sweep against the planner point by point, side by side.

    python benchmarks/sweep_grid.py            # 1,000,000 points × 3 sites

The peer is the planner itself (``plan`` per point, thresholds off), timed on a
sample of the same grid and scaled to the whole grid: the ratio is what the
vectorisation buys. The sweep's time includes building the Arrow tables.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _args import positive_int, run

from tierwise.catalog import load_catalog
from tierwise.plan.planner import plan
from tierwise.plan.sweep_table import open_sweep, tables
from tierwise.scenario.loader import bundled_example

AXES = [
    "site.cloud.uplink=1..100 Mbit/s:log:100",
    "site.cloud.rtt=20..300 ms:100",
    "task.rounds=1..100:100",
]


def main() -> None:
    """Time the sweep over the grid and the planner over a sample of it."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=positive_int, default=200, help="points planned one by one")
    args = ap.parse_args()
    path = bundled_example("deployment")
    start = time.perf_counter()
    run = open_sweep(path, AXES)
    rows = sum(t.num_rows for t in tables(run))
    sweep_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    catalog = load_catalog()
    start = time.perf_counter()
    for point in rng.integers(0, run.size, args.sample):
        index = np.unravel_index(point, run.shape)
        texts = [a.override(int(i)) for a, i in zip(run.axes, index, strict=True)]
        plan(run.base.scenario(texts), catalog, source=str(path), thresholds=False)
    per_point_s = (time.perf_counter() - start) / args.sample
    planner_s = per_point_s * run.size
    print(f"grid: {run.size:,} points × 3 sites = {rows:,} rows")
    print(f"sweep (vectorised): {sweep_s:.2f} s")
    print(f"planner per point: {per_point_s * 1e3:.2f} ms → {planner_s:,.0f} s for the grid")
    print(f"ratio: {planner_s / sweep_s:,.0f}×")


if __name__ == "__main__":
    run(main)
