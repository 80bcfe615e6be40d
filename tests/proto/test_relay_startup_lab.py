"""Start-up as the lab's busy host feeds and times it (proto/relay, issue 32): a flight the
application fed in pieces still times the path, a train's ACKs bunched on the way back
read no faster than the peer's arrivals, and a policer's answer to such a start-up is
judged at once. Synthetic time, exact inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.proto.test_relay_realtime import CLIENT, GATEWAY, established
from tierwise.proto.relay.police import PolicingDetector
from tierwise.proto.relay.rate import STARTUP_GAIN, RateController, RateSample
from tierwise.sim.link import Policer

MSS = 1350
RTT_S = 0.1


def test_a_train_the_application_fed_in_pieces_ends_the_unpaced_start() -> None:
    """A gateway reading its service's socket 64 kB at a time sends its first flight in
    pieces, each packet app-limited. Its ACK train still times what the path carried at
    least: the next flight is paced at the start-up gain of it, not sent unpaced (in the
    lab 726 datagrams left unpaced at the link's rate into a 20 Mbit/s policer, and 4,366
    in 150 ms into a 25 MB/s path's 1.5 MB queue)."""
    rate = RateController(MSS)
    rate.on_sample(RateSample(5e4, RTT_S, app_limited=True), now=1.0)  # a small exchange
    assert math.isinf(rate.pacing_rate_bytes_per_s) and rate.first_flight
    rate.on_sample(RateSample(4.6e6, RTT_S, app_limited=True, train=True), now=1.1)
    assert rate.startup and not rate.first_flight
    assert rate.pacing_rate_bytes_per_s == pytest.approx(STARTUP_GAIN * 4.6e6)


def _first_flight_read_in_batches(first_read_late_s: float) -> tuple[float, float]:
    """The client's estimate after a 32-packet first flight that reaches the gateway at
    the path's rate (1,378 B per ms); the gateway reads it four datagrams at a time, the
    first batch ``first_read_late_s`` late, and acknowledges each batch when it reads it.
    Returns the estimate and the path's rate."""
    client, gateway = established()
    client.send(client.open_stream(priority=5), bytes(32 * 1300))
    flight = [d for d, _ in client.datagrams_to_send(0.2)]
    while (due := client.get_timer()) is not None and due <= 0.2 and len(flight) < 32:
        flight += [d for d, _ in client.datagrams_to_send(0.2)]
    assert len(flight) >= 32
    acks = []
    for first in range(0, 32, 4):
        arrivals = [0.25 + 0.001 * i for i in range(first, first + 4)]
        for data, at in zip(flight[first : first + 4], arrivals, strict=True):
            gateway.receive_datagram(data, CLIENT, at)
        read_s = arrivals[-1] + (first_read_late_s if first == 0 else 0.0)
        acks += [(d, read_s + 0.05) for d, _ in gateway.datagrams_to_send(read_s)]
    assert len(acks) == 8
    for data, at in acks:
        client.receive_datagram(data, GATEWAY, at)
    return client.rate.btl_bw_bytes_per_s, len(flight[1]) / 0.001


def test_acks_bunched_by_a_late_read_time_no_faster_than_the_arrivals() -> None:
    """The gateway's first read 6 ms late bunches the train's ACKs (they span 21 ms for
    27 ms of arrivals): timed by the ACK spacing alone the estimate read 1.14 × the path
    (in the lab 15.7 MB/s on a 12.5 MB/s link, and start-up paced at twice that); the
    arrivals the ACKs report (each less its delay) bound it as the sending does (BBR's
    longer of the send and ACK intervals): 0.86 ×, and 1.00 × read on time."""
    on_time, path = _first_flight_read_in_batches(0.0)
    late, _ = _first_flight_read_in_batches(0.006)
    assert 0.8 * path <= on_time <= 1.1 * path
    assert 0.8 * path <= late <= 1.1 * path


def _start_up_train(startup: bool) -> PolicingDetector:
    """A first round at five times a 20 Mbit/s policer whose 96 kB bucket is full, every
    packet app-limited (sent as the application's pieces came), acknowledged one by one."""
    ceiling = 2.5e6
    detector = PolicingDetector()
    policer = Policer(ceiling, 96_000)
    detector.on_round_start(0)
    n = round(5 * ceiling * RTT_S / MSS)
    sent = []
    for pn in range(n):
        t = pn * RTT_S / n
        sent.append((pn, t, not policer.admit(t, MSS)))
    detector.on_round_start(n)
    for pn, t, lost in sent:
        detector.on_resolved(pn, MSS, t, lost, app_limited=True, startup=startup)
    return detector


def test_a_policer_answering_an_app_limited_start_up_is_found_in_its_acks() -> None:
    """Start-up's packets are judged app-limited or not (the lab's gateway, fed 64 kB per
    read, marks each of its pieces so, and the judgement that skipped them found the
    policer a round later); past start-up an app-limited flight is not judged early (a
    request beside a download kept its first rounds' estimate)."""
    assert _start_up_train(startup=True).policed
    assert not _start_up_train(startup=False).policed


@settings(max_examples=25)
@given(loss=st.floats(0.0, 0.4), seed=st.integers(0, 2**16))
def test_random_loss_on_an_app_limited_start_up_is_not_a_policer(loss: float, seed: int) -> None:
    """Random loss up to 40 % on start-up rounds at a high rate, every packet app-limited
    and judged as it is acknowledged: no window's halves both lose 60 %."""
    rng = np.random.default_rng(seed)
    detector = PolicingDetector()
    pn = 0
    for _ in range(8):
        detector.on_round_start(pn)
        for _ in range(round(12.5e6 * RTT_S / MSS)):
            lost = bool(rng.random() < loss)
            detector.on_resolved(pn, MSS, pn * 1e-4, lost, app_limited=True, startup=True)
            pn += 1
    assert detector.detections == 0
