"""Path physics in the planner (§12.3): handshakes, windows, loss recovery, quantile deadlines."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import plan_example, plan_text
from tierwise.scenario.loader import bundled_example

AGENT = Path(bundled_example("screenshot-agent")).read_text()


def test_fec_plans_within_two_percent_of_the_reference():
    """§12.3.3: 63 repair symbols on a 14 % path finish in about 241 ms."""
    o = plan_example("speech-request").option("fec")
    assert o.time_s == pytest.approx(0.241, rel=0.02)
    assert o.extra["time_p99_s"] == pytest.approx(0.2407, abs=0.0005)
    assert o.meets_deadline


def test_retransmission_shows_the_longer_tail():
    """§12.3.3: selective retransmission averages 0.756 s with a p99 of 1.24 s (6 rounds)."""
    o = plan_example("speech-request").option("retransmit")
    assert o.time_s == pytest.approx(0.756, abs=0.0005)
    assert o.extra["time_p99_s"] == pytest.approx(1.24, abs=0.005)
    assert o.breakdown_s["recovery"] == pytest.approx(0.756 - 0.2385, abs=0.001)
    assert o.meets_deadline is False


def test_switching_fec_to_retransmit_by_set():
    """--set site.fec.recovery=retransmit turns the FEC site into the retransmitting one."""
    p = plan_example("speech-request", "site.fec.recovery=retransmit")
    assert p.option("fec").time_s == pytest.approx(p.option("retransmit").time_s)
    assert p.choice is None and p.fastest == "fec"


def test_three_point_six_percent_path():
    """Exercise 12-10: at 3.6 % the retransmission p99 is 0.84 s."""
    p = plan_example("speech-request", "site.retransmit.loss=0.036")
    assert p.option("retransmit").extra["time_p99_s"] == pytest.approx(0.84, abs=0.005)


def test_deadline_quantile_judges_the_tail():
    """The mean of a retransmitting path meets 0.8 s; its p99 (1.24 s) does not."""
    mean = plan_example("speech-request", "task.deadline=0.8 s", "task.deadline_quantile=0.5")
    tail = plan_example("speech-request", "task.deadline=0.8 s", "task.deadline_quantile=0.99")
    assert mean.option("retransmit").meets_deadline
    assert not tail.option("retransmit").meets_deadline


def test_cold_connection_pays_handshake_and_slow_start():
    """A new TCP + TLS 1.3 connection adds 2 RTTs and about 0.795 s of slow start."""
    o = plan_example("speech-request", "site.cold-tcp.loss=0").option("cold-tcp")
    assert o.breakdown_s["handshake"] == pytest.approx(0.4)
    assert o.breakdown_s["window_wait"] == pytest.approx(0.795, abs=0.001)
    assert o.time_s == pytest.approx(0.2385 + 0.4 + 0.795, abs=0.001)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ((), 105.0),
        (("site.remote.connection=reused",), 105.4),
        (("site.remote.connection=new-per-round",), 117.0),
        (("site.remote.connection=new-per-round", "site.remote.handshake=quic"), 111.0),
        (("site.remote.connection=new-per-round", "site.remote.handshake=quic-0rtt"), 105.0),
    ],
)
def test_handshake_per_round_or_once(overrides, expected):
    """§12.3.1: 30 rounds at 200 ms: 105 s open, 105.4 s reused, 117 s new each round."""
    assert plan_text(AGENT, *overrides).option("remote").time_s == pytest.approx(expected)


def test_clean_defaults_leave_the_foundation_results_unchanged():
    """Without path keys no handshake, window or recovery part appears."""
    o = plan_example("deployment").option("cloud")
    assert not {"handshake", "window_wait", "recovery"} & set(o.breakdown_s)
    assert "time_p99_s" not in o.extra


def test_idle_restart_makes_every_round_slow_start():
    """With idle restart each round restarts from the initial window; without, only the first."""
    base = ("site.remote.connection=reused", "site.remote.initial_window=10")
    every = plan_text(AGENT, *base).option("remote").breakdown_s["window_wait"]
    once = plan_text(AGENT, *base, "site.remote.idle_restart=false").option("remote")
    assert every > 0
    assert once.breakdown_s["window_wait"] == pytest.approx(every / 30, rel=0.05)


windows = st.integers(1, 400)
losses = st.floats(0.0, 0.3)


@settings(max_examples=25, deadline=None)
@given(windows, windows)
def test_larger_initial_window_never_slower(a, b):
    """A larger initial window never makes the request slower."""
    lo, hi = sorted((a, b))
    t = [
        plan_example("speech-request", f"site.cold-tcp.initial_window={w}", thresholds=False)
        .option("cold-tcp")
        .time_s
        for w in (lo, hi)
    ]
    assert t[1] <= t[0] + 1e-12


@settings(max_examples=25, deadline=None)
@given(losses, losses)
def test_smaller_loss_never_slower(a, b):
    """Less loss never slows retransmission (mean, p99) nor FEC at its p99.

    FEC's mean is not monotone: r is the least reaching the target, so a slightly
    lower loss may get one symbol fewer and a larger residual failure (≤ 0.1 % of
    an RTT in the mean); see docs/validation.md.
    """
    lo, hi = sorted((a, b))
    low, high = (
        plan_example(
            "speech-request", f"site.retransmit.loss={x}", f"site.fec.loss={x}", thresholds=False
        )
        for x in (lo, hi)
    )
    r_lo, r_hi = low.option("retransmit"), high.option("retransmit")
    assert r_lo.time_s <= r_hi.time_s + 1e-9
    assert r_lo.extra["time_p99_s"] <= r_hi.extra["time_p99_s"] + 1e-9
    f_lo, f_hi = low.option("fec"), high.option("fec")
    assert f_lo.extra["time_p99_s"] <= f_hi.extra["time_p99_s"] + 1e-9
    assert f_lo.time_s <= f_hi.time_s + 0.001 * 0.2 + 1e-9


@pytest.mark.parametrize(
    ("override", "where"),
    [
        ("site.fec.loss=1", "site.fec.loss"),
        ("site.fec.loss=-0.1", "site.fec.loss"),
        ("site.cold-tcp.initial_window=-3", "site.cold-tcp.initial_window"),
        ("site.cold-tcp.handshake=tcp+tls9", "site.cold-tcp.handshake"),
        ("site.fec.fec_target=1", "site.fec.fec_target"),
        ("site.fec.mss=0 B", "site.fec.mss"),
        ("task.deadline_quantile=1.5", "task.deadline_quantile"),
    ],
)
def test_bad_path_values_exit_2(cli, override, where):
    """Impossible path values get the same one-line exit-2 error as the rest of the scenario."""
    run = cli("plan", "--example", "speech-request", "--set", override)
    assert run.code == 2
    assert where in run.stderr and "Traceback" not in run.stderr
    assert run.stdout == ""


def test_new_tcp_connection_first_flight_is_the_syn_window() -> None:
    """IW 300 on a new TCP connection still stalls once: the SYN-ACK's 65,535 B go first.

    333 Mbit/s, 200 ms: window wait = R − 65,535 B / B (the first flight's own send time
    overlaps). QUIC carries no such cap, and a kept connection's later rounds do not either.
    """
    rate = 333e6 / 8
    tcp = plan_example("speech-request", "site.cold-tcp.initial_window=300", thresholds=False)
    wait = tcp.option("cold-tcp").breakdown_s["window_wait"]
    assert wait == pytest.approx(0.2 - 65_535 / rate)
    quic = plan_example(
        "speech-request",
        "site.cold-tcp.initial_window=300",
        "site.cold-tcp.handshake=quic",
        thresholds=False,
    )
    assert quic.option("cold-tcp").breakdown_s["window_wait"] == 0.0
