"""A request beside a download on one session (issue 32): the client's direction has
carried only ACKs, so its first flight starts from the download's delivery rate rather
than as a new session's — and on a path whose way up is slower, that guess costs no more
than a remembered path that changed."""

from __future__ import annotations

import pytest

from tierwise.proto.relay import RelayConfig
from tierwise.proto.relay.rate import DRAIN_GAIN, INTERACTIVE_CWND_PACKETS, RateSample
from tierwise.sim.relay import Net, OneWayPath, all_done, payload, request_response

DOWN_RATE = 100e6 / 8
UP_BYTES, ANSWER = 354_640, 1000


def _beside_download(up_rate: float, seed: int = 1, probe: int = 0) -> tuple[float, Net]:
    """A 354,640 B request sent 2 s into a 100 MB download on the same session (the lab's
    `--beside-bulk`): its time over its floor. ``probe``: the client's opening rate probe
    (0: none, so the way up is measured by nothing but the guess from the way back)."""
    net = Net(
        OneWayPath(rate_bytes_per_s=up_rate),
        OneWayPath(rate_bytes_per_s=DOWN_RATE),
        seed=seed,
        config=RelayConfig(open_probe_packets=probe),
    )
    net.run(5, lambda: net.client.established)
    client = net.client
    bulk = client.open_stream(priority=0)
    client.send(bulk, b"GET", end_stream=True)
    big, answer = payload("bulk", 100_000_000), payload("down", ANSWER)

    def serve(sid: int, data: bytes) -> None:
        net.gateway.send(sid, big if sid == bulk else answer, end_stream=True)

    net.on_gateway_stream = serve
    net.run(net.now + 2.0)
    assert client.rate.unmeasured == (probe == 0)  # only ACKs went up (and the probe)
    sid = client.open_stream(priority=0)
    start = net.now
    client.send(sid, payload("up", UP_BYTES), end_stream=True)
    net.run(start + 20, lambda: sid in net.finished["client"])
    assert bytes(net.received["client"].pop(sid)) == answer
    assert bytes(net.received["gateway"].pop(sid)) == payload("up", UP_BYTES)
    floor = 0.2 + UP_BYTES / up_rate + ANSWER / DOWN_RATE
    return (net.now - start) / floor, net


def test_a_request_beside_a_download_starts_from_its_rate() -> None:
    """Symmetric 100 Mbit/s: the request is at its floor (2.68 × before: a new session's
    start-up in the direction the download left unmeasured)."""
    ratio, net = _beside_download(DOWN_RATE)
    assert ratio <= 1.05
    assert net.client.prior_state in ("in use", "held")


@pytest.mark.parametrize("share", [0.5, 0.1])
def test_a_slower_way_up_costs_at_most_the_blind_budget(share: float) -> None:
    """The way up carries half or a tenth of the download's rate: what the guess from the
    way back loses is bounded by its blind budget (a remembered path's), and the request
    ends within a new session's time (its two round trips) plus one."""
    ratio, net = _beside_download(DOWN_RATE * share)
    assert net.client.prior is not None
    assert net.up.dropped <= net.client.prior.blind_bytes / 1350
    floor = 0.2 + UP_BYTES / (DOWN_RATE * share)
    assert ratio * floor <= floor + 3 * 0.2


@pytest.mark.parametrize("share", [1.0, 0.5, 0.1])
def test_an_opening_probe_measured_the_way_up_already(share: float) -> None:
    """With the client's opening probe (the default) the way up was timed before the
    download began: the request starts from its own path's rate, with no guess from the
    way back to drop, and loses nothing on a slower way up (1.01 / 1.02 / 1.05 × the
    floor; the guess from the way back, without the probe: 1.01 / 1.02 / 1.45)."""
    ratio, net = _beside_download(DOWN_RATE * share, probe=32)
    assert net.client.prior_state == "none"
    assert ratio <= 1.1
    assert net.up.dropped == 0


LAB_QUEUE_S = 0.12  # the lab emulator's 1.5 MB queue at 100 Mbit/s


def _warm_then_beside(reps: int, over: float = 1.0) -> tuple[list[float], Net]:
    """A session warmed by three requests (both directions measured), then ``reps`` times a
    100 MB download on a new stream and, 2 s into it, the 354,640 B request: its times
    over its floor. ``over`` > 1: every round the gateway also folds in an ACK train that
    reads that much above the path (the lab's busy host), at the RTT it sees and no faster
    than it is sending (``_delivery_rate``'s bound)."""
    path = {"rate_bytes_per_s": DOWN_RATE, "queue_s": LAB_QUEUE_S}
    net = Net(OneWayPath(**path), OneWayPath(**path), seed=1)
    net.run(5, lambda: net.client.established)
    warm = request_response(net, [(UP_BYTES, ANSWER)] * 3)
    net.run(net.now + 30, all_done(net, warm))
    gateway = net.gateway
    if over > 1:
        end_round = gateway.rate.on_round_end

        def noisy_round(*args: object, **kwargs: bool) -> None:
            end_round(*args, **kwargs)  # type: ignore[arg-type]
            if not gateway.rate.startup:
                rate = min(over * DOWN_RATE, gateway.rate.pacing_rate_bytes_per_s)
                sample = RateSample(rate, gateway._rtt.latest_s, False)
                gateway.rate.on_sample(sample, net.now)

        gateway.rate.on_round_end = noisy_round  # type: ignore[method-assign]
    big, answer = payload("bulk", 100_000_000), payload("down", ANSWER)
    ratios = []
    for _ in range(reps):
        bulk = net.client.open_stream()
        net.client.send(bulk, b"GET", end_stream=True)
        net.on_gateway_stream = lambda sid, data, bulk=bulk: gateway.send(
            sid, big if sid == bulk else answer, end_stream=True
        )
        net.run(net.now + 2.0)
        sid, start = net.client.open_stream(), net.now
        net.client.send(sid, payload("up", UP_BYTES), end_stream=True)
        net.run(start + 20, lambda sid=sid: sid in net.finished["client"])
        assert bytes(net.received["client"].pop(sid)) == answer
        ratios.append((net.now - start) / (0.2 + UP_BYTES / DOWN_RATE + ANSWER / DOWN_RATE))
        net.client.reset(bulk)  # the lab closes its download after each request
        net.run(net.now + 0.5)
        net.received["client"].pop(bulk, None)
    return ratios, net


def test_a_request_beside_a_warm_download_meets_no_queue() -> None:
    """The lab's layout on a warm session: each request 2 s into a download is at its floor
    (the gateway drains the download's queue when the request's first bytes arrive; before,
    the third took 1.195 × behind a 52 ms queue the brake let stand)."""
    ratios, net = _warm_then_beside(3)
    assert max(ratios) <= 1.03, ratios
    assert net.down.dropped == 0


@pytest.mark.parametrize("over", [1.2, 1.4])
def test_ack_trains_that_read_high_leave_no_standing_queue(over: float) -> None:
    """ACK trains that read 1.2 or 1.4 × the path every round (the lab's busy host): a brake
    that does not empty the queue takes the round's delivery rate, samples through the
    queue read no more than it, and the request is drained for (before: medians 1.31 and
    1.60 ×, the 120 ms queue full, 4,420 and 8,665 tail drops; now 1.12 and 1.01, none)."""
    ratios, net = _warm_then_beside(3, over=over)
    assert sorted(ratios)[1] <= 1.15, ratios
    assert net.down.dropped == 0


def test_a_request_arriving_beside_a_download_drains_it_and_goes_first() -> None:
    """The gateway pumping a download: the request's first bytes start its drain (paced at
    DRAIN_GAIN of its estimate, window one BDP and a few packets) and the answer leaves
    ahead of every bulk byte still waiting; the download's own first megabyte, a small
    stream with no other bulk beside it, started none."""
    path = {"rate_bytes_per_s": DOWN_RATE, "queue_s": LAB_QUEUE_S}
    net = Net(OneWayPath(**path), OneWayPath(**path), seed=1)
    net.run(5, lambda: net.client.established)
    warm = request_response(net, [(UP_BYTES, ANSWER)])
    net.run(net.now + 30, all_done(net, warm))
    gateway, rate = net.gateway, net.gateway.rate
    bulk = net.client.open_stream()
    net.client.send(bulk, b"GET", end_stream=True)
    net.on_gateway_stream = lambda sid, data: gateway.send(
        sid, payload("bulk", 30_000_000) if sid == bulk else payload("down", ANSWER), True
    )
    net.run(net.now + 2.0)
    assert not rate.interactive and not rate.startup
    estimate = rate.btl_bw_bytes_per_s
    sid = net.client.open_stream()
    net.client.send(sid, payload("up", 2000), end_stream=True)
    net.run(net.now + 1, lambda: sid in net.received["gateway"])
    assert rate.draining and rate.interactive
    assert rate.pacing_rate_bytes_per_s == pytest.approx(DRAIN_GAIN * estimate)
    assert rate.cwnd_bytes <= estimate * rate.min_rtt_s + INTERACTIVE_CWND_PACKETS * 1400
    first_sent: list[int] = []  # the answer's bytes sent by the first send after it is written
    send_due = gateway.datagrams_to_send

    def watched(now: float) -> list:
        out = send_due(now)
        answer = gateway._streams.get(sid)
        if out and not first_sent and answer is not None and answer.send.end:
            first_sent.append(answer.send.next_offset)
        return out

    gateway.datagrams_to_send = watched  # type: ignore[method-assign]
    net.run(net.now + 1, lambda: sid in net.finished["client"])
    assert bytes(net.received["client"][sid]) == payload("down", ANSWER)
    assert first_sent == [ANSWER]  # ahead of the bulk bytes waiting for the pacer
