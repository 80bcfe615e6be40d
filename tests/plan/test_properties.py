"""Property tests: more uplink, less RTT or fewer rounds never make an option slower."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import plan_text
from tierwise.scenario.loader import bundled_example

BASE = Path(bundled_example("deployment")).read_text()
rates = st.floats(0.5, 1000.0)
rtts = st.one_of(st.just(0.0), st.floats(1e-9, 0.5))  # the schema refuses times below 1 ps
rounds = st.integers(1, 60)


def _plan(*overrides: str):
    return plan_text(BASE, *overrides)


@settings(max_examples=40, deadline=None)
@given(rates, rates)
def test_more_uplink_never_slower(a, b):
    """Raising the cloud uplink never raises the cloud's time."""
    lo, hi = sorted((a, b))
    slow = _plan(f"site.cloud.uplink={lo} Mbit/s").option("cloud").time_s
    fast = _plan(f"site.cloud.uplink={hi} Mbit/s").option("cloud").time_s
    assert fast <= slow + 1e-9


@settings(max_examples=40, deadline=None)
@given(rtts, rtts)
def test_less_rtt_never_slower(a, b):
    """Lowering the workstation's RTT never raises its time."""
    lo, hi = sorted((a, b))
    near = _plan(f"site.workstation.rtt={lo} s").option("workstation").time_s
    far = _plan(f"site.workstation.rtt={hi} s").option("workstation").time_s
    assert near <= far + 1e-9


@settings(max_examples=30, deadline=None)
@given(rounds, rounds)
def test_fewer_rounds_never_slower(a, b):
    """Fewer rounds never make any option slower."""
    lo, hi = sorted((a, b))
    few, many = _plan(f"task.rounds={lo}"), _plan(f"task.rounds={hi}")
    for site in ("phone", "workstation", "cloud"):
        assert few.option(site).time_s <= many.option(site).time_s + 1e-9


@settings(max_examples=30, deadline=None)
@given(st.floats(1.0, 100.0), st.floats(0.0, 100.0))
def test_relaxed_deadline_stays_met(deadline, extra):
    """A deadline that is met stays met when it is relaxed."""
    tight = _plan(f"task.deadline={deadline} s")
    loose = _plan(f"task.deadline={deadline + extra} s")
    for o in tight.options:
        if o.meets_deadline:
            assert loose.option(o.site).meets_deadline


@settings(max_examples=30, deadline=None)
@given(rates)
def test_threshold_is_where_the_deadline_is_met(rate):
    """At the meets-deadline threshold the cloud meets 45 s; 1 % below it, it does not."""
    p = _plan(f"site.cloud.uplink={rate} Mbit/s")
    th = next(t for t in p.thresholds if t["site"] == "cloud" and t["kind"] == "meets_deadline")
    b = th["uplink_bytes_per_s"]
    assert p.time_at_uplink("cloud", b) <= 45 + 1e-9
    assert p.time_at_uplink("cloud", b * 0.99) > 45
