"""A new session's opening rate probe (proto/relay, issue 32): a client whose session is up
and idle, with nothing known of the path, times it with a train of full-size PINGs, so the
first request leaves at the measured rate instead of waiting a round trip on its own first
flight's ACKs. Synthetic time over the simulator's paths: the figures are exact."""

from __future__ import annotations

import pytest

from tierwise.proto.relay import RelayConfig
from tierwise.proto.relay.prior import PathPrior
from tierwise.sim.relay import Net, OneWayPath, all_done, request_response

UP, DOWN = 354_640, 1000
RATE = 100e6 / 8  # the lab's 100 Mbit/s
RTT = 0.2


def _path(loss: float = 0.0, rate: float = RATE, queue_s: float = 0.2) -> OneWayPath:
    return OneWayPath(delay_s=RTT / 2, rate_bytes_per_s=rate, queue_s=queue_s, loss=loss)


def _first_request(
    idle_s: float,
    probe: int = 32,
    loss: float = 0.0,
    seed: int = 3,
    rate: float = RATE,
    queue_s: float = 0.2,
    prior: bool = False,
) -> tuple[float, Net]:
    """A new session's first request, written ``idle_s`` after the handshake completed;
    its time over the floor ``RTT + (up + down) / rate``, and the net after it."""
    net = Net(
        _path(loss, rate, queue_s),
        _path(loss, rate, queue_s),
        seed=seed,
        config=RelayConfig(open_probe_packets=probe),
    )
    if prior:
        net.client.use_prior(PathPrior(min_rtt_s=RTT, rate_bytes_per_s=rate))
    net.run(60, lambda: net.client.established)
    net.run(net.now + idle_s, lambda: False)
    expected = request_response(net, [(UP, DOWN)])
    start = net.now
    net.run(start + 60, all_done(net, expected))
    for sid, (up, down) in expected.items():
        assert bytes(net.received["gateway"].pop(sid)) == up
        assert bytes(net.received["client"].pop(sid)) == down
    return (net.now - start) / (RTT + (UP + DOWN) / rate), net


def test_an_idle_new_session_sends_its_first_request_at_the_measured_rate() -> None:
    """Written a round trip and more after the handshake, the first request of a session
    that knows nothing of the path takes 1.96 × the floor without the probe (32 datagrams,
    then a round trip for their ACKs) and within 5 % of it with: the probe's ACKs timed
    the path while the session idled."""
    without, _ = _first_request(0.5, probe=0)
    with_probe, net = _first_request(0.5)
    assert without > 1.7
    assert with_probe <= 1.05
    assert net.client.rate.measured_bw_bytes_per_s == pytest.approx(RATE * 1.0, rel=0.15)


def test_the_probe_is_a_train_of_full_size_pings_sent_once() -> None:
    """32 datagrams of the session's data size, no FEC repairs for them, none again after
    the request (the path is measured): the session's cost is 43 kB, once."""
    _, net = _first_request(0.5)
    sent_before = net.client.stats.packets_sent
    _, idle_net = _first_request(0.5, probe=0)
    # the same request's packets, less the probe's and their ACKs' effect on the counts
    extra = sent_before - idle_net.client.stats.packets_sent
    assert 32 <= extra <= 34
    assert net.client.stats.repair_packets_sent == idle_net.client.stats.repair_packets_sent
    net.run(net.now + 2.0, lambda: False)  # idle again: nothing more is probed
    assert net.client.stats.packets_sent - sent_before <= 3  # ACKs and a keep-alive at most


@pytest.mark.parametrize("idle_s", [0.0, 0.05])
def test_a_request_that_comes_with_or_during_the_probe_loses_nothing(idle_s: float) -> None:
    """Written at the handshake (its own first flight times the path: no probe) or
    during the probe's flight (the probe takes no window room from it), the request takes
    no longer than without the probe, to a millisecond."""
    with_probe, _ = _first_request(idle_s)
    without, _ = _first_request(idle_s, probe=0)
    assert with_probe * (RTT + (UP + DOWN) / RATE) <= without * (RTT + (UP + DOWN) / RATE) + 1e-3


def test_a_session_that_knows_the_path_does_not_probe() -> None:
    """A remembered path (or an operator's start rate) is a measurement: no probe."""
    _, remembered = _first_request(0.5, prior=True)
    _, without = _first_request(0.5, probe=0, prior=True)
    assert remembered.client.stats.packets_sent == without.client.stats.packets_sent


def test_probes_lost_on_a_lossy_path_are_not_retransmitted_and_time_it_still() -> None:
    """At 14 % loss each way a few of the 32 PINGs are lost: nothing is sent again for
    them (no retransmitted bytes), and the request still leaves at the measured rate."""
    ratio, net = _first_request(0.5, loss=0.14, seed=5)
    _, without = _first_request(0.5, probe=0, loss=0.14, seed=5)
    assert ratio < 1.3
    assert net.client.stats.retransmitted_bytes <= without.client.stats.retransmitted_bytes
    assert net.client.rate.measured_bw_bytes_per_s > 0.5 * RATE


@pytest.mark.parametrize("queue_s", [0.02, 0.2])
def test_a_slow_path_measures_its_own_rate(queue_s: float) -> None:
    """10 Mbit/s: the train reads the slow path's rate, not the sender's, and the request
    is paced at it. Behind a 200 ms queue that takes the request from 1.39 to 1.04 × its
    floor; behind a 20 ms one the probe's burst overruns the queue as a first flight does
    (start-up there loses a third of the request's datagrams with or without the probe),
    and it costs at most its own datagrams and 2 % of the time."""
    slow = 10e6 / 8
    ratio, net = _first_request(0.5, rate=slow, queue_s=queue_s)
    without_ratio, without = _first_request(0.5, probe=0, rate=slow, queue_s=queue_s)
    assert 0.8 * slow < net.client.rate.measured_bw_bytes_per_s < 1.3 * slow
    assert net.up.dropped <= without.up.dropped + 32
    if queue_s >= 0.2:
        assert net.up.dropped == 0 and ratio <= 1.05 < without_ratio
    else:
        assert ratio <= 1.02 * without_ratio


def test_the_open_probe_setting_is_checked() -> None:
    from tierwise.errors import LocalProtocolError

    with pytest.raises(LocalProtocolError, match="open_probe_packets"):
        RelayConfig(open_probe_packets=-1)
