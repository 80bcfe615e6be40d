"""Small, latency-bound writes (a model's tokens) protected as such: each sized for a
residual of SMALL_WRITE_RESIDUAL, and a token stream's lateness measured in the pair."""

from __future__ import annotations

import numpy as np
import pytest

from tierwise.proto.relay.connection import SMALL_WRITE_RESIDUAL
from tierwise.proto.relay.fec import repair_symbols_needed
from tierwise.sim.relay import Net, OneWayPath, all_done, request_response

TOKEN = b"data: {'i': 000, 'content': 'tok '}\n\n".ljust(64, b" ")  # 64 bytes per event


def _token_stream(loss: float, tokens: int, seed: int = 9) -> tuple[np.ndarray, Net]:
    """``tokens`` events of 64 B from the gateway every 20 ms (50 tokens/s) over 200 ms with
    ``loss`` each way, on a session that has measured the loss each way (a request and a
    300 kB answer first, as a user's session would have): each token's arrival at the
    client less its write plus the one-way delay (s)."""
    net = Net(OneWayPath(loss=loss), OneWayPath(loss=loss), seed=seed)
    net.run(60, lambda: net.client.established)
    expected = request_response(net, [(354_640, 300_000)])
    net.run(net.now + 30, all_done(net, expected))
    net.on_gateway_stream = None
    sid = net.client.open_stream()
    net.client.send(sid, b"GET /v1/stream")
    net.run(net.now + 0.5)
    assert net.received["gateway"].get(sid) == bytearray(b"GET /v1/stream")
    sent: list[float] = []
    arrived: list[float] = []

    def note() -> bool:
        have = len(net.received["client"].get(sid, b"")) // len(TOKEN)
        while len(arrived) < have:
            arrived.append(net.now)
        return False

    start = net.now
    for i in range(tokens):
        net.run(start + 0.02 * i, note)
        sent.append(net.now)
        net.gateway.send(sid, TOKEN)
    net.run(net.now + 5, lambda: note() or len(arrived) == tokens)
    assert len(arrived) == tokens
    return np.asarray(arrived) - (np.asarray(sent) + 0.1), net


@pytest.mark.parametrize(
    ("loss", "late_100ms", "late_500ms"), [(0.036, 0.001, 0.001), (0.14, 0.01, 0.001)]
)
def test_a_token_stream_meets_the_lateness_goals(
    loss: float, late_100ms: float, late_500ms: float
) -> None:
    """Issue 32's goals in the pair, 2,000 tokens: at 14 % ≤ 1 % of tokens > 100 ms late and
    ≤ 0.1 % > 500 ms; at 3.6 % ≤ 0.1 % > 100 ms. Lateness is measured per token."""
    lateness, net = _token_stream(loss, 2000)
    assert np.mean(lateness > 0.1) <= late_100ms
    assert np.mean(lateness > 0.5) <= late_500ms
    assert np.median(lateness) < 0.01  # a token is not held back to fill a block
    assert net.client.stats.fec_recovered > 0  # losses were repaired, not waited for


def test_a_lone_small_write_gets_repairs_for_the_residual() -> None:
    """At 14 % measured loss a one-datagram write the sender then idles after gets the
    repairs of SMALL_WRITE_RESIDUAL (4), not of the request target 0.999 (3)."""
    loss = 0.14 + (0.14 * 0.86 / 512) ** 0.5
    assert repair_symbols_needed(1, loss, 0.999) == 3
    assert repair_symbols_needed(1, loss, 1 - SMALL_WRITE_RESIDUAL) == 4
    _, net = _token_stream(0.14, 1)
    before = net.gateway.stats.repair_packets_sent
    sid = max(net.received["client"])
    net.gateway.send(sid, TOKEN)
    net.run(net.now + 0.001)
    measured = net.gateway.peer_loss
    measured += (measured * (1 - measured) / 512) ** 0.5
    sent = net.gateway.stats.repair_packets_sent - before
    assert sent == repair_symbols_needed(1, measured, 1 - SMALL_WRITE_RESIDUAL)
    # more than the request target's: +1 at 14 %, +2 at the 17 % this seed measures
    # since the DATA header grew (wire version 2: other packets, other loss draws)
    assert sent > repair_symbols_needed(1, measured, 0.999)
