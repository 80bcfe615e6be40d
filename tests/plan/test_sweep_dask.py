"""Simulated sweeps on Dask: same rows as without it, and as the planner."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from tierwise.plan.planner import plan_file
from tierwise.plan.sweep_table import sweep

distributed = pytest.importorskip("distributed")

SIM = str(Path(__file__).parent / "data" / "sim-sweep.toml")
AXES = ["site.cloud.loss=0..0.1:3", "site.cloud.rtt=50 ms,150 ms"]
COLUMNS = ["point", "site", "time_s", "time_p99_s", "feasible", "meets_deadline", "chosen"]


@pytest.fixture(scope="module")
def client():
    with warnings.catch_warnings():  # another job's cluster holds :8787: the routes move on
        warnings.filterwarnings("ignore", "Port .* is already in use", UserWarning)
        cluster = distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=False,
            protocol="tcp",
            dashboard_address=None,
        )
    with cluster, distributed.Client(cluster) as c:
        yield c


def test_dask_sweep_equals_the_local_sweep_and_the_planner(client):
    """Two workers give the local rows exactly; a point equals plan_file's simulated option."""
    on_dask = sweep(SIM, AXES, client=client)
    local = sweep(SIM, AXES)
    assert on_dask[COLUMNS].equals(local[COLUMNS])
    assert "point by point" in on_dask.attrs["notes"]
    p = plan_file(SIM, ["site.cloud.loss=0.1", "site.cloud.rtt=150 ms"])
    rows = on_dask[on_dask["point"] == 5].set_index("site")
    assert rows.loc["cloud", "time_s"] == p.option("cloud").time_s
    assert rows.loc["cloud", "time_p99_s"] == p.option("cloud").extra["time_p99_s"]
    assert bool(rows.loc["edge", "chosen"]) == (p.choice == "edge")


@pytest.mark.slow
def test_cli_runs_a_simulated_sweep_on_a_given_scheduler(cli, client, tmp_path):
    """--scheduler sends the points to an existing cluster; --runs sets the seeds per point."""
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "sim.parquet"
    r = cli(
        "sweep", SIM, "--vary", "site.cloud.loss=0,0.05", "--runs", "3",
        "--scheduler", client.scheduler.address, "--out", str(out),
    )  # fmt: skip
    assert r.code == 0, r.stderr
    table = pq.read_table(out).to_pandas()
    p = plan_file(SIM, ["site.cloud.loss=0.05", "site.cloud.runs=3"])
    cloud = table[(table["point"] == 1) & (table["site"] == "cloud")]
    assert cloud["time_s"].item() == p.option("cloud").time_s


MC = """
[variability]
trials = 500
seed = 3
[variability.site.cloud]
uplink = { dist = "lognormal", median = "6.4 Mbit/s", sigma = 0.3 }
"""


def test_monte_carlo_sweep_runs_on_dask_with_the_planners_p99(client, tmp_path):
    """[variability] points run as Dask tasks; each row's p99 is the planner's Monte Carlo p99."""
    from tierwise.plan.distributed import needs_dask
    from tierwise.scenario.loader import bundled_example, load_scenario

    path = tmp_path / "mc.toml"
    path.write_text(bundled_example("deployment").read_text() + MC)
    assert needs_dask(load_scenario(path))
    axes = ["task.rounds=10,20", "site.cloud.rtt=100 ms,300 ms"]
    on_dask, local = sweep(path, axes, client=client), sweep(path, axes)
    assert on_dask[COLUMNS].equals(local[COLUMNS])
    assert "Monte Carlo" in on_dask.attrs["notes"]
    p = plan_file(path, ["task.rounds=20", "site.cloud.rtt=300 ms"])
    cloud = on_dask[(on_dask["point"] == 3) & (on_dask["site"] == "cloud")]
    assert cloud["time_p99_s"].item() == p.monte_carlo["sites"]["cloud"]["p99_s"]
    assert cloud["time_p99_s"].item() > cloud["time_s"].item()


def _dask_process(*args: str) -> subprocess.Popen:
    """A ``dask scheduler`` or ``dask worker`` of this interpreter, as its own process."""
    return subprocess.Popen(
        [sys.executable, "-c", "from dask.__main__ import main; main()", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, limit_s: float = 30) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"no scheduler on :{port}")


def _until_points_run(address: str, sweep_cli: subprocess.Popen, limit_s: float = 120) -> None:
    """Wait until the scheduler has points of the sweep on its worker (a state, not a
    sleep: a fixed 12 s wasted time idle and could end before the sweep connected)."""
    from distributed import Client

    end = time.monotonic() + limit_s
    with Client(address, timeout=30) as client:
        while not any(client.processing().values()):
            assert sweep_cli.poll() is None, sweep_cli.communicate()
            assert time.monotonic() < end, f"no point running after {limit_s} s"
            time.sleep(0.1)


@pytest.mark.slow
def test_scheduler_without_workers_is_one_line(cli, tmp_path):
    """A scheduler no worker has joined would hold the sweep forever: one line instead."""
    port = _free_port()
    scheduler = _dask_process("scheduler", "--host", "127.0.0.1", "--port", str(port),
                              "--no-dashboard")  # fmt: skip
    try:
        _wait_listening(port, scheduler)
        out = tmp_path / "s.parquet"
        run = cli("sweep", SIM, "--vary", AXES[0], "--scheduler", f"tcp://127.0.0.1:{port}",
                  "--out", str(out), "--worker-timeout", "1")  # fmt: skip
    finally:
        scheduler.kill()
        scheduler.wait()
    assert run.code == 2, run
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    assert "no workers" in run.stderr and f"127.0.0.1:{port}" in run.stderr
    assert "none joined within 1 s" in run.stderr  # 10 s without the option (WORKER_WAIT_S)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_scheduler_lost_mid_sweep_is_one_line_and_writes_nothing(cli, tmp_path):
    """The scheduler dies while points run: one line naming --scheduler, exit 2, and no
    Parquet file with part of the rows (an older file of that name is left as it was)."""
    port = _free_port()
    scheduler = _dask_process("scheduler", "--host", "127.0.0.1", "--port", str(port),
                              "--no-dashboard")  # fmt: skip
    worker = None
    try:
        _wait_listening(port, scheduler)
        worker = _dask_process("worker", f"tcp://127.0.0.1:{port}", "--nthreads", "1",
                               "--no-dashboard")  # fmt: skip
        out = tmp_path / "s.parquet"
        out.write_text("an earlier result\n")
        sweep_cli = subprocess.Popen(
            [sys.executable, "-c", "from tierwise.cli import main; main()", "sweep", SIM,
             "--vary", "site.cloud.loss=0..0.1:400", "--runs", "200",
             "--scheduler", f"tcp://127.0.0.1:{port}", "--out", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        _until_points_run(f"tcp://127.0.0.1:{port}", sweep_cli)  # the sweep takes minutes
        scheduler.kill()
        stdout, stderr = sweep_cli.communicate(timeout=60)
    finally:
        for proc in (scheduler, worker):
            if proc is not None:
                proc.kill()
                proc.wait()
    assert sweep_cli.returncode == 2, (stdout, stderr)
    assert stdout == "" and "Traceback" not in stderr, stderr
    assert stderr.count("\n") == 1 and stderr.startswith("error: --scheduler"), stderr
    assert "nothing was written" in stderr
    assert out.read_text() == "an earlier result\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.parquet"]
