"""Hostile calc parameter values found by the fuzz test: each is one short error."""

from __future__ import annotations

import pytest

from tierwise.calc import REGISTRY
from tierwise.calc._registry import parse_param
from tierwise.errors import ModelError, ScenarioError
from tierwise.model.loss import MAX_FEC_SYMBOLS, fec_success
from tierwise.units import KINDS

QUANTITY_PARAMS = [p for c in REGISTRY.values() for p in c.params if p.kind in KINDS]


def test_every_quantity_parameter_refuses_a_negative_or_absurd_value():
    """-1 or 1e30 (in SI units) of any quantity: an error naming the flag."""
    assert QUANTITY_PARAMS
    unit = {kind: example.split()[-1].strip("'") for kind, (_, example) in KINDS.items()}
    for p in QUANTITY_PARAMS:
        for value in (f"-1 {unit[p.kind]}", f"1e30 {unit[p.kind]}"):
            with pytest.raises(ScenarioError) as err:
                parse_param(p, value)
            assert p.flag in str(err.value)


@pytest.mark.parametrize("value", ["9" * 5000, "y" * 5000, "[" * 3000])
def test_long_or_deep_values_are_clipped_one_line_errors(value: str) -> None:
    """A 5,000-character float, word or `[[[…` list: a ScenarioError under 300 characters."""
    for kind in ("float", "int", "bool", "list:time"):
        p = next(p for c in REGISTRY.values() for p in c.params if p.kind == kind)
        with pytest.raises(ScenarioError) as err:
            parse_param(p, value)
        assert len(str(err.value)) < 300 and "\n" not in str(err.value)


def test_an_fec_block_over_the_symbol_limit_is_refused_before_allocating():
    """fec-max-loss --repair 2^31 asked numpy for 16 GiB: now a ModelError naming the limit."""
    with pytest.raises(ModelError, match=f"{MAX_FEC_SYMBOLS:,}"):
        fec_success(245, 2**31, 0.1)


def test_calc_stream_override_with_a_long_index_is_one_line(cli):
    """--override with a 5,000-digit chunk index: exit 2, one short line, no traceback."""
    r = cli("calc", "stream", f"--override={'9' * 5000}=1 s")
    assert r.code == 2 and len(r.stderr.splitlines()) == 1 and len(r.stderr) < 300
