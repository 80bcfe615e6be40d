"""The command line as a user runs it: plan, catalog and calc, as tables and as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tierwise.calc import REGISTRY
from tierwise.scenario.loader import bundled_example

DEPLOYMENT = str(bundled_example("deployment"))

H100_HALF_BANDWIDTH = """\
[hardware.h100-sxm]
name = "H100 SXM, measured at half its bandwidth"
tier = "cloud"
memory_bandwidth = "1.675 TB/s"
memory = "80 GB"
power = "700 W"
dense_bf16 = "989.4 TFLOP/s"

[hardware.h100-sxm.sources]
memory_bandwidth = "my measurement"
"""

NEW_GPU = """\
[hardware.my-gpu]
name = "My GPU"
tier = "cloud"
memory_bandwidth = "1 TB/s"
memory = "48 GB"
power = "300 W"
dense_bf16 = "200 TFLOP/s"
"""


def ok(*args: str):
    run = run_cli(*args)
    assert run.code == 0, run.stderr
    assert "Traceback" not in run.stderr
    return run


def plan_json(*args: str) -> dict:
    run = ok("plan", *args, "--json")
    assert run.stdout.startswith("{"), "--json must print nothing before the JSON"
    return json.loads(run.stdout)


def option(data: dict, site: str) -> dict:
    return next(o for o in data["options"] if o["site"] == site)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# ------------------------------------------------------------------ plan


def test_plan_without_file_names_the_example_then_table_then_choice() -> None:
    """`tierwise plan` says it plans the bundled §12.5 example, shows the table, chooses cloud."""
    lines = ok("plan").stdout.splitlines()
    assert "§12.5" in lines[0]
    assert DEPLOYMENT in lines[0]
    table = "\n".join(lines[1:])
    for word in ("site", "tier", "time", "energy", "phone", "workstation", "cloud"):
        assert word in table
    choice = [line for line in lines if line.startswith("choice:")]
    assert len(choice) == 1
    assert choice[0].startswith("choice: cloud")
    assert lines.index(choice[0]) > 3, "the choice comes after the table"


def test_plan_with_file_has_no_notice() -> None:
    """Given a FILE, plan prints no note about the bundled example."""
    out = ok("plan", DEPLOYMENT).stdout
    assert "No file given" not in out
    assert "choice: cloud" in out


def test_plan_json_shape() -> None:
    """--json is pure JSON with the keys DESIGN.md promises."""
    data = plan_json()
    assert data["choice"] == "cloud"
    assert isinstance(data["thresholds"], list)
    assert data["thresholds"], "the §12.5 example has thresholds"
    assert [o["site"] for o in data["options"]] == ["phone", "workstation", "cloud"]
    for o in data["options"]:
        for key in (
            "site",
            "feasible",
            "reasons",
            "time_s",
            "meets_deadline",
            "energy_j",
            "breakdown_s",
        ):
            assert key in o, f"{key} missing from option {o['site']}"
        assert isinstance(o["reasons"], list)
        assert isinstance(o["breakdown_s"], dict)
    cloud = option(data, "cloud")
    assert cloud["time_s"] == pytest.approx(31.6, abs=0.05)  # §12.5.2
    assert cloud["meets_deadline"] is True


def test_plan_json_without_file_prints_only_json() -> None:
    """With --json and no FILE the notice about the example is left out."""
    run = ok("plan", "--json")
    json.loads(run.stdout)
    assert "No file given" not in run.stdout


def test_set_slower_uplink_chooses_workstation() -> None:
    """At 3.5 Mbit/s the cloud misses the deadline and the workstation is chosen (§12.5.2)."""
    data = plan_json("--set", "site.cloud.uplink=3.5 Mbit/s")
    assert data["choice"] == "workstation"
    assert option(data, "cloud")["meets_deadline"] is False
    table = ok("plan", "--set", 'site.cloud.uplink="3.5 Mbit/s"').stdout
    assert "choice: workstation" in table


def test_set_several_overrides() -> None:
    """Several --set apply together: fewer rounds shorten every option."""
    base = plan_json()
    fewer = plan_json("--set", "task.rounds=10", "--set", "site.cloud.rtt=100 ms")
    for site in ("phone", "workstation", "cloud"):
        assert option(fewer, site)["time_s"] < option(base, site)["time_s"]


# ------------------------------------------------------------------ catalog


def test_catalog_lists_h100_with_a_source() -> None:
    """`tierwise catalog` lists h100-sxm, and each of its facts has a source."""
    assert "h100-sxm" in ok("catalog").stdout
    data = json.loads(ok("catalog", "--json").stdout)
    h100 = data["hardware"]["h100-sxm"]
    assert h100["origin"] == "bundled"
    assert h100["sources"]["memory_bandwidth"]
    assert h100["memory_bandwidth"] == pytest.approx(3.35e12)


def test_user_catalog_overrides_bundled_hardware(tmp_path: Path) -> None:
    """A --catalog entry replaces h100-sxm: catalog shows it, and the plan uses it."""
    path = write(tmp_path, "mine.toml", H100_HALF_BANDWIDTH)
    h100 = json.loads(ok("catalog", "--catalog", path, "--json").stdout)["hardware"]["h100-sxm"]
    assert h100["memory_bandwidth"] == pytest.approx(1.675e12)
    assert h100["origin"] == path
    assert h100["sources"]["memory_bandwidth"] == "my measurement"
    assert "h100-sxm" in ok("catalog", "--catalog", path).stdout

    base = option(plan_json(), "cloud")["breakdown_s"]["model"]
    slower = option(plan_json("--catalog", path), "cloud")["breakdown_s"]["model"]
    assert slower == pytest.approx(2 * base)  # decode time ∝ 1 / memory bandwidth


def test_user_catalog_adds_hardware_a_scenario_can_use(tmp_path: Path) -> None:
    """A new hardware id from --catalog is usable by a site; without the file it is unknown."""
    path = write(tmp_path, "mine.toml", NEW_GPU)
    data = plan_json("--catalog", path, "--set", "site.cloud.hardware=my-gpu")
    base = option(plan_json(), "cloud")["breakdown_s"]["model"]
    mine = option(data, "cloud")["breakdown_s"]["model"]
    assert mine == pytest.approx(base * 3.35)  # 3.35 TB/s bundled, 1 TB/s mine
    assert "my-gpu" in json.loads(ok("catalog", "--catalog", path, "--json").stdout)["hardware"]

    run = run_cli("plan", "--set", "site.cloud.hardware=my-gpu")
    assert run.code == 2
    assert "unknown hardware id 'my-gpu'" in run.stderr


# ------------------------------------------------------------------ calc


def test_calc_help_lists_every_model_with_a_one_line_summary() -> None:
    """`tierwise calc --help` has one row per registry entry, its summary on the same line."""
    out = ok("calc", "--help").stdout
    lines = out.splitlines()
    assert REGISTRY, "the calc registry is empty"
    for name, entry in REGISTRY.items():
        assert "\n" not in entry.summary
        rows = [line for line in lines if f" {name} " in line and entry.summary in line]
        assert rows, f"no one-line row for {name!r} with its summary {entry.summary!r}"
    assert ok("calc").stdout == out


def test_calc_request_json() -> None:
    """`tierwise calc request --json` reproduces §12.1.1's 12.8 s with its defaults."""
    data = json.loads(ok("calc", "request", "--json").stdout)
    assert data["time_s"] == pytest.approx(12.8)
    assert data["model"] == "request"


def test_calc_request_with_params() -> None:
    """Parameters take units: a 40 Mbit/s uplink halves the 12 s upload."""
    data = json.loads(ok("calc", "request", "--uplink", "40 Mbit/s", "--json").stdout)
    assert data["breakdown_s"]["upload"] == pytest.approx(6.0)
    data = json.loads(ok("calc", "request", "--uplink=40 Mbit/s", "--json").stdout)
    assert data["breakdown_s"]["upload"] == pytest.approx(6.0)


def test_calc_model_help_lists_its_params() -> None:
    """`tierwise calc request --help` lists each parameter flag."""
    out = ok("calc", "request", "--help").stdout
    for param in REGISTRY["request"].params:
        assert param.flag in out


# ------------------------------------------------------------------ top level


def test_top_level_help() -> None:
    """`tierwise --help` works and names the commands."""
    out = ok("--help").stdout
    for command in ("plan", "calc", "catalog"):
        assert command in out


def test_plan_help() -> None:
    """`tierwise plan --help` documents --set, --json and --catalog."""
    out = ok("plan", "--help").stdout
    for flag in ("--set", "--json", "--catalog"):
        assert flag in out
