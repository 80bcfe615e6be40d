"""Integer calc parameters stop at 2^53: past it, counts are not integers in floating point."""

from __future__ import annotations

import pytest
from tests.conftest import calc_json

from tierwise.calc import REGISTRY
from tierwise.calc._registry import MAX_COUNT, parse_param
from tierwise.errors import ScenarioError

INT_PARAMS = [(name, p) for name, c in REGISTRY.items() for p in c.params if p.kind == "int"]


def test_every_integer_parameter_refuses_a_huge_count():
    """10^30 for any integer parameter: an error naming the flag and the limit."""
    assert INT_PARAMS
    for _, p in INT_PARAMS:
        with pytest.raises(ScenarioError, match="2\\^53") as err:
            parse_param(p, str(10**30))
        assert p.flag in str(err.value)


def test_huge_count_on_the_command_line_is_one_line(cli):
    """calc tp-startup --layers 10^30 (an OverflowError before): exit 2, one line."""
    r = cli("calc", "tp-startup", "--layers", str(10**30))
    assert r.code == 2 and len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr


def test_every_count_up_to_the_limit_is_taken():
    """2^53 itself is accepted (calc loop sums it in closed form)."""
    assert calc_json("loop", "--rounds", str(MAX_COUNT))["time_s"] > 0
