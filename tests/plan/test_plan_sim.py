"""A site may be evaluated by the packet-level simulator instead of the closed form."""

from __future__ import annotations

import pytest

from tests.conftest import plan_text

SCENARIO = """
[task]
kind = "loop"
rounds = 3
upload = "0.8 MB"
client_work = "0.3 s"
deadline = "10 s"
[task.compute]
time = "2.0 s"
[[site]]
name = "cloud"
tier = "cloud"
uplink = "6.4 Mbit/s"
downlink = "50 Mbit/s"
rtt = "200 ms"
evaluate = "sim"
congestion = "newreno"
[[site]]
name = "closed"
tier = "cloud"
uplink = "6.4 Mbit/s"
downlink = "50 Mbit/s"
rtt = "200 ms"
initial_window = 10
connection = "reused"
handshake = "quic-0rtt"
[decision]
objective = "time"
"""


def test_simulated_loop_agrees_with_the_closed_form_with_slow_start():
    """Three 0.8 MB rounds: simulated time within 2 % of the closed form with IW 10 restarts."""
    p = plan_text(SCENARIO)
    sim, closed = p.option("cloud"), p.option("closed")
    assert "network (simulated)" in sim.breakdown_s
    assert sim.time_s == pytest.approx(closed.time_s, rel=0.02)
    assert sim.extra["closed_form_time_s"] < sim.time_s  # the closed form has no headers


def test_runs_give_a_tail_on_a_lossy_path():
    """With loss and several runs the simulated option reports a p99 above its mean."""
    p = plan_text(SCENARIO, "site.cloud.loss=0.05", "site.cloud.runs=5")
    o = p.option("cloud")
    assert o.extra["sim_runs"] == 5
    assert o.extra["time_p99_s"] >= o.time_s
    assert o.time_s > p.option("closed").time_s


def test_sim_on_a_stream_task_is_refused(cli, tmp_path):
    """evaluate = "sim" is for request and loop tasks; a stream gets a one-line error."""
    from tierwise.scenario.loader import bundled_example

    text = (
        bundled_example("voice-stream")
        .read_text()
        .replace('rtt = "10 ms"', 'rtt = "10 ms"\ndownlink = "10 Mbit/s"\nevaluate = "sim"')
    )
    f = tmp_path / "s.toml"
    f.write_text(text)
    run = cli("plan", str(f))
    assert run.code == 2 and "site.server.evaluate" in run.stderr


def test_simulated_handshakes_per_round():
    """§12.3.1 in the simulator: a new TCP + TLS 1.3 connection per round adds 2 RTTs a round."""
    reused = plan_text(SCENARIO, "site.cloud.connection=reused").option("cloud").time_s
    fresh = plan_text(SCENARIO, "site.cloud.connection=new-per-round").option("cloud").time_s
    assert fresh - reused == pytest.approx(2 * 2 * 0.2, abs=0.01)
