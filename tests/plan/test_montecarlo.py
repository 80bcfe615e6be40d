"""Monte Carlo over per-round conditions (§12.5.2), against closed forms and a naive loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import plan_text
from tierwise.catalog import load_catalog
from tierwise.errors import ScenarioError
from tierwise.plan.montecarlo import site_spec, totals, totals_python
from tierwise.plan.resolve import resolve_site
from tierwise.scenario.loader import bundled_example, parse_scenario

BASE = Path(bundled_example("deployment")).read_text()


def _with(var: str) -> str:
    return BASE.replace("[decision]", var + "\n[decision]")


def _cloud_spec(var: str):
    scn = parse_scenario(_with(var), source="t")
    costs = [resolve_site(scn, s, load_catalog(), "t") for s in scn.site]
    return site_spec(scn, costs[2], "t")


def test_constant_conditions_match_the_closed_form():
    """With no variation every trial equals the deterministic 31.6 s."""
    p = plan_text(_with("[variability]\ntrials = 500\nseed = 1\n"))
    cloud = p.monte_carlo["sites"]["cloud"]
    assert cloud["min_s"] == pytest.approx(p.option("cloud").time_s)
    assert cloud["max_s"] == pytest.approx(p.option("cloud").time_s)
    assert cloud["p_meet"] == 1.0


def test_two_rate_choice_straddles_the_harmonic_case():
    """Rounds at 6 or 10 Mbit/s: every trial lies between all-10 and all-6, mean near 28.7 s."""
    p = plan_text(
        _with("""[variability]
trials = 20000
seed = 3
[variability.site.cloud]
uplink = { dist = "choice", values = ["6 Mbit/s", "10 Mbit/s"] }
""")
    )
    c = p.monte_carlo["sites"]["cloud"]
    assert 11.6 + 128 / 10 - 0.01 <= c["min_s"] and c["max_s"] <= 11.6 + 128 / 6 + 0.01
    assert c["mean_s"] == pytest.approx(11.6 + 10 * 6.4 / 6 + 10 * 6.4 / 10, abs=0.1)


VARIANTS = {
    "choice+exponential+lost": """
uplink = { dist = "choice", values = ["4 Mbit/s", "10 Mbit/s"], weights = [0.3, 0.7] }
rtt_jitter = { dist = "exponential", mean = "40 ms" }
disconnect_probability = 0.03
reconnect = "1 s"
progress = "lost"
""",
    "lognormal+normal+kept": """
uplink = { dist = "lognormal", median = "6.4 Mbit/s", sigma = 0.4 }
rtt_jitter = { dist = "normal", mean = "0 ms", sd = "300 ms" }
disconnect_probability = 0.05
reconnect = "2 s"
progress = "kept"
""",
    "uniform": """
uplink = { dist = "uniform", low = "3 Mbit/s", high = "12 Mbit/s" }
rtt_jitter = { dist = "uniform", low = "0 ms", high = "100 ms" }
""",
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_vectorised_agrees_with_naive_loop(name):
    """The sufficient-statistic shortcut and the naive per-round loop agree in distribution."""
    spec = _cloud_spec(f"[variability]\n[variability.site.cloud]\n{VARIANTS[name]}")
    n = 20_000
    fast = totals(spec, n, seed=1, site_index=2)
    slow = np.asarray(totals_python(spec, n, seed=2))
    spread = slow.std() / np.sqrt(n)
    assert fast.mean() == pytest.approx(slow.mean(), abs=6 * spread)
    for q in (0.1, 0.5, 0.9):
        assert np.quantile(fast, q) == pytest.approx(np.quantile(slow, q), rel=0.02)
    assert np.mean(fast <= 45) == pytest.approx(np.mean(slow <= 45), abs=0.02)


def test_same_seed_same_answer_and_seed_matters():
    """The same seed gives identical trials; another seed gives other trials."""
    spec = _cloud_spec(f"[variability]\n[variability.site.cloud]\n{VARIANTS['uniform']}")
    a, b = totals(spec, 1000, 5, 2), totals(spec, 1000, 5, 2)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, totals(spec, 1000, 6, 2))


def test_disconnects_only_add_time():
    """A per-round disconnect probability never makes any trial faster than the clean run."""
    p = plan_text(
        _with("""[variability]
trials = 5000
seed = 5
[variability.site.cloud]
disconnect_probability = 0.05
reconnect = "1 s"
progress = "kept"
""")
    )
    c = p.monte_carlo["sites"]["cloud"]
    assert c["min_s"] == pytest.approx(p.option("cloud").time_s)
    assert c["max_s"] >= p.option("cloud").time_s + 2.57 - 1e-9
    # P(no disconnect in 20 rounds) = 0.95^20 ≈ 0.358, so the median includes one
    assert c["p50_s"] > p.option("cloud").time_s


def test_probability_target_changes_the_choice():
    """decision.probability = 0.99 rejects a cloud that meets 45 s only part of the time."""
    text = _with("""[variability]
trials = 20000
seed = 7
[variability.site.cloud]
uplink = { dist = "choice", values = ["2 Mbit/s", "10 Mbit/s"], weights = [0.35, 0.65] }
""").replace('objective = "energy"', 'objective = "energy"\nprobability = 0.99')
    p = plan_text(text)
    assert 0 < p.monte_carlo["sites"]["cloud"]["p_meet"] < 0.99
    assert p.choice == "workstation"


def test_unknown_site_in_variability_is_an_error():
    """A variability table for a site the file lacks is refused with its key path."""
    with pytest.raises(ScenarioError, match=r"variability\.site\.mars"):
        plan_text(_with("[variability]\n[variability.site.mars]\ndisconnect_probability = 0.1\n"))


def test_nonpositive_uplink_distribution_is_an_error():
    """A normal uplink could go negative, so it is refused with its key path."""
    with pytest.raises(ScenarioError, match=r"variability\.site\.cloud\.uplink"):
        plan_text(
            _with("""[variability]
[variability.site.cloud]
uplink = { dist = "normal", mean = "6 Mbit/s", sd = "1 Mbit/s" }
""")
        )


def test_path_physics_enter_every_trial():
    """A cloud that also pays a handshake per round has every trial shifted by that time."""
    p = plan_text(
        _with("[variability]\ntrials = 200\nseed = 1\n").replace(
            "decode_slowdown = 1.0", 'decode_slowdown = 1.0\nconnection = "new-per-round"'
        )
    )
    cloud = p.monte_carlo["sites"]["cloud"]
    assert cloud["min_s"] == pytest.approx(p.option("cloud").time_s)
    assert p.option("cloud").breakdown_s["handshake"] == pytest.approx(20 * 2 * 0.2)
