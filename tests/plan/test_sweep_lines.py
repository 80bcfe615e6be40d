"""The choice map's threshold lines come from the planner's flip search (issue 12)."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from tierwise.errors import ScenarioError
from tierwise.plan.planner import plan_file
from tierwise.plan.sweep_lines import threshold_lines
from tierwise.plan.sweep_table import open_sweep, sweep
from tierwise.report.html import sweep_data
from tierwise.scenario.loader import bundled_example

from .test_sweep import PRICED

pytest.importorskip("pandas")

DEPLOYMENT = str(bundled_example("deployment"))
AXES = (
    "site.cloud.uplink=1..100 Mbit/s:log:30",
    "site.cloud.rtt=20..300 ms:8",
    "task.rounds=20,40,10",
)


@cache
def _run(path: str, axes: tuple[str, ...]):
    frame, run = sweep(path, list(axes)), open_sweep(path, list(axes))
    sites = run.sites()
    winner = np.full(run.size, -1)
    picked = frame[frame["chosen"]]
    winner[picked["point"].to_numpy()] = [sites.index(s) for s in picked["site"].astype(str)]
    return frame, run, winner.reshape(run.shape)


def _check_lines(path: str, axes: tuple[str, ...]) -> int:
    """Every crossing lies between two cells with different winners, where the planner flips."""
    _, run, winner = _run(path, axes)
    lines = threshold_lines(run, winner, [0, 1])
    assert lines.axis == 0
    changes = int((winner[1:] != winner[:-1]).sum())
    assert len(lines.crossings) == changes > 0  # one line point per boundary, no more
    uplinks = run.axes[0].array()
    sites = run.sites()
    for rest, row, at, left, right in lines.crossings:
        rest_index = np.unravel_index(rest, run.shape[2:]) if run.shape[2:] else ()
        col = winner[:, row][(slice(None), *rest_index)]
        j = int(np.searchsorted(uplinks, at)) - 1
        assert uplinks[j] < at <= uplinks[j + 1]
        assert (col[j], col[j + 1]) == (left, right) and left != right
        fixed = [run.axes[1].override(row)]
        fixed += [run.axes[2 + k].override(int(i)) for k, i in enumerate(rest_index)]
        for factor, want in ((1 - 1e-6, left), (1 + 1e-6, right)):
            point = [*fixed, f"site.cloud.uplink={at * factor!r} B/s"]
            choice = plan_file(path, point).choice
            assert (sites.index(choice) if choice else -1) == want
    return changes


def test_lines_lie_between_cells_and_where_the_planner_flips():
    """§12.5 over uplink × RTT × rounds: each line point is the planner's own flip."""
    _check_lines(DEPLOYMENT, AXES)


def test_pareto_lines_follow_the_user_weights(tmp_path_factory):
    """objective = "pareto" with user weights: the lines move with the weights, and stay exact."""
    axes = ("site.cloud.uplink=0.3..30 Mbit/s:log:24", "task.rounds=5,20,60")
    found = []
    for name, tail in (("plain", ""), ("weighted", "weights = {time = 4, energy = 0, cost = 1}\n")):
        path = tmp_path_factory.getbasetemp() / f"priced-{name}.toml"
        path.write_text(PRICED.rstrip() + "\n" + tail)
        _check_lines(str(path), axes)
        _, run, winner = _run(str(path), axes)
        found.append(threshold_lines(run, winner, [0, 1]).crossings)
    assert found[0] != found[1]


def test_no_uplink_axis_means_no_lines_and_a_note():
    """Maps over RTT × rounds have no planner search: no lines, and the page says why."""
    axes = ("site.cloud.rtt=20..300 ms:5", "task.rounds=5,10,20")
    frame, run, winner = _run(DEPLOYMENT, axes)
    lines = threshold_lines(run, winner, [0, 1])
    assert lines.axis is None and lines.crossings == [] and "uplink" in lines.note
    assert "uplink" in sweep_data(frame, run)["lines"]["note"]


def test_map_over_any_two_keys():
    """--map picks the map's axes; the page's first two axes follow, lines on the y axis."""
    frame, run, _ = _run(DEPLOYMENT, AXES)
    data = sweep_data(frame, run, ["task.rounds", "site.cloud.uplink"])
    keys = [a["key"] for a in data["axes"]]
    assert keys == ["task.rounds", "site.cloud.uplink", "site.cloud.rtt"]
    assert data["lines"]["axis"] == "y" and data["lines"]["crossings"]
    with pytest.raises(ScenarioError, match="--map"):
        sweep_data(frame, run, ["task.rounds", "task.nosuch"])


def test_simulated_scenarios_get_no_lines_and_a_note():
    """A simulated site would be re-simulated per map row: no lines, and the note says why."""
    from pathlib import Path

    sim = str(Path(__file__).parent / "data" / "sim-sweep.toml")
    run = open_sweep(sim, ["site.edge.uplink=1..50 Mbit/s:log:3", "site.cloud.rtt=50 ms,150 ms"])
    lines = threshold_lines(run, np.zeros(run.shape, dtype=int), [0, 1])
    assert lines.axis is None and "simulated" in lines.note
