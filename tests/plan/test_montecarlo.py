"""Monte Carlo over per-round conditions (§12.5.2): correctness against closed forms and a loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import plan_text
from tierwise.catalog import load_catalog
from tierwise.errors import ScenarioError
from tierwise.plan.montecarlo import draw, totals, totals_python
from tierwise.plan.resolve import resolve_site
from tierwise.scenario.loader import bundled_example, parse_scenario

BASE = Path(bundled_example("deployment")).read_text()


def _with(var: str) -> str:
    return BASE.replace("[decision]", var + "\n[decision]")


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
    assert 11.6 + 128 / 10 - 1e-9 <= c["min_s"] and c["max_s"] <= 11.6 + 128 / 6 + 0.01
    assert c["mean_s"] == pytest.approx(11.6 + 10 * 6.4 / 6 + 10 * 6.4 / 10, abs=0.1)


def test_vectorised_equals_plain_loop_and_is_deterministic():
    """Vectorised totals equal a per-trial Python loop; the same seed gives the same draws."""
    text = _with("""[variability]
trials = 300
seed = 11
[variability.site.cloud]
uplink = { dist = "lognormal", median = "6.4 Mbit/s", sigma = 0.4 }
rtt_jitter = { dist = "normal", mean = "0 ms", sd = "30 ms" }
disconnect_probability = 0.05
reconnect = "1 s"
progress = "lost"
""")
    scn = parse_scenario(text, source="t")
    cat = load_catalog()
    costs = [resolve_site(scn, s, cat, "t") for s in scn.site]
    d1, d2 = draw(scn, costs[2], 2, "t"), draw(scn, costs[2], 2, "t")
    assert np.array_equal(d1.uplink, d2.uplink) and np.array_equal(d1.disconnect, d2.disconnect)
    assert d1.disconnect.any()
    assert totals(d1) == pytest.approx(totals_python(d1), rel=1e-12)


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
    assert c["max_s"] > p.option("cloud").time_s + 2.5
    # P(no disconnect in 20 rounds) = 0.95^20 ≈ 0.358 → p50 is above the clean time
    assert c["p50_s"] > p.option("cloud").time_s


def test_probability_target_changes_the_choice():
    """decision.probability = 0.99 rejects a cloud that meets 45 s only ~90 % of the time."""
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
