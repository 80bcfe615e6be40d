"""`tierwise lab route`: the recorded mix, the world changes and the oracle's arithmetic."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tierwise.lab.route_world import MBIT, follow, true_time_s, workload, world


def test_world_changes_at_fixed_shares() -> None:
    """Cloud uplink drops at 25 %, the edge is down 45–60 %, the device slows at 70 %."""
    assert world(0, 100)["cloud"]["uplink_bytes_per_s"] == 80 * MBIT
    assert world(25, 100)["cloud"]["uplink_bytes_per_s"] == 3 * MBIT
    assert [world(i, 100)["edge"]["down"] for i in (44, 45, 59, 60)] == [0, 1, 1, 0]
    assert world(70, 100)["device"]["slowdown"] == 3.0


def test_oracle_time_and_choice_flip() -> None:
    """A 1 MB body goes to the cloud at 80 Mbit/s and to the edge once the cloud has 3."""
    before, after = world(0, 100), world(30, 100)
    assert true_time_s("cloud", before, 1_000_000) == pytest.approx(0.06 + 0.1 + 0.15)
    best = [min(("device", "edge", "cloud"), key=lambda s: true_time_s(s, w, 1_000_000))
            for w in (before, after)]  # fmt: skip
    assert best == ["cloud", "edge"]
    assert true_time_s("edge", world(50, 100), 10) == float("inf")


def test_workload_is_recorded_and_mixed() -> None:
    """The same seed gives the same mix; about 30 % of requests carry an image."""
    a, b = workload(60, 1), workload(60, 1)
    assert json.dumps(a) == json.dumps(b)
    images = sum("image_url" in json.dumps(x) for x in a)
    assert 8 <= images <= 30


def test_follow_counts_requests_until_agreement() -> None:
    """After each change, the number of requests until the first choice is the oracle's."""
    recs = [{"order": ["cloud"]}] * 10
    best = ["cloud"] * 10
    assert follow(recs, best, 10) == [1, 1, 1, 1]
    assert follow([{"order": ["edge"]}] * 10, best, 10) == [None] * 4


def test_unknown_strategy_is_one_line_exit_2() -> None:
    """A strategy the gateway does not have is refused before anything starts."""
    run = run_cli("lab", "route", "--strategies", "predictive,dice")
    assert run.code == 2 and run.stderr.count("\n") == 1 and "dice" in run.stderr
