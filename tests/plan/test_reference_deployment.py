"""The chapter's printed numbers, recomputed: the table is reproduce.cases.deployment."""

from __future__ import annotations

import pytest

from tests.conftest import plan_example
from tierwise.reproduce.cases.deployment import CHOICES, ROWS


@pytest.mark.parametrize(
    ("section", "what", "overrides", "get", "expected", "tol"),
    ROWS,
    ids=[f"{r[0]} {r[1]}" for r in ROWS],
)
def test_reference_number(section, what, overrides, get, expected, tol):
    """Each printed §12.5 figure is recomputed by the planner from the scenario contract."""
    value = get(plan_example("deployment", *overrides))
    if isinstance(expected, bool):
        assert value is expected
    else:
        assert value == pytest.approx(expected, abs=tol)


@pytest.mark.parametrize(
    ("section", "overrides", "choice"), CHOICES, ids=[f"{c[0]} {' '.join(c[1])}" for c in CHOICES]
)
def test_reference_choice(section, overrides, choice):
    """The planner makes the reference's decision under each changed condition."""
    assert plan_example("deployment", *overrides).choice == choice


def test_residency_rules_out_remote_sites():
    """residency = device leaves only the phone, which misses the deadline."""
    p = plan_example("deployment", "task.residency=device")
    assert [o.site for o in p.options if o.feasible] == ["phone"]
    assert p.fastest == "phone"
    assert "residency" in p.option("cloud").reasons[0]
