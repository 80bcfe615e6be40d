"""The event engine: ordering, and the guard against a model that stops advancing time."""

from __future__ import annotations

import pytest

from tierwise.errors import SimulationError
from tierwise.sim import engine
from tierwise.sim.engine import Simulator


def test_events_run_in_time_then_schedule_order() -> None:
    """Ties at one instant run in the order they were scheduled."""
    sim, seen = Simulator(), []
    for label, t in (("b", 2.0), ("a", 1.0), ("c", 2.0)):
        sim.at(t, seen.append, label)
    assert sim.run() == 3
    assert seen == ["a", "b", "c"]


def test_a_callback_that_respins_at_the_same_instant_raises(monkeypatch) -> None:
    """A timer re-armed at ``now`` for ever is a SimulationError naming time and callback."""
    monkeypatch.setattr(engine, "STALL_EVENTS", 1000)
    sim = Simulator()

    def spin() -> None:
        sim.at(sim.now, spin)

    sim.at(0.25, spin)
    with pytest.raises(SimulationError, match=r"stalled at 0\.250000000 s.*spin"):
        sim.run()


def test_a_burst_below_the_bound_at_one_instant_runs(monkeypatch) -> None:
    """Many events at one instant are fine as long as time advances afterwards."""
    monkeypatch.setattr(engine, "STALL_EVENTS", 1000)
    sim, seen = Simulator(), []
    for _ in range(1000):
        sim.at(1.0, seen.append, 1)
    sim.at(2.0, seen.append, 2)
    assert sim.run() == 1001
    assert sim.now == 2.0
