"""The vectorised sweep agrees with the planner point by point."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierwise.errors import ScenarioError
from tierwise.plan.grid import spec_texts
from tierwise.plan.planner import plan_file
from tierwise.plan.sweep import PARTS
from tierwise.plan.sweep_table import open_sweep, sweep
from tierwise.scenario.loader import bundled_example

pytest.importorskip("pyarrow")
pytest.importorskip("pandas")

DEPLOYMENT = str(bundled_example("deployment"))
DEPLOYMENT_AXES = (
    "site.cloud.uplink=1..100 Mbit/s:log:30",
    "site.cloud.rtt=20..300 ms:20",
    "task.rounds=5,10,20,40",
    "site.workstation.decode_slowdown=1,3",  # not a vector key: re-resolved per value
    "task.deadline=20 s,45 s,90 s",
)

REQUEST = """
[task]
name = "request, three sites"
kind = "request"
upload = "2 MB"
download = "100 kB"
deadline = "2 s"
[task.model]
model = "qwen3-8b"
weights = "q4_0"
context = 4096
decode_tokens = 50
prefill_tokens = 4096
[[site]]
name = "phone"
tier = "device"
hardware = "phone-lpddr5x"
energy_per_token = ["0.576 J", "0.756 J"]
prefill = "0 s"
battery = "40 J"
[[site]]
name = "edge"
tier = "edge"
hardware = "rtx-pro-6000"
uplink = "50 Mbit/s"
downlink = "200 Mbit/s"
rtt = "10 ms"
[[site]]
name = "cloud"
tier = "cloud"
hardware = "h100-sxm"
uplink = "10 Mbit/s"
downlink = "50 Mbit/s"
rtt = "120 ms"
[decision]
objective = "time"
"""
REQUEST_AXES = (
    "site.cloud.uplink=1..200 Mbit/s:log:25",
    "site.edge.rtt=1..200 ms:25",
    "task.upload=0.1..20 MB:log:8",
    "task.deadline=0.5 s,2 s,10 s",
)


def _request_file(factory) -> str:
    path = factory.getbasetemp() / "sweep-request.toml"
    if not path.exists():
        path.write_text(REQUEST)
    return str(path)


@cache
def _frame(path: str, axes: tuple[str, ...]):
    return sweep(path, list(axes)), open_sweep(path, list(axes))


def _check_point(path: str, axes: tuple[str, ...], point: int) -> None:
    frame, run = _frame(path, axes)
    index = np.unravel_index(point, run.shape)
    overrides = [a.override(int(i)) for a, i in zip(run.axes, index, strict=True)]
    p = plan_file(path, overrides)
    rows = frame[frame["point"] == point].set_index("site")
    for o in p.options:
        row = rows.loc[o.site]
        assert row["time_s"] == pytest.approx(o.time_s, rel=1e-9)
        upper = max(o.energy_j) if isinstance(o.energy_j, list) else o.energy_j
        assert row["energy_j"] == pytest.approx(upper, rel=1e-9)
        assert bool(row["feasible"]) == o.feasible
        assert row["meets_deadline"] == o.meets_deadline
        assert bool(row["chosen"]) == (o.site == p.choice)
        assert row["cost"] == pytest.approx(o.extra.get("cost", 0.0), rel=1e-9, abs=1e-15)
        for part in PARTS:
            assert row[f"{part}_s"] == pytest.approx(o.breakdown_s.get(part, 0.0), rel=1e-9)
        if "pareto" in o.extra:
            assert bool(row["pareto"]) == o.extra["pareto"]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 30 * 20 * 4 * 2 * 3 - 1))
def test_loop_sweep_matches_plan_file(point):
    """A random grid point of the §12.5 sweep equals plan_file with the same overrides."""
    _check_point(DEPLOYMENT, DEPLOYMENT_AXES, point)


@settings(max_examples=25, deadline=None)
@given(point=st.integers(0, 25 * 25 * 8 * 3 - 1))
def test_request_sweep_matches_plan_file(point, tmp_path_factory):
    """A request with a battery-limited phone: sweep and planner agree at any point."""
    _check_point(_request_file(tmp_path_factory), REQUEST_AXES, point)


def test_request_sweep_has_every_outcome(tmp_path_factory):
    """The request grid is not trivial: each site wins somewhere, and some points have no choice."""
    frame, _ = _frame(_request_file(tmp_path_factory), REQUEST_AXES)
    winners = set(frame.loc[frame["chosen"], "site"])
    assert winners == {"phone", "edge", "cloud"}
    chosen_per_point = frame.groupby("point")["chosen"].sum()
    assert 0 < (chosen_per_point == 0).sum() < len(chosen_per_point)
    assert chosen_per_point.max() == 1


def test_physics_scenario_falls_back_per_point_and_says_so():
    """Loss on the path has no vectorised form here: the planner runs per point, noted."""
    path = str(bundled_example("speech-request"))
    axes = ["task.deadline=0.5 s,1 s"]
    frame = sweep(path, axes)
    assert "point by point" in frame.attrs["notes"]
    p = plan_file(path, ["task.deadline=1 s"])
    rows = frame[frame["point"] == 1].set_index("site")
    for o in p.options:
        assert rows.loc[o.site, "time_s"] == pytest.approx(o.time_s)
        assert rows.loc[o.site, "time_p99_s"] == pytest.approx(o.extra["time_p99_s"])


def test_specs_give_the_expected_values():
    """log, linear and list specs expand as documented."""
    assert spec_texts("k", "1..100 Mbit/s:log:3") == ["1 Mbit/s", "10 Mbit/s", "100 Mbit/s"]
    assert spec_texts("k", "20..300 ms:3") == ["20 ms", "160 ms", "300 ms"]
    assert spec_texts("k", "5,10, 20") == ["5", "10", "20"]
    assert spec_texts("k", "0..0.2:3") == ["0", "0.1", "0.2"]


@pytest.mark.parametrize(
    ("vary", "needle"),
    [
        ("site.cloud.uplink=1..0 Mbit/s:log:3", "log range"),
        ("site.cloud.uplink=1,,2", "comma list"),
        ("site.nowhere.rtt=1,2", "nowhere"),
        ("task.rounds=1..10:20", "task.rounds"),
        ("site.cloud.rtt=1..2 parsec:20", "unknown unit"),
    ],
)
def test_bad_axes_fail_before_evaluation(vary, needle):
    """A bad --vary names the key and what was expected."""
    with pytest.raises(ScenarioError, match=needle):
        open_sweep(DEPLOYMENT, [vary])


def test_large_range_is_checked_by_sample_and_scaled():
    """A 1000-value range gives the same SI values as parsing each text."""
    run = open_sweep(DEPLOYMENT, ["site.cloud.uplink=1..100 Mbit/s:log:1000"])
    values = np.array(run.axes[0].values)
    assert values[0] == pytest.approx(125_000.0)
    assert values[-1] == pytest.approx(12_500_000.0)
    assert np.all(np.diff(values) > 0)


PRICED = (Path(__file__).parent / "data" / "priced-agent.toml").read_text()
PRICED_AXES = (
    "site.cloud.uplink=1..100 Mbit/s:log:20",
    "task.rounds=5,20,60",
    "task.download=0 B,1 MB,20 MB",
    "decision.objective=cost,pareto,time",
)


@settings(max_examples=20, deadline=None)
@given(point=st.integers(0, 20 * 3 * 3 * 3 - 1))
def test_priced_sweep_matches_plan_file(point, tmp_path_factory):
    """With prices, cost and Pareto objectives: sweep and planner agree on cost and choice."""
    path = tmp_path_factory.getbasetemp() / "priced.toml"
    if not path.exists():
        path.write_text(PRICED)
    _check_point(str(path), PRICED_AXES, point)


def test_python_api_returns_a_dataframe_with_the_metadata():
    """tierwise.sweep() from a notebook: a pandas DataFrame, one row per point and site."""
    import hashlib

    import pandas as pd

    import tierwise

    frame = tierwise.sweep(
        DEPLOYMENT, {"task.rounds": "5,10,20,40", "site.cloud.rtt": "20 ms,90 ms"}
    )
    assert isinstance(frame, pd.DataFrame) and len(frame) == 4 * 2 * 3
    assert set(frame["site"].astype(str)) == {"phone", "workstation", "cloud"}
    digest = hashlib.sha256(open(DEPLOYMENT, "rb").read()).hexdigest()
    assert frame.attrs["scenario_sha256"] == digest
    assert frame.attrs["tierwise_version"] and "tierwise.sweep(" in frame.attrs["command"]
    assert frame.groupby("point")["chosen"].sum().max() == 1


def test_memory_is_bounded_by_the_chunk():
    """The rows come chunk by chunk: no table holds more than one chunk's points."""
    from tierwise.plan.sweep_table import tables

    run = open_sweep(
        DEPLOYMENT, ["site.cloud.uplink=1..100 Mbit/s:log:100", "task.rounds=1..50:50"]
    )
    run.chunk_points = 700
    sizes = [t.num_rows for t in tables(run)]
    assert len(sizes) == 8 and max(sizes) == 700 * 3 and sum(sizes) == 5000 * 3


def test_grid_limits_are_refused_before_any_work():
    """A grid over the limits is refused naming the limit, before a value is evaluated."""
    with pytest.raises(ScenarioError, match="10,000,000"):
        open_sweep(
            DEPLOYMENT, ["site.cloud.uplink=1..9 Mbit/s:4000", "site.cloud.rtt=1..9 ms:4000"]
        )
    sim = str(Path(__file__).parent / "data" / "sim-sweep.toml")
    with pytest.raises(ScenarioError, match="simulated seeds"):
        open_sweep(sim, ["site.cloud.loss=0..0.1:1000"], ["site.cloud.runs=1000"])


@pytest.mark.parametrize(
    ("hidden", "args"),
    [
        ("pyarrow", ["--out", "s.parquet"]),
        ("pyarrow", ["--csv", "s.csv"]),
        ("pyarrow", []),
        ("plotly", ["--html", "s.html"]),
        ("pandas", ["--html", "s.html"]),
    ],
)
def test_a_missing_sweep_extra_is_one_line_before_any_point(hidden, args, tmp_path) -> None:
    """Without the `sweep` extra (a module hidden from import): one line naming the module
    and the install command, exit 2, no traceback and no file (the README's first sweep
    printed a ModuleNotFoundError traceback in a venv with only `pip install -e .`)."""
    import subprocess
    import sys

    code = f"import sys; sys.modules[{hidden!r}] = None; from tierwise.cli import main; main()"
    example = bundled_example("deployment")
    run = subprocess.run(
        [sys.executable, "-c", code, "sweep", str(example), "--vary", "task.rounds=5,10", *args],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().count("\n") == 0 and "Traceback" not in run.stderr
    assert f"needs {hidden}" in run.stderr and "tierwise[sweep]" in run.stderr
    assert list(tmp_path.iterdir()) == []
