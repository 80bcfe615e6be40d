"""The planner never answers with a time that is not a number."""

from __future__ import annotations

import math
import warnings

from tests.conftest import plan_example, plan_text
from tierwise.plan.planner import _finite, choose
from tierwise.report.jsonout import plain
from tierwise.scenario.loader import bundled_example


def test_non_finite_time_is_infeasible_with_a_reason() -> None:
    """An overflowed option is marked infeasible, says why, and is never chosen."""
    p = plan_example("deployment", thresholds=False)
    for option in p.options:
        option.time_s = math.inf if option.site != "phone" else option.time_s
        _finite(option)
    assert [o.site for o in p.options if o.feasible] == ["phone"]
    cloud = p.option("cloud")
    assert any("not a finite number" in r for r in cloud.reasons)
    choice, _, fastest = choose(p.options, "time")
    assert fastest == "phone"
    assert choice in (None, "phone")
    shown = plain(cloud.to_dict())
    assert shown["time_s"] is None and shown["feasible"] is False


def test_extreme_but_valid_inputs_plan_without_numpy_warnings() -> None:
    """Inputs at the edges of their accepted ranges plan with finite times and no warnings."""
    overrides = (
        "site.cloud.uplink=1 bit/s",
        "task.upload=1e18 B",
        "site.cloud.rtt=1e9 s",
        "task.client_work=1e-12 s",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = plan_example("deployment", *overrides)
    for option in p.options:
        assert not option.feasible or (math.isfinite(option.time_s) and option.time_s >= 0)


def test_variability_quantities_are_bounded_like_the_schema() -> None:
    """A Monte Carlo uplink of 1e-308 Mbit/s is refused at its key, not divided by."""
    import pytest

    from tierwise.errors import ScenarioError

    text = (
        "\n[variability]\ntrials = 10\n[variability.site.cloud.uplink]\n"
        'dist = "uniform"\nlow = "1e-308 Mbit/s"\nhigh = "1 Mbit/s"\n'
    )
    base = bundled_example("deployment").read_text(encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"variability\.site\.cloud\.uplink\.low: .*1 bit/s"):
        plan_text(base + text)
