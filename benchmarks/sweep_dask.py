"""Simulated sweep on Dask: 2 local worker processes against 1, side by side (issue 12).

    python benchmarks/sweep_dask.py            # 200 simulated points

Each point plans the bundled sim-sweep scenario with its cloud site simulated packet
by packet (``runs`` seeds). Both clusters run the same grid in one go; the rows must
agree exactly (seeds depend on run and round only), and the ratio of wall times is
the speed-up.
"""

from __future__ import annotations

import argparse
import time
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


def timed(workers: int, axes: list[str], runs: int) -> tuple[float, float, object]:
    """(wall s, worker CPU s) of the sweep on a fresh local cluster of ``workers`` processes."""
    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run(_warm)  # imports and a first simulation: both clusters start warm
        cpu0, here0 = sum(client.run(_cpu_s).values()), time.process_time()
        start = time.perf_counter()
        frame = sweep(SIM, axes, [f"site.cloud.runs={runs}"], client=client)
        wall = time.perf_counter() - start
        here = time.process_time() - here0
        print(f"  {workers} worker(s): {wall:.2f} s wall, this process {here:.2f} s CPU")
        return wall, sum(client.run(_cpu_s).values()) - cpu0, frame


def main() -> None:
    """Run 1 worker, then 2, then 1 again; report the best of each."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=200)
    ap.add_argument("--runs", type=int, default=8, help="seeds per point")
    args = ap.parse_args()
    axes = [f"site.cloud.loss=0..0.1:{args.points // 2}", "site.cloud.rtt=50 ms,150 ms"]
    one_a, cpu_1, frame_1 = timed(1, axes, args.runs)
    two, cpu_2, frame_2 = timed(2, axes, args.runs)
    one_b, _, _ = timed(1, axes, args.runs)
    assert frame_1["time_s"].equals(frame_2["time_s"]), "rows differ between clusters"
    one = min(one_a, one_b)
    print(f"{args.points} simulated points × {args.runs} seeds")
    print(f"1 worker: {one_a:.2f} s, {one_b:.2f} s wall; 2 workers: {two:.2f} s wall")
    print(f"speed-up: {one / two:.2f}×")
    # cores the workers actually got: CPU seconds over wall seconds (2.0 = two whole cores)
    print(f"cores used: 1 worker {cpu_1 / one_a:.2f}, 2 workers {cpu_2 / two:.2f}")


if __name__ == "__main__":
    main()
