"""The relay's ACK policy (sans-IO, synthetic time): fewer ACKs in a bulk flight, the ACK
clock kept where the sender times the path (start-up, bursts that fit the window), and
an ACK at once after a gap."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.proto.pair import drain
from tierwise.proto.relay import RelayConfig, RelayConnection
from tierwise.sim.relay import CLIENT, Net, OneWayPath, payload


def _pair() -> tuple[RelayConnection, RelayConnection, float]:
    """An established client and gateway, nothing waiting to be acknowledged (no opening
    rate probe: the flights below are the first the gateway sees)."""
    config = RelayConfig(open_probe_packets=0)
    net = Net(OneWayPath(delay_s=0.01), OneWayPath(delay_s=0.01), config=config)
    net.run(1.0, lambda: net.client.established and net.gateway.established)
    net.run(net.now + 0.1)
    return net.client, net.gateway, net.now + 1.0


def _flight(client: RelayConnection, now: float, bulk: bool) -> list[tuple[bytes, object]]:
    """The first datagrams of a 4 MB send: past start-up (``bulk``) or in it."""
    client.rate.startup = not bulk  # (False as after a queued ACK train ended start-up)
    sid = client.open_stream()
    client.send(sid, payload("bulk", 4_000_000))
    return drain(client, now)  # a request's first MB comes a few per call: all due now


def _bulk_datagrams(client: RelayConnection, now: float, count: int) -> list[bytes]:
    """``count`` data packets of a window-filling bulk flight past start-up."""
    out = [d for d, _ in _flight(client, now, bulk=True)]
    assert len(out) >= count, "the pacer or window let too few go"
    return out[:count]


def test_a_bulk_flight_is_acknowledged_once_per_ack_every_bulk_packets() -> None:
    """Packets flagged ACK_LATER: the 16th in order draws the ACK, not the 2nd; one alone
    waits at most ``max_ack_delay_s``."""
    client, gateway, now = _pair()
    datagrams = _bulk_datagrams(client, now, 17)
    config = gateway.config
    for i, datagram in enumerate(datagrams[:16]):
        gateway.receive_datagram(datagram, CLIENT, now)
        acks = gateway.datagrams_to_send(now)
        assert len(acks) == (1 if i == config.ack_every_bulk - 1 else 0), i
    gateway.receive_datagram(datagrams[16], CLIENT, now)
    assert gateway.datagrams_to_send(now) == []
    timer = gateway.get_timer()
    assert timer is not None and abs(timer - (now + config.max_ack_delay_s)) < 1e-9
    assert len(gateway.datagrams_to_send(now + config.max_ack_delay_s)) == 1


def test_a_gap_is_acknowledged_at_once_outside_a_bulk_flight_only() -> None:
    """Start-up or a burst that fits the window: the packet after a missing one draws an
    ACK at once. In a bulk flight (ACK_LATER) a gap waits for the count like any packet."""
    client, gateway, now = _pair()
    prompt = [d for d, _ in _flight(client, now, bulk=False)][:4]
    gateway.receive_datagram(prompt[0], CLIENT, now)
    assert gateway.datagrams_to_send(now) == []
    gateway.receive_datagram(prompt[2], CLIENT, now)  # prompt[1] lost
    assert len(gateway.datagrams_to_send(now)) == 1

    client, gateway, now = _pair()
    bulk = _bulk_datagrams(client, now, 6)
    for datagram in bulk[:3]:
        gateway.receive_datagram(datagram, CLIENT, now)
    gateway.receive_datagram(bulk[4], CLIENT, now)  # bulk[3] lost
    assert gateway.datagrams_to_send(now) == []
    assert len(gateway.datagrams_to_send(now + gateway.config.max_ack_delay_s)) == 1


def test_start_up_keeps_an_ack_every_second_packet() -> None:
    """In start-up the sender does not flag its packets: every 2nd draws an ACK."""
    client, gateway, now = _pair()
    assert client.rate.startup
    sid = client.open_stream()
    client.send(sid, payload("bulk", 4_000_000))
    datagrams = [d for d, _ in client.datagrams_to_send(now)][:10]
    acks = 0
    for datagram in datagrams:
        gateway.receive_datagram(datagram, CLIENT, now)
        acks += len(gateway.datagrams_to_send(now))
    assert acks == len(datagrams) // 2


def _transfer(
    ack_every_bulk: int, size: int, warm: bool, loss: float = 0.0, seed: int = 5
) -> tuple[int, float]:
    """Packets the gateway sent (its ACKs) and seconds to move ``size`` bytes up (``seed``:
    the simulated paths' loss draws)."""
    config = replace(RelayConfig(), ack_every_bulk=ack_every_bulk)
    rate = 50e6 / 8  # a 625 kB BDP: most of the transfer does not fit the window
    up, down = (OneWayPath(delay_s=0.05, rate_bytes_per_s=rate, loss=loss) for _ in range(2))
    net = Net(up, down, seed=seed, config=config)
    net.run(5, lambda: net.client.established)
    if warm:  # a few requests: the session has measured the path
        for _ in range(3):
            sid = net.client.open_stream()
            net.client.send(sid, payload("req", 100_000), end_stream=True)
            net.run(net.now + 30, lambda sid=sid: sid in net.finished["gateway"])
        net.run(net.now + 0.5)
    acks0, start = net.gateway.stats.packets_sent, net.now
    sid = net.client.open_stream(priority=5)
    net.client.send(sid, payload("bulk", size), end_stream=True)
    net.run(start + 120, lambda: sid in net.finished["gateway"])
    assert sid in net.finished["gateway"]
    return net.gateway.stats.packets_sent - acks0, net.now - start


def test_bulk_sends_fewer_acks_and_is_no_slower() -> None:
    """A warm session's 6 MB upload over 100 ms, 50 Mbit/s: the ACK_LATER rule sends
    under a third of the ACKs of one ACK per two packets, and takes no longer."""
    acks_every2, seconds_every2 = _transfer(2, 6_000_000, warm=True)
    acks, seconds = _transfer(16, 6_000_000, warm=True)
    assert acks < acks_every2 / 3
    assert seconds <= seconds_every2 * 1.02


def test_a_new_session_keeps_its_start_up() -> None:
    """A new session's bulk: start-up's ACK clock is kept, so the transfer takes no longer
    than with an ACK every second packet (``ack_every = 8`` for all packets cost it)."""
    acks_every2, seconds_every2 = _transfer(2, 6_000_000, warm=False)
    acks, seconds = _transfer(16, 6_000_000, warm=False)
    assert acks < acks_every2
    assert seconds <= seconds_every2 * 1.02


@pytest.mark.slow
def test_at_14_percent_loss_a_bulk_flight_still_sends_fewer_acks() -> None:
    """At 14 % loss each way a warm 6 MB upload sends under a third of the ACKs (gaps in
    the bulk flight wait for the count), within 3 % of the time, over four loss draws.

    One draw decides nothing at this loss: each packet's fate is a draw of the path's
    seeded generator, so any change to when a packet leaves (the pacing slot that follows
    a jump of the estimate moved one slot in the warm-up by ≈ 2 ms) deals the transfer
    another loss pattern. Over seeds 1–8 the ratio of the two times spreads 0.94–1.045
    (mean 1.004) with that change and 1.003–1.040 (mean 1.020) before it: seed 5 alone
    went from 1.023 to 1.045 with the ACK policy unchanged (docs/validation.md, "The
    relay")."""
    runs = [
        (_transfer(2, 6_000_000, True, 0.14, s), _transfer(16, 6_000_000, True, 0.14, s))
        for s in (5, 6, 7, 8)
    ]
    acks_every2 = sum(every2[0] for every2, _ in runs)
    seconds_every2 = sum(every2[1] for every2, _ in runs)
    acks = sum(bulk[0] for _, bulk in runs)
    seconds = sum(bulk[1] for _, bulk in runs)
    assert acks < acks_every2 / 3
    assert seconds <= seconds_every2 * 1.03
