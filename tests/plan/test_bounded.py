"""Bounded work: loops of many identical rounds and plans of many sites."""

from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from tests.conftest import plan_example, plan_text
from tierwise.errors import ModelError, ScenarioError
from tierwise.plan import montecarlo, planner, thresholds
from tierwise.plan.options import Option
from tierwise.report.plan_view import render_plan
from tierwise.scenario.loader import bundled_example

BASE = Path(bundled_example("deployment")).read_text()
LOSSY = (
    "site.cloud.loss=0.01",
    "site.cloud.connection=reused",
    "site.cloud.initial_window=10",
    "task.deadline=1e9 s",
)


def many_sites(n: int) -> str:
    """The §12.5 task over ``n`` remote sites of varied uplink and RTT."""
    head = BASE.split("[[site]]")[0]
    sites = [
        f'[[site]]\nname = "s{i}"\ntier = "{"edge" if i % 2 else "cloud"}"\n'
        f'hardware = "{"rtx-pro-6000" if i % 2 else "h100-sxm"}"\n'
        f'uplink = "{5 + (i * 37) % 100} Mbit/s"\nrtt = "{10 + (i * 13) % 200} ms"\n'
        for i in range(n)
    ]
    return head + "\n".join(sites) + '\n[decision]\nobjective = "energy"\n'


def test_billion_identical_rounds_in_constant_memory():
    """10^9 identical rounds plan as N·t with no per-round array."""
    tracemalloc.start()
    big = plan_example("deployment", "task.rounds=1000000000", "task.deadline=1e9 s")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    small = plan_example("deployment", "task.rounds=20", thresholds=False)
    assert peak < 20e6
    for site in ("workstation", "cloud"):
        per_round = (big.option(site).time_s - big.option(site).breakdown_s["prepare"]) / 1e9
        want = (small.option(site).time_s - small.option(site).breakdown_s["prepare"]) / 20
        assert per_round == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("rounds", [1, 2, 7, 40])
def test_steady_rounds_sum_like_round_by_round(rounds):
    """Lossy windowed rounds added at once match the same rounds listed one by one."""
    ups = ", ".join(['"6.4 Mbit/s"'] * rounds)
    at_once = plan_example("deployment", f"task.rounds={rounds}", *LOSSY, thresholds=False)
    listed = plan_example(
        "deployment",
        f"task.rounds={rounds}",
        f"site.cloud.uplink=[{ups}]",
        *LOSSY,
        thresholds=False,
    )
    a, b = at_once.option("cloud"), listed.option("cloud")
    assert a.time_s == pytest.approx(b.time_s, rel=1e-9)
    assert a.extra["time_p99_s"] == pytest.approx(b.extra["time_p99_s"], rel=1e-9)
    assert a.breakdown_s["window_wait"] == pytest.approx(b.breakdown_s["window_wait"], rel=1e-9)


def test_million_lossy_rounds_have_the_mean_of_a_million_transfers():
    """10^6 lossy rounds: the mean recovery is 10^6 × one round's, from O(log n) convolutions."""
    one = plan_example("deployment", "task.rounds=2", *LOSSY, thresholds=False)
    many = plan_example("deployment", "task.rounds=1000000", *LOSSY, thresholds=False)
    per_round = one.option("cloud").breakdown_s["recovery"] / 2
    assert many.option("cloud").breakdown_s["recovery"] / 1e6 == pytest.approx(per_round, 1e-6)


def test_too_many_lossy_rounds_is_a_clear_error():
    """10^30 lossy rounds: a one-line error naming the limit, not numpy's."""
    with pytest.raises(ModelError, match="100,000"):
        plan_example("deployment", "task.rounds=1000000000000000000000000000000", *LOSSY)


def _option(name: str, time_s: float, energy: float, feasible: bool, meets: bool | None):
    return Option(name, "edge", feasible, [] if feasible else ["x"], time_s, meets, energy, {})


options = st.lists(
    st.tuples(
        st.sampled_from([1.0, 2.0, 3.0]),
        st.sampled_from([5.0, 6.0, None]),
        st.booleans(),
        st.sampled_from([True, False, None]),
    ),
    min_size=1,
    max_size=7,
)


@settings(max_examples=200, deadline=None)
@given(options, st.sampled_from(["time", "energy"]), st.data())
def test_contenders_choose_like_every_option(specs, objective, data):
    """Choosing among the contenders and one varied option equals choosing among all."""
    opts = [_option(f"s{i}", t, e, f, m) for i, (t, e, f, m) in enumerate(specs)]
    varied_at = data.draw(st.integers(0, len(opts) - 1))
    t, e, f, m = data.draw(options.map(lambda x: x[0]))
    varied = _option(opts[varied_at].site, t, e, f, m)
    others = [o for o in opts if o is not opts[varied_at]]
    pool = [o for o in thresholds.contenders(opts, objective) if o.site != varied.site]
    assert len(pool) <= 2
    want = planner.choose([*others, varied], objective)[0]
    assert planner.choose([*pool, varied], objective)[0] == want


@pytest.mark.slow
def test_thousand_sites_search_is_linear(monkeypatch):
    """1,000 sites: each probe of the threshold search chooses among ≤ 3 options."""
    evaluations, chosen = [0], []
    evaluate, choose = thresholds.evaluate_option, planner.choose

    def counting_evaluate(*args, **kwargs):
        evaluations[0] += 1
        return evaluate(*args, **kwargs)

    def counting_choose(opts, objective, *rest):
        chosen.append(len(opts))
        return choose(opts, objective, *rest)

    monkeypatch.setattr(thresholds, "evaluate_option", counting_evaluate)
    monkeypatch.setattr(planner, "choose", counting_choose)
    p = plan_text(many_sites(1000))
    assert len(p.options) == 1000 and p.choice is not None
    assert evaluations[0] <= 250 * 1000
    assert sum(n > 3 for n in chosen) <= 1  # only the plan's own choice sees every option
    out = io.StringIO()
    render_plan(Console(file=out, width=120), p)
    text = out.getvalue()
    assert len(text.splitlines()) < 150
    assert "of 1,000 sites" in text and "more thresholds" in text


LOGNORMAL = """[variability]
trials = {trials}
seed = 2
[variability.site.cloud]
uplink = {{ dist = "lognormal", median = "6.4 Mbit/s", sigma = 0.3 }}
disconnect_probability = 0.01
reconnect = "1 s"
"""


def _mc_scenario(trials: int) -> str:
    return BASE.replace("[decision]", LOGNORMAL.format(trials=trials) + "\n[decision]")


def test_monte_carlo_over_the_cell_limit_is_refused():
    """Trials × rounds of per-round draws over the limit: one error with the figures."""
    text = _mc_scenario(1000)
    with pytest.raises(ModelError, match=r"'cloud'.*1,000 trials × 1,000,000,000 rounds"):
        plan_text(text, "task.rounds=1000000000", "task.deadline=1e9 s")


def test_monte_carlo_in_blocks_draws_the_same(monkeypatch):
    """Per-round sums split into trial blocks give the very same trials as one block;
    disconnected trials, drawn block by block, keep their distribution."""
    smooth = _mc_scenario(300).replace("disconnect_probability = 0.01", "")
    cut = _mc_scenario(4000).replace("0.01", "0.05")
    whole = [plan_text(t).monte_carlo["sites"]["cloud"] for t in (smooth, cut)]
    monkeypatch.setattr(montecarlo, "_CHUNK_CELLS", 7 * 20)  # 7 trials of 20 rounds a block
    blocked = [plan_text(t).monte_carlo["sites"]["cloud"] for t in (smooth, cut)]
    for key in ("mean_s", "min_s", "max_s", "p50_s"):
        assert blocked[0][key] == pytest.approx(whole[0][key], rel=1e-12)
    assert blocked[1]["mean_s"] == pytest.approx(whole[1]["mean_s"], rel=0.02)


def test_monte_carlo_of_a_billion_rounds_uses_sufficient_statistics():
    """10^9 rounds with a choice uplink and exponential jitter need no per-round draws."""
    var = """[variability]
trials = 2000
seed = 1
[variability.site.cloud]
uplink = { dist = "choice", values = ["6 Mbit/s", "10 Mbit/s"] }
rtt_jitter = { dist = "exponential", mean = "10 ms" }
"""
    text = BASE.replace("[decision]", var + "\n[decision]")
    p = plan_text(text, "task.rounds=1000000000", "task.deadline=1e9 s")
    cloud = p.monte_carlo["sites"]["cloud"]
    per_round = cloud["mean_s"] / 1e9
    assert 0.1 + 0.8e6 / (10e6 / 8) < per_round < 0.3 + 0.8e6 / (6e6 / 8) + 0.1


def test_simulated_site_over_the_packet_budget_is_refused():
    """evaluate = "sim" with 10^6 rounds: refused before simulating, at the site's key."""
    text = BASE.replace(
        "decode_slowdown = 1.0", 'decode_slowdown = 1.0\nevaluate = "sim"\ndownlink = "100 Mbit/s"'
    )
    with pytest.raises(ScenarioError, match="5,000,000") as err:
        plan_text(text, "task.rounds=1000000", "task.deadline=1e9 s")
    assert err.value.path == "site.cloud.evaluate"


def test_disconnect_after_10_to_30_rounds_is_closed_form():
    """10^30 rounds, all redone after a disconnect: about twice the time, no overflow."""
    huge = str(10**30)
    cut = ("task.disconnect.reconnect=1 s", "task.disconnect.progress=lost")
    base = plan_example("deployment", f"task.rounds={huge}", thresholds=False)
    lost = plan_example(
        "deployment",
        f"task.rounds={huge}",
        f"task.disconnect.after_round={huge}",
        *cut,
        thresholds=False,
    )
    redo = lost.option("cloud").time_s - base.option("cloud").time_s
    assert redo == pytest.approx(base.option("cloud").time_s, rel=1e-9)


def test_threshold_search_reports_progress_site_by_site():
    """find_thresholds calls progress(done, total) once per site, then (total, total)."""
    from tierwise.scenario.loader import parse_scenario

    calls: list[tuple[int, int]] = []
    scn = parse_scenario(many_sites(30), source="test.toml")
    p = planner.plan(scn, source="test.toml", progress=lambda d, t: calls.append((d, t)))
    assert calls == [(i, 30) for i in range(31)]
    assert p.thresholds  # the search ran while it reported
