"""Cost, the cost objective and the Pareto front."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tierwise.plan.cost import pareto_front, weighted_choice
from tierwise.plan.planner import plan_file

from .test_sweep import PRICED


@pytest.fixture
def priced(tmp_path):
    path = tmp_path / "priced.toml"
    path.write_text(PRICED)
    return path


def test_costs_follow_the_documented_prices(priced):
    """Rental per hour of task time; tokens (context once, output per round); egress per GB."""
    p = plan_file(priced)
    ws, cloud = p.option("workstation"), p.option("cloud")
    assert ws.extra["cost"] == pytest.approx(1.8 * ws.time_s / 3600)
    tokens = 0.15e-6 * 8192 + 0.6e-6 * 45 * 20
    assert cloud.extra["cost"] == pytest.approx(tokens + 0.09 * 20 * 20e3 / 1e9)
    assert "cost" not in p.option("phone").extra  # no price: costs nothing


def test_cost_objective_picks_the_cheapest_on_time(priced):
    """objective = "cost": the cheaper of the on-time sites, the deadline first."""
    assert plan_file(priced, ["decision.objective=cost"]).choice == "cloud"
    tight = plan_file(priced, ["decision.objective=cost", "task.deadline=20 s"])
    assert tight.choice == "workstation"  # the cloud misses 20 s


def test_pareto_weights_move_the_choice(priced):
    """Weighting time alone picks the fastest Pareto option; cost alone the cheapest."""
    fast = ["decision.weights.energy=0", "decision.weights.cost=0"]
    cheap = ["decision.weights.energy=0", "decision.weights.time=0"]
    assert plan_file(priced, fast).choice == "workstation"
    assert plan_file(priced, cheap).choice == "cloud"
    assert all("pareto" in o.extra for o in plan_file(priced).options)


@settings(max_examples=60, deadline=None)
@given(arrays(float, (3, 4, 5), elements=st.integers(0, 4).map(float)))
def test_pareto_front_is_exactly_the_non_dominated(metrics):
    """An option is on the front iff no other option is no worse everywhere and better once."""
    feasible = np.ones((4, 5), dtype=bool)
    front = pareto_front(metrics, feasible)
    for j in range(5):
        for a in range(4):
            beaten = any(
                np.all(metrics[:, b, j] <= metrics[:, a, j])
                and np.any(metrics[:, b, j] < metrics[:, a, j])
                for b in range(4)
            )
            assert front[a, j] == (not beaten)
    choice = weighted_choice(metrics, front, np.ones(3))
    assert all(front[choice[j], j] for j in range(5))  # the weighted best is on the front


@pytest.mark.parametrize(
    "weights",
    [[], ["decision.weights.time=5"], ["decision.weights.cost=0"], ["decision.weights.energy=0"]],
)
def test_pareto_thresholds_honour_the_weights(priced, weights):
    """A choice flip found under user weights is where the weighted planner's choice flips."""
    p = plan_file(priced, weights)
    flips = [t for t in p.thresholds if t["kind"] == "choice_flip"]
    assert flips
    for t in flips:
        b = t["uplink_bytes_per_s"]
        for factor, side in ((0.999, "below"), (1.001, "above")):
            moved = [*weights, f"site.{t['site']}.uplink={b * factor!r} B/s"]
            assert plan_file(priced, moved).choice == t[side], (t, factor)


def test_weights_are_bounded_and_not_all_zero(priced):
    """A weight above 1e6, below 0 or every weight 0 is one error naming decision.weights."""
    from tierwise.errors import ScenarioError

    for bad in ("decision.weights.time=2e6", "decision.weights.cost=-1"):
        with pytest.raises(ScenarioError, match=r"decision\.weights"):
            plan_file(priced, [bad])
    with pytest.raises(ScenarioError, match="at least one"):
        plan_file(priced, ["decision.weights={time = 0, energy = 0, cost = 0}"])
