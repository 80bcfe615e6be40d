"""Simulated sweep on Dask: 2 local worker processes against 1, side by side.

    python benchmarks/sweep_dask.py            # 200 simulated points × 16 seeds, 5 rounds

Each point plans the bundled sim-sweep scenario with its cloud site simulated packet
by packet (``runs`` seeds). Two Dask clusters (1 and 2 single-threaded worker
processes) and, as the peer, two plain process pools (1 and 2 processes,
``concurrent.futures``) are started and warmed once (imports and a first
simulation). Every round runs the same grid on all four, interleaved
(Dask 1, pool 1, Dask 2, pool 2, then the same backwards); the pools
get the very same tasks through the sweep's own code (only the scheduler differs), and
all rows must agree exactly (seeds depend on run and round only).

The Dask speed-up is Dask 1 / Dask 2 wall time, summed over all rounds (one
worker's time for the same work varies by ±20 % from run to run here, so a single
round's ratio is noisy; the median round is printed too). The peer's speed-up (pool 1 / pool 2)
is what this machine gives two plain processes doing the same work at that moment:
on a 2-vCPU virtual machine two busy processes rarely get two whole cores (a pure
Python loop alone vs two at once: 1.46–1.88× here), so the peer, not 2.0, is the
ceiling Dask is measured against. ``cores used`` (worker CPU over wall time) says how
much of the machine the workers got.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import statistics
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from _args import positive_int, run
from distributed import Client, LocalCluster

from tierwise.plan.distributed import LOCAL_CLUSTER_CONFIG
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


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Pool:
    """A plain process pool behind the few ``distributed.Client`` calls a sweep makes
    (``scheduler_info``, ``scatter``, ``submit``, ``run``): the peer, with the same tasks."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pool = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=_warm
        )
        # start every process now (and let the initializer warm it), not in the first round
        for f in [self.pool.submit(time.sleep, 0.5) for _ in range(workers)]:
            f.result()

    def scheduler_info(self) -> dict[str, Any]:
        return {"workers": dict.fromkeys(range(self.workers))}

    def scatter(self, objs: list[Any], broadcast: bool = True) -> list[Any]:
        return objs  # each task carries its arguments (pickled per task)

    def submit(self, fn: Any, *args: Any, pure: bool = True) -> Any:
        return self.pool.submit(fn, *args)

    def run(self, fn: Any) -> dict[int, float]:
        assert fn is _cpu_s
        return {pid: _proc_cpu_s(pid) for pid in self.pool._processes}

    def close(self) -> None:
        self.pool.shutdown()


def timed(client: Any, axes: list[str], runs: int) -> tuple[float, list[float], Any]:
    """(wall s, each worker's CPU s, rows) of one sweep on ``client``'s warm workers."""
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
    """Dask 1, pool 1, Dask 2, pool 2 and back, ``--repeat`` times; speed-ups of the totals."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=positive_int, default=200)
    ap.add_argument("--runs", type=positive_int, default=16, help="seeds per point")
    ap.add_argument("--repeat", type=positive_int, default=5, help="rounds over the four set-ups")
    ap.add_argument("--profile", action="store_true", help="keep the workers' profiler on")
    args = ap.parse_args()
    logging.getLogger("distributed").setLevel(logging.ERROR)  # no INFO lines as clusters close
    import dask

    # the sweep's own local-cluster settings (tierwise.plan.distributed), as a user gets them
    dask.config.set(LOCAL_CLUSTER_CONFIG)
    if args.profile:
        dask.config.set({"distributed.worker.profile.enabled": True})
    axes = [f"site.cloud.loss=0..0.1:{args.points // 2}", "site.cloud.rtt=50 ms,150 ms"]
    (c1, one), (c2, two) = cluster(1), cluster(2)
    pools = {1: Pool(1), 2: Pool(2)}
    print(
        f"{args.points} simulated points × {args.runs} seeds; "
        f"load {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs"
    )
    dask_x, peer_x, rel = [], [], []
    totals: dict[tuple[str, int], float] = dict.fromkeys(
        [("dask", 1), ("dask", 2), ("pool", 1), ("pool", 2)], 0.0
    )
    try:
        for r in range(args.repeat):
            # A B C D D C B A: each set-up twice per round, mirrored, so a drift in the
            # machine's speed during the round weighs on all four alike
            order = [("dask", 1), ("pool", 1), ("dask", 2), ("pool", 2)]
            wall: dict[tuple[str, int], float] = dict.fromkeys(order, 0.0)
            cpu: dict[tuple[str, int], float] = dict.fromkeys(order, 0.0)
            frames = []
            for kind, n in order + order[::-1]:
                target = (one if n == 1 else two) if kind == "dask" else pools[n]
                w, c, frame = timed(target, axes, args.runs)
                wall[kind, n] += w
                cpu[kind, n] += sum(c)
                frames.append(frame["time_s"])
            assert all(f.equals(frames[0]) for f in frames), "rows differ between set-ups"
            for k in wall:
                totals[k] += wall[k]
            dask_x.append(wall["dask", 1] / wall["dask", 2])
            peer_x.append(wall["pool", 1] / wall["pool", 2])
            rel.append(dask_x[-1] / peer_x[-1])
            used = {k: cpu[k] / wall[k] for k in wall}
            print(
                f"round {r + 1}: Dask 1 worker {wall['dask', 1] / 2:.2f} s, 2 workers "
                f"{wall['dask', 2] / 2:.2f} s → {dask_x[-1]:.2f}×; plain processes "
                f"{wall['pool', 1] / 2:.2f} s, {wall['pool', 2] / 2:.2f} s → {peer_x[-1]:.2f}×; "
                f"Dask / peer {rel[-1]:.2f}; cores used (Dask 1, 2; pool 1, 2): "
                f"{used['dask', 1]:.2f}, {used['dask', 2]:.2f}; "
                f"{used['pool', 1]:.2f}, {used['pool', 2]:.2f}",
                flush=True,
            )
    finally:
        for obj in (one, two, c1, c2, *pools.values()):
            obj.close()
    dask_all = totals["dask", 1] / totals["dask", 2]
    peer_all = totals["pool", 1] / totals["pool", 2]
    print(
        f"Dask 2 vs 1 worker: all rounds {dask_all:.2f}× (median round "
        f"{statistics.median(dask_x):.2f}×); plain processes (the peer): all rounds "
        f"{peer_all:.2f}× (median round {statistics.median(peer_x):.2f}×); "
        f"Dask / peer: {dask_all / peer_all:.2f}"
    )


if __name__ == "__main__":
    run(main)
