"""The scenario loader: --set typing, schema-checked paths, and key paths in errors."""

from __future__ import annotations

import copy
import tomllib

import pytest

from tierwise.errors import ScenarioError
from tierwise.scenario.loader import apply_set, bundled_example, load_scenario, parse_scenario

DEPLOYMENT = bundled_example("deployment")
TEXT = DEPLOYMENT.read_text(encoding="utf-8")
CHUNKS_TEXT = bundled_example("photo-chunks").read_text(encoding="utf-8")
MBIT = 1e6 / 8  # bytes/s in one Mbit/s


def parse(*overrides: str, text: str = TEXT):
    return parse_scenario(text, source="deployment.toml", overrides=overrides)


def set_error(*overrides: str, text: str = TEXT) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        parse(*overrides, text=text)
    return info.value


# ------------------------------------------------------------------ value typing


def test_set_integer() -> None:
    """task.rounds=10 is read as the integer 10."""
    assert apply_set(tomllib.loads(TEXT), "task.rounds=10")["task"]["rounds"] == 10
    scn = parse("task.rounds=10")
    assert scn.task.rounds == 10
    assert type(scn.task.rounds) is int


def test_set_boolean() -> None:
    """task.chunks.barrier=true is read as a boolean."""
    raw = apply_set(tomllib.loads(CHUNKS_TEXT), "task.chunks.barrier=true")
    assert raw["task"]["chunks"]["barrier"] is True
    assert parse("task.chunks.barrier=true", text=CHUNKS_TEXT).task.chunks.barrier is True


def test_set_list() -> None:
    """site.cloud.uplink=["6 Mbit/s","10 Mbit/s"] is a list, one rate per round."""
    scn = parse("task.rounds=2", 'site.cloud.uplink=["6 Mbit/s","10 Mbit/s"]')
    assert scn.site_named("cloud").uplink == pytest.approx([6 * MBIT, 10 * MBIT])


def test_set_string_fallback_keeps_units() -> None:
    """A value that is not TOML is a string, and still goes through unit parsing (§12.5)."""
    raw = apply_set(tomllib.loads(TEXT), "site.cloud.uplink=3.5 Mbit/s")
    assert raw["site"][2]["uplink"] == "3.5 Mbit/s"
    assert parse("site.cloud.uplink=3.5 Mbit/s").site_named("cloud").uplink == 437500.0


def test_set_quoted_string() -> None:
    """A quoted value is a TOML string: "3.5 Mbit/s" parses, and "10" stays text."""
    assert parse('site.cloud.uplink="3.5 Mbit/s"').site_named("cloud").uplink == 437500.0
    assert parse('task.name="10"').task.name == "10"


def test_set_unquoted_number_for_a_string_key_is_an_error() -> None:
    """task.name=10 is the integer 10, which a name is not; the error names the --set."""
    err = set_error("task.name=10")
    assert err.path == "task.name"
    assert "from --set task.name=10" in str(err)


def test_set_value_with_spaces_around_equals() -> None:
    """Spaces around the key and the value are ignored."""
    assert parse("task.rounds = 12").task.rounds == 12


# ------------------------------------------------------------------ paths


def test_set_adds_an_optional_table() -> None:
    """task.compress.ratio=0.5 adds [task.compress], which the file left out."""
    assert parse().task.compress is None
    compress = parse("task.compress.ratio=0.5").task.compress
    assert compress is not None
    assert compress.ratio == 0.5
    assert compress.time == 0.0


def test_set_adds_a_table_over_several_sets() -> None:
    """A table with two required keys can be added one --set at a time."""
    scn = parse("task.disconnect.after_round=8", "task.disconnect.reconnect=2 s")
    assert scn.task.disconnect is not None
    assert (scn.task.disconnect.after_round, scn.task.disconnect.reconnect) == (8, 2.0)


def test_set_adds_a_site_key_the_file_left_out() -> None:
    """The cloud site has no prefill in the file; the schema knows the key, so it may be set."""
    assert parse().site_named("cloud").prefill is None
    assert parse("site.cloud.prefill=1 s").site_named("cloud").prefill == 1.0


def test_set_overrides_a_nested_key_and_keeps_its_siblings() -> None:
    """task.model.decode_tokens=90 changes that key only."""
    model = parse("task.model.decode_tokens=90").task.model
    assert model is not None
    assert model.decode_tokens == 90
    assert (model.model, model.weights, model.context) == ("qwen3-8b", "q4_0", 8192)


def test_set_applies_in_order() -> None:
    """Several --set apply in order: the last one for a key wins, others all apply."""
    scn = parse(
        "task.rounds=10", "site.cloud.uplink=3 Mbit/s", "site.cloud.rtt=50 ms", "task.rounds=12"
    )
    assert scn.task.rounds == 12
    cloud = scn.site_named("cloud")
    assert (cloud.uplink, cloud.rtt) == (pytest.approx(3 * MBIT), pytest.approx(0.05))


def test_set_order_matters_for_checks_across_keys() -> None:
    """A per-round list fits once rounds is set first; validation sees the final data."""
    scn = parse("task.rounds=2", 'site.cloud.uplink=["6 Mbit/s","10 Mbit/s"]', "task.rounds=2")
    assert scn.task.rounds == 2


def test_set_into_a_dict_table_checks_the_value_schema() -> None:
    """variability.site.<name> takes any name, but the keys below it are checked."""
    scn = parse("variability.site.cloud.disconnect_probability=0.1")
    assert scn.variability is not None
    assert scn.variability.site["cloud"].disconnect_probability == 0.1
    err = set_error("variability.site.cloud.nosuch=1")
    assert err.path == "variability.site.cloud.nosuch"
    assert "unknown key 'nosuch'" in str(err)


def test_set_does_not_mutate_its_input() -> None:
    """apply_set returns a copy."""
    data = tomllib.loads(TEXT)
    before = copy.deepcopy(data)
    apply_set(data, "site.cloud.uplink=1 Mbit/s")
    apply_set(data, "task.compress.ratio=0.5")
    assert data == before


@pytest.mark.parametrize(
    ("item", "path", "words"),
    [
        ("task.nosuch=1", "task.nosuch", ["unknown key 'nosuch'", "docs/scenario.md"]),
        ("task.round=1", "task.round", ["unknown key 'round' (did you mean 'rounds'?)"]),
        ("nosuch.key=1", "nosuch.key", ["unknown key 'nosuch'", "task, site"]),
        ("task.compress.nosuch=1", "task.compress.nosuch", ["unknown key 'nosuch'", "ratio"]),
        ("site.cloud.nosuch=1", "site.cloud.nosuch", ["unknown key 'nosuch'", "scenario.md"]),
        ("task.rounds.x=1", "task.rounds.x", ["task.rounds", "not a table"]),
        ("site.cloud.uplink.x=1", "site.cloud.uplink.x", ["site.cloud.uplink", "not a table"]),
        ("site.nosuch.uplink=1 Mbit/s", "site.nosuch.uplink", ["'nosuch'", "workstation"]),
        ("site.cloud=1", "site.cloud", ["site.<name>.<key>"]),
        ("task..rounds=1", "task..rounds", ["empty part"]),
    ],
)
def test_set_path_errors(item: str, path: str, words: list[str]) -> None:
    """A path the schema does not know, or a site the file lacks, names file and key path."""
    err = set_error(item)
    assert err.source == "deployment.toml"
    assert err.path == path
    for word in words:
        assert word in err.detail, err.detail


def test_set_site_name_is_checked_against_the_file_not_the_schema() -> None:
    """The schema allows any site name; --set may only name sites the file has."""
    text = TEXT.replace('name = "cloud"', 'name = "cloud-eu"')
    assert parse("site.cloud-eu.rtt=1 ms", text=text).site_named("cloud-eu").rtt == 0.001
    err = set_error("site.cloud.rtt=1 ms", text=text)
    assert "cloud-eu" in err.detail


@pytest.mark.parametrize("item", ["task.rounds", "=5", ""])
def test_set_without_key_or_equals(item: str) -> None:
    """An item that is not key.path=value says so, naming the file."""
    err = set_error(item)
    assert err.source == "deployment.toml"
    assert "key.path=value" in err.detail


# ------------------------------------------------------------------ error key paths


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (('name = "workstation"', 'name = "cloud"'), "site.cloud.name"),
        (("rounds = 20\n", ""), "task.rounds"),
        (('uplink = "6.4 Mbit/s"', 'uplink = ["6 Mbit/s", "6 Mbit/q"]'), "site.cloud.uplink[1]"),
        (('name = "phone"\n', ""), "site[0].name"),
        (('tier = "edge"', 'tier = "fog"'), "site.workstation.tier"),
        (("[task.model]", "[task.compress]\nratio = 2\n[task.model]"), "task.compress.ratio"),
    ],
)
def test_error_key_paths(edit: tuple[str, str], path: str) -> None:
    """Errors from field and whole-table checks name the exact key, sites by name."""
    assert edit[0] in TEXT
    err = set_error(text=TEXT.replace(*edit, 1))
    assert err.path == path, str(err)


def test_union_error_reports_the_member_that_fits() -> None:
    """A stream's compute is a time; a bad time says so rather than asking for a table."""
    text = """\
[task]
kind = "stream"
chunks = 3
period = "20 ms"
compute = "1 MB"

[[site]]
name = "phone"
tier = "device"
"""
    err = set_error(text=text)
    assert err.path == "task.compute"
    assert "not a time" in err.detail


def test_load_scenario_names_the_file(tmp_path) -> None:
    """load_scenario puts the path in the error's source."""
    path = tmp_path / "bad.toml"
    path.write_text(TEXT.replace('rtt = "200 ms"', 'rtt = "200 parsecs"'), encoding="utf-8")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.source == str(path)
    assert info.value.path == "site.cloud.rtt"
    assert str(info.value).startswith(f"{path}: site.cloud.rtt: ")


def test_bundled_example_loads_with_overrides() -> None:
    """The §12.5 example loads from its path, overrides applied."""
    scn = load_scenario(DEPLOYMENT, ["site.cloud.uplink=3.5 Mbit/s"])
    assert scn.site_named("cloud").uplink == 437500.0
    assert [s.name for s in scn.site] == ["phone", "workstation", "cloud"]


@pytest.mark.parametrize(
    ("item", "needles"),
    [
        ("site.cloud.decode_slowdown=inf", ["finite number", "got inf"]),
        ("site.cloud.loss=nan", ["finite number"]),
        ("site.cloud.decode_slowdown=1e308", ["less than or equal to 1000"]),
    ],
)
def test_non_finite_numbers_are_refused(item: str, needles: list[str]) -> None:
    """inf and nan are not numbers a scenario means: refused at the key."""
    err = set_error(item)
    assert err.path == item.partition("=")[0]
    for needle in needles:
        assert needle in str(err)


@pytest.mark.parametrize(
    "item",
    [
        "task." + "x" * 5000 + "=1",
        'task.compute.time="' + "y" * 5000 + '"',
        "site.cloud." + "z" * 150 + "=1",
        "task.rounds=" + "9" * 5000,
    ],
    ids=["long key", "long value", "long site key", "5000-digit integer"],
)
def test_long_set_items_give_short_errors(item: str) -> None:
    """A --set of thousands of characters is refused in a message of a few hundred."""
    err = set_error(item)
    assert len(str(err)) < 250, str(err)
