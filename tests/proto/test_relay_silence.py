"""A silent peer with ``silent_grace_s``: kept through a blackout, ended on proof or grace.

Sans-IO, synthetic time (:class:`~tierwise.sim.relay.Net`). The client has the deployed
client's dead-peer rule (1 s) and a grace; the gateway has the deployed gateway's idle
timeout (12 s) and no dead-peer rule.
"""

from __future__ import annotations

import pytest

from tierwise.proto.relay import (
    ConnectionTerminated,
    Event,
    PeerResponsive,
    PeerSilent,
    RelayConfig,
    RelayConnection,
    StreamDataReceived,
    StreamReset,
)
from tierwise.proto.relay.connection import SUPERSEDED_MIN_S, State
from tierwise.sim.relay import KEY, Net, OneWayPath, all_done, request_response

CLIENT = RelayConfig(dead_peer_s=1.0, silent_grace_s=15.0)
GATEWAY = RelayConfig(idle_timeout_s=12.0)
SIZES = [(1, 1_500_000), (1_500_000, 1), (300_000, 300_000), (1000, 1000), (30_000, 90_000)]


class Watched(Net):
    """A Net that also records when the client saw which session event."""

    def __init__(self, up: OneWayPath, down: OneWayPath, seed: int = 5) -> None:
        super().__init__(up, down, seed=seed, config=CLIENT)
        self.gateway = RelayConnection(KEY, is_client=False, config=GATEWAY)
        self.log: list[tuple[float, Event]] = []

    def _drain_events(self) -> None:
        for name, conn in (("client", self.client), ("gateway", self.gateway)):
            while (event := conn.next_event()) is not None:
                if name == "client" and not isinstance(event, StreamDataReceived):
                    self.log.append((self.now, event))
                if isinstance(event, StreamDataReceived):
                    buf = self.received[name].setdefault(event.stream_id, bytearray())
                    buf += event.data
                    if event.end_stream:
                        self.finished[name].add(event.stream_id)
                        if name == "gateway" and self.on_gateway_stream is not None:
                            self.on_gateway_stream(event.stream_id, bytes(buf))
                elif isinstance(event, StreamReset):
                    self.resets[name].append(event)

    def first(self, kind: type) -> float | None:
        return next((t for t, e in self.log if isinstance(e, kind)), None)


def slow_path(**kw: object) -> OneWayPath:
    return OneWayPath(delay_s=0.02, rate_bytes_per_s=1e6, **kw)  # type: ignore[arg-type]


def exact(net: Net, expected: dict[int, tuple[bytes, bytes]]) -> bool:
    return all(
        bytes(net.received["gateway"].get(sid, b"")) == up
        and bytes(net.received["client"].get(sid, b"")) == down
        for sid, (up, down) in expected.items()
    )


def test_a_five_second_blackout_is_carried_byte_exact() -> None:
    """Streams in flight both ways across a 5 s blackout: the client reports the silence
    (1–3 s in), keeps the session, hears the gateway again and every stream completes."""
    net = Watched(slow_path(blackouts=[(1.0, 6.0)]), slow_path(blackouts=[(1.0, 6.0)]))
    net.run(1.0, lambda: net.client.established)
    expected = request_response(net, SIZES)
    net.run(60.0, all_done(net, expected))
    assert exact(net, expected), f"not byte-exact by t={net.now:.2f} s"
    silent, back = net.first(PeerSilent), net.first(PeerResponsive)
    assert silent is not None and 2.0 <= silent <= 4.5, net.log  # 1–3 s into the blackout
    assert back is not None and 6.0 <= back <= 8.5, net.log  # ≤ a 2 s probe after it
    assert net.first(ConnectionTerminated) is None and net.client.established
    assert not net.client.silent and not net.resets["client"] and not net.resets["gateway"]
    assert net.now > 7.0  # the transfer really spanned the blackout


def test_without_a_grace_the_same_blackout_ends_the_session() -> None:
    """The rule before: silence ends the session (the control for the test above)."""
    net = Net(slow_path(blackouts=[(1.0, 6.0)]), slow_path(blackouts=[(1.0, 6.0)]), seed=5,
              config=RelayConfig(dead_peer_s=1.0))  # fmt: skip
    net.run(1.0, lambda: net.client.established)
    expected = request_response(net, SIZES)
    net.run(20.0, all_done(net, expected))
    assert net.client.state is State.CLOSED and not exact(net, expected)


def test_a_silent_session_waits_its_grace_then_ends() -> None:
    """A path that never returns: the session is kept, never busy-waiting, for the grace
    since the last datagram heard, then ends."""
    net = Watched(slow_path(), slow_path())
    net.run(1.0, lambda: net.client.established)
    expected = request_response(net, [(1_500_000, 1_500_000)])
    net.run(net.now + 0.3)
    for path in (net.up, net.down):
        path.blackouts.append((net.now, 1000.0))
    heard = net.now
    net.run(heard + 10.0, lambda: net.client.silent)
    assert net.client.silent
    timer = net.client.get_timer()
    assert timer is not None and timer > net.now  # no timer in the past while silent
    sent = net.client.stats.packets_sent
    net.run(heard + 14.0)
    assert net.client.state is not State.CLOSED
    assert net.client.stats.packets_sent > sent  # it kept probing
    net.run(heard + 20.0, lambda: net.client.state is State.CLOSED)
    assert net.client.state is State.CLOSED and not exact(net, expected)
    ended = net.first(ConnectionTerminated)
    assert ended is not None and ended == pytest.approx(heard + 15.0, abs=0.1)


def test_superseded_by_a_new_session_a_restarted_gateways_session_ends_soon() -> None:
    """The gateway restarted (it knows no session) and the path is back: once a new session
    is established, the silent old one is probed and, unanswered, ends within a few PTOs."""
    net = Watched(slow_path(), slow_path())
    net.run(1.0, lambda: net.client.established)
    request_response(net, [(1_500_000, 1_500_000)])
    net.run(net.now + 0.3)
    net.gateway = RelayConnection(KEY, is_client=False, config=GATEWAY)  # restarted
    net.run(net.now + 10.0, lambda: net.client.silent)
    assert net.client.silent
    net.run(net.now + 2.0)
    assert net.client.state is not State.CLOSED
    dropped = net.gateway.stats.dropped_auth
    at = net.now
    net.client.superseded(at)  # the owner's new session just reached the gateway
    net.run(at + 5.0, lambda: net.client.state is State.CLOSED)
    assert net.client.state is State.CLOSED
    # 4 probe timeouts (≈ 0.1 s each on this 40 ms path), not the 15 s grace
    assert SUPERSEDED_MIN_S <= net.now - at <= 1.0
    assert net.gateway.stats.dropped_auth > dropped  # its probes reached the new gateway
    assert net.log[-1][1].reason.endswith("after a new session reached it")  # type: ignore[attr-defined]


def test_superseded_while_the_gateway_still_holds_the_session_carries_on() -> None:
    """The blackout ended and a new session reached the gateway first: the old session's
    immediate probe is answered, so it carries its streams on byte-exact."""
    net = Watched(slow_path(), slow_path())
    net.run(1.0, lambda: net.client.established)
    expected = request_response(net, SIZES)
    net.run(net.now + 0.3)
    for path in (net.up, net.down):
        path.blackouts.append((net.now, net.now + 5.0))
    end = net.now + 5.0
    net.run(end - 0.01)
    assert net.client.silent
    net.run(end + 0.05)  # (Net.run stops at the first event past its bound)
    at = net.now
    net.client.superseded(at)  # probed at once; answered: not ended
    net.run(at + 1.0, lambda: not net.client.silent)
    responsive = net.first(PeerResponsive)
    assert responsive is not None and responsive - at < 0.5, (at, net.log)
    net.run(60.0, all_done(net, expected))
    assert exact(net, expected) and net.first(ConnectionTerminated) is None


def test_port_unreachable_ends_only_a_silent_session() -> None:
    """An ICMP port unreachable (reported by the owner) is unauthenticated: it ends a
    session that is already silent, and leaves one that is answered alone."""
    net = Watched(slow_path(), slow_path())
    net.run(1.0, lambda: net.client.established)
    expected = request_response(net, [(50_000, 50_000)])
    net.run(1.2)
    net.client.peer_unreachable("port closed")
    net.run(30.0, all_done(net, expected))
    assert exact(net, expected) and net.client.state is not State.CLOSED
    request_response(net, [(1_500_000, 1_500_000)])
    net.run(net.now + 0.3)
    for path in (net.up, net.down):
        path.blackouts.append((net.now, 1000.0))
    net.run(net.now + 10.0, lambda: net.client.silent)
    net.client.peer_unreachable("port closed")
    assert net.client.state is State.CLOSED
    ended = net.client.next_event()
    assert isinstance(ended, ConnectionTerminated) and ended.reason == "port closed"
