"""The bulk sender's queue at the bottleneck (proto/relay/rate.py, issue 32): a brake that
does not drain it corrects the estimate, and an interactive stream beside bulk drains it
and keeps it out. Synthetic rounds into one RateController, exact numbers."""

from __future__ import annotations

import pytest

from tierwise.proto.relay.rate import (
    BRAKE_GAIN,
    DRAIN_GAIN,
    INTERACTIVE_CWND_PACKETS,
    INTERACTIVE_ROUNDS,
    STANDING_ROUNDS,
    RateController,
    RateSample,
)

MSS = 1350
PATH = 12.5e6  # 100 Mbit/s
RTT = 0.2


def _steady(estimate: float) -> tuple[RateController, list[float]]:
    """Past start-up at ``estimate`` with a 200 ms minimum RTT; ``clock`` = [now, delivered]."""
    rate = RateController(MSS)
    rate.on_sample(RateSample(estimate, RTT, app_limited=False, queued=True), now=1.0)
    assert not rate.startup
    clock = [1.0, 0.0]
    rate.on_round_end(None, int(clock[1]), clock[0])
    return rate, clock


def _round(rate: RateController, clock: list[float], rtt: float, delivered_rate: float) -> None:
    """One round trip whose ACKs show ``rtt`` and deliver at ``delivered_rate``."""
    clock[0] += rtt
    clock[1] += delivered_rate * rtt
    rate.on_sample(RateSample(delivered_rate, rtt, app_limited=False), now=clock[0])
    rate.on_round_end(None, int(clock[1]), clock[0])


def test_a_brake_that_leaves_the_queue_standing_takes_the_rounds_delivery_rate() -> None:
    """Estimate 1.4 × the path: the brake's 0.75 × still overfills it and the queue stands;
    after STANDING_ROUNDS braked rounds the estimate is what the rounds delivered."""
    rate, clock = _steady(1.4 * PATH)
    for _ in range(STANDING_ROUNDS):
        assert rate.btl_bw_bytes_per_s == pytest.approx(1.4 * PATH)
        _round(rate, clock, RTT + 0.1, PATH)  # a 100 ms queue, the bottleneck busy
        assert rate.gain == BRAKE_GAIN
    assert rate.btl_bw_bytes_per_s == pytest.approx(PATH)


def test_samples_through_a_standing_queue_read_no_more_than_it_delivers() -> None:
    """Once a queued round has been timed, a sample whose RTT shows a queue is held to that
    round's rate; one that meets no queue (a faster path) still raises the estimate."""
    rate, clock = _steady(1.4 * PATH)
    for _ in range(STANDING_ROUNDS):
        _round(rate, clock, RTT + 0.1, PATH)
    rate.on_sample(RateSample(1.4 * PATH, RTT + 0.1, app_limited=False), now=clock[0])
    assert rate.btl_bw_bytes_per_s == pytest.approx(PATH)
    rate.on_sample(RateSample(1.2 * PATH, RTT, app_limited=False), now=clock[0])
    assert rate.btl_bw_bytes_per_s == pytest.approx(1.2 * PATH)


def test_a_brake_that_drains_keeps_the_estimate() -> None:
    """A probe's queue that the brake empties within a round changes nothing."""
    rate, clock = _steady(PATH)
    _round(rate, clock, RTT + 0.06, PATH)
    _round(rate, clock, RTT, PATH)
    _round(rate, clock, RTT + 0.06, PATH)
    assert rate.btl_bw_bytes_per_s == pytest.approx(PATH)


def test_an_interactive_stream_drains_then_holds_one_bdp() -> None:
    """on_interactive: a round at DRAIN_GAIN, then no gain above 1 and a window of one BDP
    plus INTERACTIVE_CWND_PACKETS for INTERACTIVE_ROUNDS rounds after the last sign; then
    bulk's window (2 BDP) and gain cycle again."""
    rate, clock = _steady(PATH)
    bulk_window = rate.cwnd_bytes
    assert bulk_window == pytest.approx(2 * PATH * RTT)
    rate.on_interactive()
    assert rate.draining and rate.gain == DRAIN_GAIN
    assert rate.pacing_rate_bytes_per_s == pytest.approx(DRAIN_GAIN * PATH)
    assert rate.cwnd_bytes == pytest.approx(PATH * RTT + INTERACTIVE_CWND_PACKETS * MSS)
    _round(rate, clock, RTT, PATH)
    assert not rate.draining and rate.interactive
    gains = []
    for _ in range(INTERACTIVE_ROUNDS - 1):
        gains.append(rate.gain)
        assert rate.cwnd_bytes == pytest.approx(PATH * RTT + INTERACTIVE_CWND_PACKETS * MSS)
        _round(rate, clock, RTT, PATH)
    assert max(gains) <= 1.0
    rate.on_interactive()  # a further sign: held on, not drained again
    assert not rate.draining
    for _ in range(INTERACTIVE_ROUNDS + 1):
        _round(rate, clock, RTT, PATH)
    assert not rate.interactive
    assert rate.cwnd_bytes == pytest.approx(bulk_window)


def test_an_interactive_stream_beside_bulk_brakes_at_a_small_queue() -> None:
    """While interactive, a queue of 5 % of the RTT (plus 2 ms) brakes; bulk alone lets 25 %."""
    rate, clock = _steady(PATH)
    _round(rate, clock, RTT * 1.1, PATH)
    assert rate.gain != BRAKE_GAIN
    rate.on_interactive()
    _round(rate, clock, RTT * 1.1, PATH)
    assert rate.gain == BRAKE_GAIN


def test_start_up_is_not_drained() -> None:
    """In start-up the window bounds the queue: no drain, the start-up gain stays."""
    rate = RateController(MSS)
    rate.on_sample(RateSample(PATH / 4, RTT, app_limited=False), now=1.0)
    assert rate.startup
    rate.on_interactive()
    assert not rate.draining and rate.gain == 2.0


@pytest.mark.parametrize("delay", [0.0, 0.06])
def test_a_late_acks_delay_is_no_queue(delay: float) -> None:
    """A round whose ACKs came 60 ms late and said so (a peer that read its flight late)
    does not brake; the same RTT with no delay reported does (60 ms over 200 ms is past the
    brake's 25 % + 2 ms). The minimum RTT takes the sample as measured (RFC 9002 §5.3)."""
    rate, clock = _steady(PATH)
    clock[0] += RTT + 0.06
    clock[1] += PATH * RTT
    sample = RateSample(PATH, RTT + 0.06, app_limited=False, ack_delay_s=delay)
    rate.on_sample(sample, now=clock[0])
    rate.on_round_end(None, int(clock[1]), clock[0])
    assert (rate.gain == BRAKE_GAIN) is (delay == 0.0)
    assert rate.min_rtt_s == RTT


def test_an_ack_delay_larger_than_the_rtt_allows_is_not_taken_off() -> None:
    """A reported delay that would put the RTT under the minimum is ignored whole, as RFC
    9002 §5.3 does (a peer's clock or report that is off): the queue still brakes."""
    rate, clock = _steady(PATH)
    clock[0] += RTT + 0.06
    clock[1] += PATH * RTT
    sample = RateSample(PATH, RTT + 0.06, app_limited=False, ack_delay_s=0.07)
    rate.on_sample(sample, now=clock[0])
    rate.on_round_end(None, int(clock[1]), clock[0])
    assert rate.gain == BRAKE_GAIN
