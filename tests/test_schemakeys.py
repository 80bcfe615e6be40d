"""Keys of a table found from a pydantic error location, through lists, dicts and unions;
every schema's numbers refuse booleans, percentages and commas."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError

from tierwise.catalog._loader import Catalog, Hardware, ModelSpec, QuantFormat
from tierwise.route.config import RouteConfig
from tierwise.scenario.schema import Scenario
from tierwise.schemakeys import NoBooleanNumbers, keys_at, plain_number, unknown_key
from tierwise.sim.scenario import SimFile


@pytest.mark.parametrize(
    ("root", "loc", "expected"),
    [
        (Scenario, ("tsk",), ["task", "site", "decision", "variability"]),
        (Scenario, ("site", 2, "rrt"), ["rtt", "uplink", "congestion"]),
        (Scenario, ("task", "compute", "Compute", "tme"), ["time", "flops"]),
        (Scenario, ("variability", "site", "cloud", "uplink", "dst"), ["dist", "median"]),
        (SimFile, ("workload", "stream", "chnks"), ["chunks", "period"]),
        (SimFile, ("tcp", "msss"), ["mss", "cc"]),
    ],
)
def test_keys_at_follows_lists_dicts_and_union_tags(root, loc, expected) -> None:
    """The keys offered are those of the table the unknown key sits in."""
    keys = keys_at(root, loc)
    assert set(expected) <= set(keys)
    if loc[0] == "workload":
        assert "processing" not in keys  # the request member's key, not the stream's


def test_unknown_key_names_the_nearest_and_lists_short_tables() -> None:
    """A near key is suggested; a short table's keys are listed, a long one points to docs."""
    assert "did you mean 'rtt'?" in unknown_key("rrt", keys_at(Scenario, ("site", 0, "rrt")))
    assert "docs/scenario.md" in unknown_key("x", keys_at(Scenario, ("site", 0, "x")))
    assert "expected one of: time, flops" in unknown_key("x", ["time", "flops"])


# ----------------------------------------------------- numbers: no booleans, no "14%"


SCHEMAS = [Scenario, SimFile, RouteConfig, Catalog, Hardware, ModelSpec, QuantFormat]


def _unguarded(node: Any, guarded: bool = False) -> list[str]:
    """Every int or float schema under ``node`` that plain_number does not run before."""
    if isinstance(node, list):
        return [n for item in node for n in _unguarded(item, guarded)]
    if not isinstance(node, dict):
        return []
    function = node.get("function")
    if isinstance(function, dict) and function.get("function") is plain_number:
        return _unguarded(node.get("schema"), True)
    if node.get("type") in ("int", "float") and not guarded:
        return [str(node)]
    return [n for value in node.values() for n in _unguarded(value, False)]


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.__name__)
def test_every_number_of_every_schema_is_guarded(schema: type[BaseModel]) -> None:
    """No int or float anywhere in a schema is left to pydantic's bool-as-1 reading."""
    assert issubclass(schema, NoBooleanNumbers)
    schema.model_rebuild()  # defer_build: compile it now
    assert _unguarded(schema.__pydantic_core_schema__) == []


class _Probe(NoBooleanNumbers):
    count: int = 0
    share: float = 0.0
    weights: dict[str, float] = Field(default_factory=dict)
    rates: list[float] = Field(default_factory=list)
    either: int | None = None
    flag: bool = False


@pytest.mark.parametrize("key", ["count", "share", "either"])
@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_in_a_number_field_is_refused_at_its_key(key: str, value: bool) -> None:
    """true/false in an int, a float or an optional int is an error naming that key."""
    with pytest.raises(ValidationError) as caught:
        _Probe.model_validate({key: value})
    err = caught.value.errors()[0]
    assert err["loc"][0] == key
    assert f"got {str(value).lower()}" in err["msg"]


@pytest.mark.parametrize(
    ("data", "loc"),
    [({"weights": {"time": True}}, ("weights", "time")), ({"rates": [1.0, False]}, ("rates", 1))],
)
def test_a_boolean_inside_a_table_or_list_names_its_element(data: dict, loc: tuple) -> None:
    """The key path reaches the element: weights.time, rates[1]."""
    with pytest.raises(ValidationError) as caught:
        _Probe.model_validate(data)
    assert caught.value.errors()[0]["loc"] == loc


def test_a_boolean_field_still_takes_booleans() -> None:
    """flag = true is what a bool field is for."""
    assert _Probe.model_validate({"flag": True, "count": 3}).flag is True


@given(
    number=st.decimals(min_value=-1000, max_value=1000, places=3, allow_nan=False),
    space=st.sampled_from(["", " "]),
)
def test_any_percentage_is_refused_with_the_fraction_it_means(number, space) -> None:
    """'14%' and '3.6 %' in a number field: refused, naming the fraction (not read as 14)."""
    text = f"{number}{space}%"
    with pytest.raises(ValidationError) as caught:
        _Probe.model_validate({"share": text})
    message = caught.value.errors()[0]["msg"]
    fraction = message.rpartition("write ")[2].partition(" for")[0]
    assert "percentage" in message
    assert float(fraction) == pytest.approx(float(number) / 100)


@pytest.mark.parametrize(
    ("text", "meant"), [("1,000", "1000"), ("12,345,678", "12345678"), ("1,5", "1.5")]
)
def test_a_comma_in_a_number_is_refused_with_both_readings(text: str, meant: str) -> None:
    """A thousands separator or a decimal comma is never guessed."""
    with pytest.raises(ValidationError) as caught:
        _Probe.model_validate({"count": text})
    assert meant in caught.value.errors()[0]["msg"]
