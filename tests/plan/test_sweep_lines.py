"""The choice map's threshold lines come from the planner's flip search."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from tierwise.errors import ScenarioError
from tierwise.plan.planner import plan_file
from tierwise.plan.sweep_lines import map_lines, planner_flip, threshold_lines
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


def _check_set(path: str, axes: tuple[str, ...], lines) -> int:
    """Each crossing of ``lines`` (any axis) lies between two cells of different winners,
    and the planner (``plan --set``) picks its two sites 1e-6 (relative) either side of it
    — on an integer key, at the two integers either side of the drawn midpoint."""
    _, run, winner = _run(path, axes)
    ax, other = lines.axis, 1 - lines.axis
    values, sites = run.axes[ax].array(), run.sites()
    for rest, row, at, left, right in lines.crossings:
        rest_index = np.unravel_index(rest, run.shape[2:]) if run.shape[2:] else ()
        index = [0, 0, *rest_index]
        index[other], index[ax] = row, slice(None)
        along = winner[tuple(index)]
        j = next(
            j
            for j in range(len(values) - 1)
            if min(values[j : j + 2]) < at <= max(values[j : j + 2]) and along[j] != along[j + 1]
        )
        assert along[j] == left != right
        fixed = [run.axes[other].override(row)]
        fixed += [run.axes[2 + k].override(int(i)) for k, i in enumerate(rest_index)]
        sides = (at - 0.5, at + 0.5) if lines.integer else (at * (1 - 1e-6), at * (1 + 1e-6))
        if values[j] > values[j + 1]:
            sides = sides[::-1]
        unit = run.axes[ax].texts[0].partition(" ")[2]
        for v, want in zip(sides, (left, right), strict=True):
            text = (
                str(round(v)) if lines.integer else f"{float(v) * _per_si(run.axes[ax])!r} {unit}"
            )
            choice = plan_file(path, [*fixed, f"{run.axes[ax].key}={text}"]).choice
            assert (sites.index(choice) if choice else -1) == want
    return len(lines.crossings)


def _per_si(axis) -> float:
    """The axis's text unit per SI unit (``20 ms`` ↔ 0.02 s: 1000)."""
    v = next(v for v in axis.array() if v)
    return float(axis.texts[list(axis.array()).index(v)].split()[0]) / float(v)


def test_rtt_by_rounds_lines_are_the_planners_integer_flips():
    """No uplink on the map: the flips along rounds come from whole-scenario plans."""
    axes = ("site.cloud.rtt=20..300 ms:5", "task.rounds=5,10,20,40")
    frame, run, winner = _run(DEPLOYMENT, axes)
    found = map_lines(run, winner, [0, 1])
    assert [f.axis for f in found] == [1, 0]  # rounds changes the winner most
    assert found[0].integer and "midpoint" in found[0].note
    assert all(float(at) % 1 == 0.5 for _, _, at, _, _ in found[0].crossings)
    assert (
        _check_set(DEPLOYMENT, axes, found[0]) == int((winner[:, 1:] != winner[:, :-1]).sum()) > 0
    )
    assert _check_set(DEPLOYMENT, axes, found[1]) == int((winner[1:] != winner[:-1]).sum())
    data = sweep_data(frame, run)
    assert data["lines"]["axis"] == "y" and data["lines"]["crossings"]
    assert "midpoint" in data["lines"]["note"]


def test_deadline_by_uplink_lines_along_both_axes():
    """Deadline × uplink: the uplink search and the planner's deadline bisection, both exact."""
    axes = ("task.deadline=10..100 s:10", "site.cloud.uplink=1..100 Mbit/s:log:12")
    _, run, winner = _run(DEPLOYMENT, axes)
    found = map_lines(run, winner, [0, 1])
    assert [f.axis for f in found] == [1, 0] and found[0].uplink and not found[1].uplink
    assert (
        _check_set(DEPLOYMENT, axes, found[0]) == int((winner[:, 1:] != winner[:, :-1]).sum()) > 0
    )
    assert _check_set(DEPLOYMENT, axes, found[1]) == int((winner[1:] != winner[:-1]).sum()) > 0


def test_uplink_search_and_planner_bisection_agree():
    """Where both apply (an uplink axis), the closed-form search and whole-scenario plans agree."""
    _, run, winner = _run(DEPLOYMENT, AXES)
    lines = threshold_lines(run, winner, [0, 1])
    assert lines.uplink and lines.crossings
    for rest, row, at, left, right in lines.crossings[::7]:
        texts = [run.axes[1].override(row), run.axes[2].override(rest)]
        j = int(np.searchsorted(run.axes[0].array(), at)) - 1
        at2, right2 = planner_flip(run, texts, 0, j, left)
        assert right2 == right and at2 == pytest.approx(at, rel=1e-8)


def test_planner_calls_per_map_are_bounded(monkeypatch):
    """Above the cap only every k-th row is searched, and the note says the lines were thinned."""
    from tierwise.plan import sweep_lines as sl

    axes = ("site.cloud.rtt=20..300 ms:5", "task.rounds=5,10,20,40")
    _, run, winner = _run(DEPLOYMENT, axes)
    full = threshold_lines(run, winner, [0, 1])
    monkeypatch.setattr(sl, "MAX_PLANNER_CALLS", 30)
    thin = sl.threshold_lines(run, winner, [0, 1], max_calls=30)
    assert 0 < len(thin.crossings) < len(full.crossings)
    assert set(thin.crossings) <= set(full.crossings) and "thinned" in thin.note
    assert "thinned" in sweep_data(*_run(DEPLOYMENT, axes)[:2])["lines"]["note"]


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


def test_probability_targets_get_no_lines_and_a_note(tmp_path):
    """With [decision] probability the choice needs Monte Carlo per step: no lines, said why."""
    text = (
        bundled_example("deployment")
        .read_text()
        .replace('objective = "energy"', 'objective = "energy"\nprobability = 0.99')
    )
    assert "probability = 0.99" in text
    text += "\n[variability]\ntrials = 200\nseed = 7\n[variability.site.cloud]\n"
    text += 'uplink = { dist = "choice", values = ["2 Mbit/s", "10 Mbit/s"] }\n'
    path = tmp_path / "odds.toml"
    path.write_text(text)
    run = open_sweep(str(path), ["task.rounds=5,40", "site.cloud.rtt=50 ms,150 ms"])
    lines = threshold_lines(run, np.array([[0, 0], [1, 1]]), [0, 1])
    assert lines.axis is None and "probability" in lines.note


@pytest.mark.parametrize(
    "axes",
    [
        ("site.cloud.loss=0..0.1:5", "task.rounds=5,10,20,40"),  # linear × integer
        ("decision.weights.time=0..10:5", "task.deadline=10..100 s:log:6"),  # unitless × log
        ("task.rounds=5,10,20", "task.upload=1..1e12 B:log:4"),  # integer × log size
    ],
)
def test_any_two_numeric_keys_get_the_planners_flips(axes):
    """Other numeric keys, linear, log and integer: every point passes the planner's check."""
    _, run, winner = _run(DEPLOYMENT, axes)
    found = map_lines(run, winner, [0, 1])
    total = sum(_check_set(DEPLOYMENT, axes, f) for f in found)
    changes = sum(int((np.diff(winner, axis=f.axis) != 0).sum()) for f in found)
    assert total == changes > 0
