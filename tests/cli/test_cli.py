"""The command line as a user runs it: plan, catalog and calc, as tables and as JSON.

Each test declares its ``tierwise`` runs (``@cli_calls``); the module runs the selected
tests' runs two real processes at a time (tests/cli/batch.py) and each test checks its own.
"""

from __future__ import annotations

import json

import pytest

from tests.cli.batch import Call, Done, call, cli_calls
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


def ok(done: Done):
    run = done.run
    assert run.code == 0, run.stderr
    assert "Traceback" not in run.stderr
    return run


def plan_json(done: Done) -> dict:
    run = ok(done)
    assert run.stdout.startswith("{"), "--json must print nothing before the JSON"
    return json.loads(run.stdout)


def option(data: dict, site: str) -> dict:
    return next(o for o in data["options"] if o["site"] == site)


PLAN_JSON = call("plan", "--json")


# ------------------------------------------------------------------ plan


@cli_calls(lambda: {"": call("plan")})
def test_plan_without_file_names_the_example_then_table_then_choice(
    cli_runs: dict[str, Done],
) -> None:
    """`tierwise plan` says it plans the bundled §12.5 example, shows the table, chooses cloud."""
    lines = ok(cli_runs[""]).stdout.splitlines()
    assert "§12.5" in lines[0]
    assert DEPLOYMENT in lines[0]
    table = "\n".join(lines[1:])
    for word in ("site", "tier", "time", "energy", "phone", "workstation", "cloud"):
        assert word in table
    choice = [line for line in lines if line.startswith("choice:")]
    assert len(choice) == 1
    assert choice[0].startswith("choice: cloud")
    assert lines.index(choice[0]) > 3, "the choice comes after the table"


@cli_calls(lambda: {"": call("plan", DEPLOYMENT)})
def test_plan_with_file_has_no_notice(cli_runs: dict[str, Done]) -> None:
    """Given a FILE, plan prints no note about the bundled example."""
    out = ok(cli_runs[""]).stdout
    assert "No file given" not in out
    assert "choice: cloud" in out


@cli_calls(lambda: {"": PLAN_JSON})
def test_plan_json_shape(cli_runs: dict[str, Done]) -> None:
    """--json is pure JSON with the keys docs/design.md promises."""
    data = plan_json(cli_runs[""])
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


@cli_calls(lambda: {"": PLAN_JSON})
def test_plan_json_without_file_prints_only_json(cli_runs: dict[str, Done]) -> None:
    """With --json and no FILE the notice about the example is left out."""
    run = ok(cli_runs[""])
    json.loads(run.stdout)
    assert "No file given" not in run.stdout


@cli_calls(
    lambda: {
        "json": call("plan", "--set", "site.cloud.uplink=3.5 Mbit/s", "--json"),
        "table": call("plan", "--set", 'site.cloud.uplink="3.5 Mbit/s"'),
    }
)
def test_set_slower_uplink_chooses_workstation(cli_runs: dict[str, Done]) -> None:
    """At 3.5 Mbit/s the cloud misses the deadline and the workstation is chosen (§12.5.2)."""
    data = plan_json(cli_runs["json"])
    assert data["choice"] == "workstation"
    assert option(data, "cloud")["meets_deadline"] is False
    table = ok(cli_runs["table"]).stdout
    assert "choice: workstation" in table


@cli_calls(
    lambda: {
        "base": PLAN_JSON,
        "fewer": call(
            "plan", "--set", "task.rounds=10", "--set", "site.cloud.rtt=100 ms", "--json"
        ),
    }
)
def test_set_several_overrides(cli_runs: dict[str, Done]) -> None:
    """Several --set apply together: fewer rounds shorten every option."""
    base = plan_json(cli_runs["base"])
    fewer = plan_json(cli_runs["fewer"])
    for site in ("phone", "workstation", "cloud"):
        assert option(fewer, site)["time_s"] < option(base, site)["time_s"]


# ------------------------------------------------------------------ catalog


@cli_calls(lambda: {"table": call("catalog"), "json": call("catalog", "--json")})
def test_catalog_lists_h100_with_a_source(cli_runs: dict[str, Done]) -> None:
    """`tierwise catalog` lists h100-sxm, and each of its facts has a source."""
    assert "h100-sxm" in ok(cli_runs["table"]).stdout
    data = json.loads(ok(cli_runs["json"]).stdout)
    h100 = data["hardware"]["h100-sxm"]
    assert h100["origin"] == "bundled"
    assert h100["sources"]["memory_bandwidth"]
    assert h100["memory_bandwidth"] == pytest.approx(3.35e12)


def _with_catalog(text: str, *args: str) -> Call:
    return call(*args[:1], "--catalog", "{dir}/mine.toml", *args[1:], files={"mine.toml": text})


@cli_calls(
    lambda: {
        "json": _with_catalog(H100_HALF_BANDWIDTH, "catalog", "--json"),
        "table": _with_catalog(H100_HALF_BANDWIDTH, "catalog"),
        "base": PLAN_JSON,
        "plan": _with_catalog(H100_HALF_BANDWIDTH, "plan", "--json"),
    }
)
def test_user_catalog_overrides_bundled_hardware(cli_runs: dict[str, Done]) -> None:
    """A --catalog entry replaces h100-sxm: catalog shows it, and the plan uses it."""
    done = cli_runs["json"]
    h100 = json.loads(ok(done).stdout)["hardware"]["h100-sxm"]
    assert h100["memory_bandwidth"] == pytest.approx(1.675e12)
    assert h100["origin"] == str(done.dir / "mine.toml")
    assert h100["sources"]["memory_bandwidth"] == "my measurement"
    assert "h100-sxm" in ok(cli_runs["table"]).stdout

    base = option(plan_json(cli_runs["base"]), "cloud")["breakdown_s"]["model"]
    slower = option(plan_json(cli_runs["plan"]), "cloud")["breakdown_s"]["model"]
    assert slower == pytest.approx(2 * base)  # decode time ∝ 1 / memory bandwidth


@cli_calls(
    lambda: {
        "plan": _with_catalog(NEW_GPU, "plan", "--set", "site.cloud.hardware=my-gpu", "--json"),
        "base": PLAN_JSON,
        "catalog": _with_catalog(NEW_GPU, "catalog", "--json"),
        "without": call("plan", "--set", "site.cloud.hardware=my-gpu"),
    }
)
def test_user_catalog_adds_hardware_a_scenario_can_use(cli_runs: dict[str, Done]) -> None:
    """A new hardware id from --catalog is usable by a site; without the file it is unknown."""
    data = plan_json(cli_runs["plan"])
    base = option(plan_json(cli_runs["base"]), "cloud")["breakdown_s"]["model"]
    mine = option(data, "cloud")["breakdown_s"]["model"]
    assert mine == pytest.approx(base * 3.35)  # 3.35 TB/s bundled, 1 TB/s mine
    assert "my-gpu" in json.loads(ok(cli_runs["catalog"]).stdout)["hardware"]

    run = cli_runs["without"].run
    assert run.code == 2
    assert "unknown hardware id 'my-gpu'" in run.stderr


# ------------------------------------------------------------------ calc


@cli_calls(lambda: {"help": call("calc", "--help"), "bare": call("calc")})
def test_calc_help_lists_every_model_with_a_one_line_summary(cli_runs: dict[str, Done]) -> None:
    """`tierwise calc --help` has one row per registry entry, its summary on the same line."""
    out = ok(cli_runs["help"]).stdout
    lines = out.splitlines()
    assert REGISTRY, "the calc registry is empty"
    for name, entry in REGISTRY.items():
        assert "\n" not in entry.summary
        rows = [line for line in lines if f" {name} " in line and entry.summary in line]
        assert rows, f"no one-line row for {name!r} with its summary {entry.summary!r}"
    assert ok(cli_runs["bare"]).stdout == out


@cli_calls(lambda: {"": call("calc", "request", "--json")})
def test_calc_request_json(cli_runs: dict[str, Done]) -> None:
    """`tierwise calc request --json` reproduces §12.1.1's 12.8 s with its defaults."""
    data = json.loads(ok(cli_runs[""]).stdout)
    assert data["time_s"] == pytest.approx(12.8)
    assert data["model"] == "request"


@cli_calls(
    lambda: {
        "two": call("calc", "request", "--uplink", "40 Mbit/s", "--json"),
        "one": call("calc", "request", "--uplink=40 Mbit/s", "--json"),
    }
)
def test_calc_request_with_params(cli_runs: dict[str, Done]) -> None:
    """Parameters take units: a 40 Mbit/s uplink halves the 12 s upload."""
    data = json.loads(ok(cli_runs["two"]).stdout)
    assert data["breakdown_s"]["upload"] == pytest.approx(6.0)
    data = json.loads(ok(cli_runs["one"]).stdout)
    assert data["breakdown_s"]["upload"] == pytest.approx(6.0)


@cli_calls(lambda: {"": call("calc", "request", "--help")})
def test_calc_model_help_lists_its_params(cli_runs: dict[str, Done]) -> None:
    """`tierwise calc request --help` lists each parameter flag."""
    out = ok(cli_runs[""]).stdout
    for param in REGISTRY["request"].params:
        assert param.flag in out


# ------------------------------------------------------------------ top level


@cli_calls(lambda: {"": call("--help")})
def test_top_level_help(cli_runs: dict[str, Done]) -> None:
    """`tierwise --help` works and names the commands."""
    out = ok(cli_runs[""]).stdout
    for command in ("plan", "calc", "catalog"):
        assert command in out


@cli_calls(lambda: {"": call("plan", "--help")})
def test_plan_help(cli_runs: dict[str, Done]) -> None:
    """`tierwise plan --help` documents --set, --json and --catalog."""
    out = ok(cli_runs[""]).stdout
    for flag in ("--set", "--json", "--catalog"):
        assert flag in out
