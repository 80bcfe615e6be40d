"""An idle relay session stays open: the client's keep-alive, with and without past traffic."""

from __future__ import annotations

import pytest

from tierwise.proto.relay import RelayConfig
from tierwise.sim.relay import Net, OneWayPath, all_done, request_response


def _lossy(seed: int, loss: float) -> Net:
    return Net(OneWayPath(delay_s=0.1, loss=loss), OneWayPath(delay_s=0.1, loss=loss), seed=seed)


def _either_closed(net: Net):  # type: ignore[no-untyped-def]
    return lambda: "closed" in (net.client.state.value, net.gateway.state.value)


@pytest.mark.parametrize("loss", [0.0, 0.14])
def test_session_that_never_carried_a_stream_survives_idle(loss: float) -> None:
    """A fresh session idle for 4 × the idle timeout is kept by the keep-alive, then works."""
    net = _lossy(3, loss)
    net.run(3.0, stop=lambda: net.client.established)
    assert net.client.established
    idle_s = 4 * net.client.config.idle_timeout_s
    net.run(net.now + idle_s, stop=_either_closed(net))
    assert net.client.state.value == net.gateway.state.value == "established"
    expected = request_response(net, [(20_000, 1_000)])
    net.run(net.now + 10, stop=all_done(net, expected))
    assert all_done(net, expected)()


def test_idle_session_survives_loss_after_a_request() -> None:
    """At 14 % loss each way, sessions idle 300 s after a request are never ended (5 seeds)."""
    for seed in range(5):
        net = _lossy(seed, 0.14)
        expected = request_response(net, [(50_000, 1_000)])
        net.run(20.0, stop=all_done(net, expected))
        assert all_done(net, expected)()
        net.run(net.now + 300.0, stop=_either_closed(net))
        assert "closed" not in (net.client.state.value, net.gateway.state.value), seed


def test_dead_peer_rule_leaves_an_idle_lossy_session_alone() -> None:
    """dead_peer_s = 1 s (the client's): at 14 % loss each way, keep-alive PINGs whose answers
    are lost do not end an idle session (seed 15 ended after 7.6 s idle before the fix)."""
    config = RelayConfig(dead_peer_s=1.0)
    for seed in range(12, 18):
        net = Net(OneWayPath(delay_s=0.1, loss=0.14), OneWayPath(delay_s=0.1, loss=0.14), seed=seed,
                  config=config)  # fmt: skip
        expected = request_response(net, [(354_640, 1_000)])
        net.run(20.0, stop=all_done(net, expected))
        assert all_done(net, expected)()
        net.run(net.now + 60.0, stop=_either_closed(net))
        assert "closed" not in (net.client.state.value, net.gateway.state.value), seed
