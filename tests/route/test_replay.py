"""The decisions log read back: `route decisions` and `route replay` strategies."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tierwise.errors import ScenarioError
from tierwise.route.replay import read_log, replay


def rec(chosen: str, actual: float, edge: float, cloud: float, age_s: float = 0.0) -> dict:
    pred = {
        "edge": {"time_s": edge, "feasible": True},
        "cloud": {"time_s": cloud, "feasible": True},
    }
    return {"ts": time.time() - age_s, "predicted": pred, "chosen": chosen,
            "actual_s": actual, "outcome": "ok", "order": [chosen]}  # fmt: skip


@pytest.fixture
def log(tmp_path: Path) -> Path:
    records = [rec("cloud", 0.2, 0.5, 0.2, 3600), rec("cloud", 0.25, 0.5, 0.2)]
    records += [rec("edge", 0.6, 0.6, 3.0), rec("edge", 0.6, 0.6, 3.0)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_replay_costs_each_strategy(log: Path) -> None:
    """predictive follows the predictions; static keeps the first choice (at its prediction)."""
    out = replay(read_log(log), ["predictive", "static", "lowest-latency"])
    s = out["strategies"]
    assert s["predictive"]["total_s"] == pytest.approx(0.2 + 0.25 + 0.6 + 0.6)
    assert s["predictive"]["counterfactual"] == 0
    assert s["static"]["total_s"] == pytest.approx(0.2 + 0.25 + 3.0 + 3.0)
    assert s["static"]["counterfactual"] == 2


def test_replay_rejects_unknown_strategy_and_bad_lines(log: Path, tmp_path: Path) -> None:
    """An unknown strategy or a line that is not a record is a one-line error."""
    with pytest.raises(ScenarioError, match="unknown strategy"):
        replay(read_log(log), ["random"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"predicted": {}}\nnot json\n')
    with pytest.raises(ScenarioError, match=r"bad\.jsonl:2"):
        read_log(bad)


def test_cli_decisions_since_and_replay(log: Path) -> None:
    """`decisions --since 10m --json` drops the hour-old record; replay prints a table."""
    run = run_cli("route", "decisions", "--since", "10m", "--log", str(log), "--json")
    assert run.code == 0 and len(run.json()) == 3
    table = run_cli("route", "replay", str(log), "--strategy", "predictive,static")
    assert table.code == 0 and "predictive" in table.stdout and "static" in table.stdout
    bad = run_cli("route", "decisions", "--since", "soon", "--log", str(log))
    assert bad.code == 2 and "--since" in bad.stderr


@pytest.mark.parametrize(
    ("server_s", "ok"),
    [({"queue": 0.001, "prefill": 0.02, "decode": 0.3}, True), ({}, True),
     (0.3, False), ({"queue": "1 ms"}, False), ({"decode": -1}, False), ([0.1], False)],
)  # fmt: skip
def test_the_servers_own_stages_are_seconds_by_name(
    tmp_path: Path, server_s: object, ok: bool
) -> None:
    """``stages.server_s`` is what the router writes from a site's Server-Timing header:
    an object of seconds by stage. It reads back; anything else names the key."""
    record = rec("edge", 0.6, 0.6, 3.0)
    record["stages"] = {"headers_s": 0.5, "first_token_s": None, "server_s": server_s}
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(record) + "\n")
    if ok:
        assert read_log(path)[0]["stages"]["server_s"] == server_s
    else:
        with pytest.raises(ScenarioError, match=r"d\.jsonl:1.*stages\.server_s"):
            read_log(path)
