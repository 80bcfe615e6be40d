"""A request beside a download on one session (issue 32): the client's direction has
carried only ACKs, so its first flight starts from the download's delivery rate rather
than as a new session's — and on a path whose way up is slower, that guess costs no more
than a remembered path that changed."""

from __future__ import annotations

import pytest

from tierwise.sim.relay import Net, OneWayPath, payload

DOWN_RATE = 100e6 / 8
UP_BYTES, ANSWER = 354_640, 1000


def _beside_download(up_rate: float, seed: int = 1) -> tuple[float, Net]:
    """A 354,640 B request sent 2 s into a 100 MB download on the same session (the lab's
    `--beside-bulk`): its time over its floor."""
    net = Net(
        OneWayPath(rate_bytes_per_s=up_rate), OneWayPath(rate_bytes_per_s=DOWN_RATE), seed=seed
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
    assert client.rate.unmeasured  # only ACKs went up so far
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
