"""Simulated sweep on Dask: 2 local worker processes against 1, side by side (issue 12).

    python benchmarks/sweep_dask.py            # 200 simulated points, 3 rounds

Each point plans the bundled sim-sweep scenario with its cloud site simulated packet
by packet (``runs`` seeds). Both clusters are started and warmed once (imports and a
first simulation), then run the same grid in turn, 1 → 2 → 1 workers per round; the
rows must agree exactly (seeds depend on run and round only), and the ratio of wall
times is the speed-up. ``cores used`` (worker CPU over wall time) says how much of
the machine the workers actually got: on a shared machine it, not the code, caps it.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
import warnings
from pathlib import Path

from distributed import Client, LocalCluster

from tierwise.plan.sweep_table import sweep

SIM = Path(__file__).parents[1] / "tests" / "plan" / "data" / "sim-sweep.toml"


def _cpu_s() -> float:
    """This process's CPU time (user + system), run on each worker."""
    import resource

    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def _warm() -> None:
    """Import the planner and the simulator, and simulate one point, on a worker."""
    from tierwise.plan.planner import plan_file

    plan_file(SIM)


def timed(client: Client, axes: list[str], runs: int) -> tuple[float, list[float], object]:
    """(wall s, each worker's CPU s, rows) of one sweep on ``client``'s warm cluster."""
    cpu0 = client.run(_cpu_s)
    start = time.perf_counter()
    frame = sweep(SIM, axes, [f"site.cloud.runs={runs}"], client=client)
    wall = time.perf_counter() - start
    cpu = [v - cpu0[k] for k, v in client.run(_cpu_s).items()]
    return wall, cpu, frame


def cluster(workers: int) -> tuple[LocalCluster, Client]:
    """A local cluster of ``workers`` single-threaded processes, warmed up."""
    with warnings.catch_warnings():  # another job's cluster holds :8787: the routes move on
        warnings.filterwarnings("ignore", "Port .* is already in use", UserWarning)
        c = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
    client = Client(c)
    client.run(_warm)  # imports and a first simulation: both clusters start warm
    return c, client


def main() -> None:
    """1 worker, 2 workers, 1 worker again, ``--repeat`` times on the same warm clusters."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=200)
    ap.add_argument("--runs", type=int, default=8, help="seeds per point")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of 1 → 2 → 1 workers")
    ap.add_argument("--profile", action="store_true", help="keep the workers' profiler on")
    args = ap.parse_args()
    if not args.profile:
        import dask

        dask.config.set({"distributed.worker.profile.enabled": False})
    axes = [f"site.cloud.loss=0..0.1:{args.points // 2}", "site.cloud.rtt=50 ms,150 ms"]
    (c1, one), (c2, two) = cluster(1), cluster(2)
    print(f"{args.points} simulated points × {args.runs} seeds; load {os.getloadavg()[0]:.1f}")
    ratios, splits = [], []
    try:
        for r in range(args.repeat):
            one_a, cpu_a, frame_1 = timed(one, axes, args.runs)
            two_s, cpu_2, frame_2 = timed(two, axes, args.runs)
            one_b, cpu_b, _ = timed(one, axes, args.runs)
            assert frame_1["time_s"].equals(frame_2["time_s"]), "rows differ between clusters"
            ratios.append(min(one_a, one_b) / two_s)
            # how the work split: one worker's CPU seconds over the busier of the two
            # workers' (2.0 = even, no overhead); a worker slowed by other jobs steals
            # fewer tasks, so contention skews this too, but less than wall time
            splits.append(min(cpu_a[0], cpu_b[0]) / max(cpu_2))
            print(
                f"round {r + 1}: 1 worker {one_a:.2f} s, {one_b:.2f} s; 2 workers {two_s:.2f} s;"
                f" speed-up {ratios[-1]:.2f}×; cores used: 1 worker "
                f"{(cpu_a[0] + cpu_b[0]) / (one_a + one_b):.2f}, 2 workers "
                f"{sum(cpu_2) / two_s:.2f}; CPU split {splits[-1]:.2f}×, 2-worker CPU "
                f"{sum(cpu_2) / min(cpu_a[0], cpu_b[0]):.2f}× one worker's"
            )
    finally:
        for obj in (one, two, c1, c2):
            obj.close()
    print(f"speed-up: median {statistics.median(ratios):.2f}×, best {max(ratios):.2f}×")
    print(f"CPU split: median {statistics.median(splits):.2f}×")


if __name__ == "__main__":
    main()
