"""HyStart in CUBIC: the ACK-train and delay tests as ns-3 3.37's TcpCubic runs them.

Sans-IO with a synthetic clock (each ACK's time, RTT and the flight it leaves), then on
the simulated 20 Mbit/s, 100 ms path with a 5-BDP queue, where standard slow start
overshoots and HyStart leaves it before the queue overflows.
"""

from __future__ import annotations

import math

import pytest

from tierwise.proto import CONTROLLERS
from tierwise.proto.congestion import (
    CUBIC_RAMP_ACKS_PER_SEGMENT,
    HYSTART_ACK_DELTA_S,
    HYSTART_LOW_WINDOW_SEGMENTS,
    HYSTART_MIN_SAMPLES,
    Cubic,
    CubicHyStart,
    HyStart,
)
from tierwise.sim import PathSpec, TcpSpec, run_request

MSS = 1000
BIG_FLIGHT = 10**9  # keeps the round open: nothing sent after it began is acknowledged


def _train(hs: HyStart, start_s: float, spacing_s: float, n: int, rtt: float, cwnd: float):
    """``n`` ACKs ``spacing_s`` apart from ``start_s``; the index of the first that exits."""
    for i in range(n):
        if hs.on_ack(MSS, rtt, start_s + i * spacing_s, BIG_FLIGHT, cwnd, math.inf):
            return i
    return None


def test_ack_train_longer_than_the_minimum_delay_ends_slow_start():
    """ACKs ≤ 2 ms apart for more than delay_min since the round began: exit, once."""
    hs = HyStart(MSS)
    cwnd = 20.0 * MSS
    # First ACK: sets delay_min = 0.1 s and begins the round at t = 1 s.
    assert not hs.on_ack(MSS, 0.1, 1.0, BIG_FLIGHT, cwnd, math.inf)
    # 0.5 ms apart: the train passes 0.1 s after the round began at the 201st ACK.
    assert _train(hs, 1.0005, 0.0005, 400, 0.1, cwnd) == 200
    assert (hs.found, hs.exits) == (True, 1)
    assert not hs.on_ack(MSS, 0.1, 1.3, BIG_FLIGHT, cwnd, math.inf)
    assert hs.exits == 1


def test_a_gap_longer_than_ack_delta_breaks_the_train():
    """ACKs 2.5 ms apart never make a train, however long the round lasts."""
    hs = HyStart(MSS)
    assert not hs.on_ack(MSS, 0.1, 1.0, BIG_FLIGHT, 20.0 * MSS, math.inf)
    spacing = HYSTART_ACK_DELTA_S * 1.25
    assert _train(hs, 1.0 + spacing, spacing, 200, 0.1, 20.0 * MSS) is None


def test_rtt_growth_beyond_twice_the_minimum_ends_slow_start():
    """Delay test: the least of a round's first 8 RTTs above delay_min + clamp(delay_min)."""
    for rtt, exits in ((0.199, False), (0.201, True)):
        hs = HyStart(MSS)
        cwnd = 20.0 * MSS
        assert not hs.on_ack(MSS, 0.1, 0.0, 0, cwnd, math.inf)  # delay_min 0.1 s
        # ACKs 10 ms apart (no train) with the larger RTT. The first ends the round
        # (nothing was in flight) after its own sample counted for that round (ns-3
        # runs PktsAcked before IncreaseWindow); the next 8 fill the new round's
        # samples, and the one after them is the first that can fire.
        got = _train(hs, 0.01, 0.01, 20, rtt, cwnd)
        assert got == (1 + HYSTART_MIN_SAMPLES if exits else None)


def test_delay_threshold_is_at_least_four_milliseconds():
    """With a 1 ms path the threshold is the 4 ms floor: an RTT of 5.1 ms fires, 4.7 ms not."""
    for rtt, exits in ((0.0047, False), (0.0051, True)):
        hs = HyStart(MSS)
        assert not hs.on_ack(MSS, 0.001, 0.0, 0, 20.0 * MSS, math.inf)
        assert (_train(hs, 0.01, 0.01, 20, rtt, 20.0 * MSS) is not None) is exits


def test_below_sixteen_segments_hystart_waits():
    """Neither test runs while cwnd is under HyStartLowWindow (16 segments)."""
    hs = HyStart(MSS)
    cwnd = (HYSTART_LOW_WINDOW_SEGMENTS - 1) * MSS
    assert not hs.on_ack(MSS, 0.1, 1.0, BIG_FLIGHT, cwnd, math.inf)
    assert _train(hs, 1.0005, 0.0005, 400, 0.3, cwnd) is None


def test_each_round_restarts_the_train():
    """A round ends when more than the bytes in flight at its start are acknowledged:
    the train is timed from the new round's first ACK."""
    hs = HyStart(MSS)
    cwnd = 20.0 * MSS
    assert not hs.on_ack(MSS, 0.1, 0.0, 0, cwnd, math.inf)  # round begins at 0, ends at once
    # 400 ACKs 0.5 ms apart (200 ms of train), each round 50 ACKs (25 ms) long: the
    # flight at a round's start is 49 segments.
    for i in range(400):
        now = 0.0005 * (i + 1)
        flight = 49 * MSS - (i % 50) * MSS
        assert not hs.on_ack(MSS, 0.1, now, flight, cwnd, math.inf), i


def test_rto_forgets_the_minimum_delay_and_arms_hystart_again():
    """ns-3 CongestionStateSet(CA_LOSS): delay_min and the found flag are reset."""
    hs = HyStart(MSS)
    assert not hs.on_ack(MSS, 0.1, 1.0, BIG_FLIGHT, 20.0 * MSS, math.inf)
    assert _train(hs, 1.0005, 0.0005, 400, 0.1, 20.0 * MSS) is not None
    hs.on_rto(2.0, BIG_FLIGHT)
    assert (hs.found, hs.delay_min) == (False, math.inf)
    assert _train(hs, 2.0005, 0.0005, 400, 0.05, 20.0 * MSS) is not None
    assert hs.exits == 2


def test_cubic_hystart_runs_hystart_and_cubic_does_not():
    """On exit ssthresh becomes cwnd and the window grows by CUBIC's rule, not by acked."""
    assert CONTROLLERS["cubic-hystart"] is CubicHyStart and CONTROLLERS["cubic"] is Cubic
    plain = Cubic(mss=MSS, initial_window=20)
    assert plain.hystart is None
    cc = CubicHyStart(mss=MSS, initial_window=20)
    assert cc.hystart is not None
    for c in (cc, plain):
        for i in range(400):
            c.on_ack(
                acked=MSS, rtt=0.1, now=1.0 + i * 0.0005, in_flight=BIG_FLIGHT, delivery_rate=None
            )
    assert plain.ssthresh == math.inf and plain.cwnd == 420 * MSS
    assert cc.ssthresh == 220 * MSS  # 20 + the 200 ACKs before the exit
    assert 220 * MSS < cc.cwnd < 240 * MSS


def test_until_a_loss_sets_w_max_cubic_hystart_grows_five_percent_per_rtt():
    """After HyStart's exit: one segment per 20 acknowledged (Linux/ns-3's clamp); after
    a loss, the cubic curve alone (at W_max it barely moves)."""
    cc = CubicHyStart(mss=MSS, initial_window=200)
    cc.ssthresh = cc.cwnd  # as HyStart's exit leaves it
    for i in range(200):
        cc.on_ack(acked=MSS, rtt=0.1, now=i * 0.0005, in_flight=0, delivery_rate=None)
    assert cc.cwnd == pytest.approx((200 + 200 / CUBIC_RAMP_ACKS_PER_SEGMENT) * MSS)
    cc.on_congestion(now=0.2, in_flight=int(cc.cwnd))
    w = cc.cwnd
    for i in range(200):
        cc.on_ack(acked=MSS, rtt=0.1, now=0.2 + i * 0.0005, in_flight=0, delivery_rate=None)
    assert cc.cwnd - w < 0.5 * 200 / CUBIC_RAMP_ACKS_PER_SEGMENT * MSS


@pytest.mark.parametrize(("cc", "retransmits"), [("cubic-hystart", False), ("cubic", True)])
def test_hystart_leaves_slow_start_before_a_five_bdp_queue_overflows(cc, retransmits):
    """20 Mbit/s, 100 ms, 1,025-packet queue, 10 MB: HyStart exits at about one BDP of
    queue (its ACK train) and nothing is lost; standard slow start doubles into the
    queue until it overflows."""
    path = PathSpec(20e6 / 8, 20e6 / 8, 0.1, queue_packets=1025)
    tcp = TcpSpec(cc=cc, mss=1168, header=54, ack_bytes=54, initial_window=10)
    r = run_request(path, tcp, 10_000_000, 0, 0.0, seed=1)
    assert (r.up["retransmissions"] > 0) is retransmits
