"""Keys of a table found from a pydantic error location, through lists, dicts and unions."""

from __future__ import annotations

import pytest

from tierwise.scenario.schema import Scenario
from tierwise.schemakeys import keys_at, unknown_key
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
