"""Integer calc parameters stop at 2^53: past it, counts are not integers in floating point."""

from __future__ import annotations

import pytest

from tierwise.calc import REGISTRY
from tierwise.calc._registry import MAX_COUNT

INT_FLAGS = sorted(
    {(name, p.flag) for name, c in REGISTRY.items() for p in c.params if p.kind == "int"}
)


@pytest.mark.parametrize(("name", "flag"), INT_FLAGS)
def test_huge_count_is_one_line(cli, name, flag):
    """10^30 for any integer flag: exit 2, one line naming the flag and the limit."""
    r = cli("calc", name, flag, str(10**30))
    assert r.code == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert flag in r.stderr and "2^53" in r.stderr and "Traceback" not in r.stderr


def test_every_count_up_to_the_limit_is_taken():
    """2^53 itself is accepted (calc loop sums it in closed form)."""
    from tests.conftest import calc_json

    assert calc_json("loop", "--rounds", str(MAX_COUNT))["time_s"] > 0
