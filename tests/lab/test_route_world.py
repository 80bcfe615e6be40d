"""`tierwise lab route`: the recorded mix, the world changes and the oracle's arithmetic."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tierwise.lab.world.common import MBIT, workload
from tierwise.lab.world.loopback import follow, true_time_s, world


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


def _lab_route(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """``tierwise lab route --loopback`` with its scratch space under ``tmp_path``."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    cmd = [sys.executable, "-c", "from tierwise.cli import main; main()", "lab", "route"]
    return subprocess.Popen(
        [*cmd, "--loopback", "--requests", "20", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_scratch_removed_on_interrupt(tmp_path: Path) -> None:
    """Ctrl-C mid-run: exit 130, the scratch directory and the servers are gone."""
    proc = _lab_route(tmp_path, "--strategies", "static")
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("tierwise-lab-route-*/static.jsonl")):
        assert proc.poll() is None and time.monotonic() < deadline, "run did not start"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert list(tmp_path.iterdir()) == []


def test_json_into_a_missing_directory_is_refused_first(tmp_path: Path) -> None:
    """--json into a directory that does not exist: exit 2 before anything runs."""
    run = run_cli("lab", "route", "--loopback", "--json", str(tmp_path / "no" / "f.json"))
    assert run.code == 2 and run.stderr.count("\n") == 1 and "--json" in run.stderr


@pytest.mark.slow
def test_a_run_keeps_its_figures_and_removes_its_scratch(tmp_path: Path) -> None:
    """A finished run leaves no tierwise-lab-route-* behind; its --json stays.

    Where redis-server and HAProxy can be had, the run is ``--replicas 2``: one router, two
    replicas sharing state through redis-server and two alone, all behind Debian's HAProxy;
    nothing fails and the ratios are written. Elsewhere, one predictive router."""
    from tierwise.lab.world.fleet import missing

    fleet = missing("redis-server", "haproxy") is None
    out = tmp_path / "keep" / "figures.json"
    out.parent.mkdir()
    args = ["--replicas", "2"] if fleet else ["--strategies", "predictive"]
    proc = _lab_route(tmp_path, *args, "--json", str(out))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]
    figures = json.loads(out.read_text())
    if not fleet:
        assert set(figures) == {"predictive"} and figures["predictive"]["failed"] == 0
        return
    assert set(figures["runs"]) == {"predictive", "fleet-shared", "fleet-alone"}
    assert all(row["failed"] == 0 for row in figures["runs"].values())
    assert set(figures["ratios"]) == {"shared_vs_one_router", "shared_vs_alone"}
