"""Simulated sweeps on Dask: same rows as without it, and as the planner (issue 12)."""

from __future__ import annotations

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
