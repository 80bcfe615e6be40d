"""Competing flows on one bottleneck: goodput shares, Jain's index, queueing delay."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierwise.errors import SimulationError
from tierwise.sim import PathSpec, TcpSpec, run_request
from tierwise.sim.flows import FlowSpec, jain_index, run_flows

RATE_BYTES_PER_S = 2.5e6  # 20 Mbit/s
RTT_S = 0.1
BDP_PACKETS = 205
TCP = TcpSpec(mss=1168, header=54, ack_bytes=54)
PAYLOAD_RATE = RATE_BYTES_PER_S * 1168 / 1222  # what the link carries in payload


def _path(**kw) -> PathSpec:
    return PathSpec(RATE_BYTES_PER_S, RATE_BYTES_PER_S, RTT_S, **kw)


def test_jain_index_is_one_for_equal_shares_and_one_over_n_for_one_taker():
    """Jain's index: equal shares 1, a single taker of n flows 1/n."""
    assert jain_index([3.0, 3.0, 3.0]) == pytest.approx(1.0)
    assert jain_index([5.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain_index([1.0, 3.0]) == pytest.approx(16 / 20)


@given(st.lists(st.floats(0, 1e9), min_size=1, max_size=20))
def test_jain_index_lies_between_one_over_n_and_one(values):
    """For any non-negative shares, 1/n ≤ J ≤ 1."""
    j = jain_index(values)
    assert 1 / len(values) - 1e-9 <= j <= 1 + 1e-9


def test_a_single_sized_flow_matches_run_request():
    """One flow alone finishes when run_request's upload does (same links, same seed)."""
    size = 2_000_000
    alone = run_flows(_path(queue_packets=BDP_PACKETS), TCP, [FlowSpec("newreno", 0.0, size)])
    ref = run_request(_path(queue_packets=BDP_PACKETS), TCP, size, 0, 0.0)
    assert alone["flows"][0]["done_s"] == pytest.approx(ref.time_s, rel=1e-9)
    assert alone["jain_index"] == 1.0


def test_two_cubic_flows_share_the_bottleneck_fairly_and_fill_it():
    """Two CUBIC flows over a one-BDP queue for 20 s: near-equal shares, the link full."""
    flows = [FlowSpec("cubic", 0.0, duration_s=20.0), FlowSpec("cubic", 0.0, duration_s=20.0)]
    out = run_flows(_path(queue_packets=BDP_PACKETS), TCP, flows)
    total = sum(f["goodput_bytes_per_s"] for f in out["flows"])
    assert 0.9 * PAYLOAD_RATE < total <= PAYLOAD_RATE * 1.001
    assert out["jain_index"] > 0.95
    drain_s = BDP_PACKETS * 1222 / RATE_BYTES_PER_S
    for f in out["flows"]:
        assert 0.0 < f["queueing_delay_s"] <= drain_s


def test_a_late_flow_is_measured_over_its_own_active_time():
    """A flow starting at 5 s of a 10 s run gets goodput over 5 s, not 10."""
    flows = [FlowSpec("newreno", 0.0, duration_s=10.0), FlowSpec("newreno", 5.0, duration_s=5.0)]
    out = run_flows(_path(queue_packets=BDP_PACKETS), TCP, flows)
    late = out["flows"][1]
    assert late["goodput_bytes_per_s"] == pytest.approx(late["delivered_bytes"] / 5.0)
    assert late["delivered_bytes"] > 0


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"size_bytes": 10, "duration_s": 1.0},
        {"duration_s": 0.0},
        {"start_s": -1, "size_bytes": 1},
    ],
)
def test_flow_spec_needs_one_of_size_and_duration(kw):
    """A flow with neither or both of size and duration, or a bad value, is refused."""
    with pytest.raises(SimulationError):
        FlowSpec("cubic", **kw)


def test_series_holds_each_senders_window_and_bbrs_model():
    """series: per-flow cwnd, flight and RTT; BBR's bandwidth estimate, never above the link."""
    flows = [FlowSpec("cubic", 0.0, duration_s=3.0), FlowSpec("bbr", 0.0, duration_s=3.0)]
    s = run_flows(_path(queue_packets=BDP_PACKETS), TCP, flows, series=True)["series"]
    n = len(s["time_s"])
    for key in ("cwnd_bytes", "in_flight_bytes", "srtt_s", "btlbw_bytes_per_s", "min_rtt_s"):
        assert [len(col) for col in s[key]] == [n, n]
    assert s["cwnd_bytes"][0][0] == 10 * 1168  # IW 10 at t = 0
    assert all(v is None for v in s["btlbw_bytes_per_s"][0])  # CUBIC has no such model
    assert all(v is None for v in s["pacing_bytes_per_s"][0])
    assert 0 < max(s["btlbw_bytes_per_s"][1]) <= PAYLOAD_RATE * 1.001  # never above the link
    assert min(v for v in s["min_rtt_s"][1] if v is not None) >= RTT_S
    assert max(s["srtt_s"][0][-5:]) > RTT_S


def test_series_leaves_out_the_senders_state_past_sixteen_flows():
    """Memory stays bounded: 17 flows get delivered bytes in the series, no sender state."""
    flows = [FlowSpec("cubic", 0.0, duration_s=0.3) for _ in range(17)]
    s = run_flows(_path(queue_packets=BDP_PACKETS), TCP, flows, series=True)["series"]
    assert len(s["delivered_bytes"]) == 17
    assert "cwnd_bytes" not in s
