"""Client and gateway RelayConnections over a synthetic path: delivery, loss, security."""

from __future__ import annotations

import hashlib
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierwise.proto.relay import RelayConfig, RelayConnection, wire
from tierwise.sim.relay import GATEWAY, KEY, Net, OneWayPath, all_done, payload, request_response

SIZES = [(1, 1), (1000, 50_000), (354_640, 1000), (2_000_000, 10), (70_000, 700_000)] + [
    (37 * i + 1, 11 * i + 1) for i in range(1, 12)
]


def exact(net: Net, expected: dict[int, tuple[bytes, bytes]]) -> bool:
    return all(
        bytes(net.received["gateway"].get(sid, b"")) == up
        and bytes(net.received["client"].get(sid, b"")) == down
        for sid, (up, down) in expected.items()
    )


def run_transfer(net: Net, until: float = 120.0) -> dict[int, tuple[bytes, bytes]]:
    expected = request_response(net, SIZES)
    net.run(until, all_done(net, expected))
    assert exact(net, expected), f"not byte-exact by t={net.now:.2f} s"
    return expected


def test_handshake_takes_one_round_trip() -> None:
    """Both sides hold keys one RTT after the HELLO leaves."""
    net = Net(OneWayPath(delay_s=0.05), OneWayPath(delay_s=0.05))
    net.run(1.0, lambda: net.client.established)
    assert net.gateway.established and net.now == pytest.approx(0.1, abs=0.002)


def test_stream_open_costs_no_round_trip() -> None:
    """A request on an established session is answered in one RTT plus transmission."""
    net = Net(OneWayPath(delay_s=0.1), OneWayPath(delay_s=0.1))
    net.run(1.0, lambda: net.client.established)
    start = net.now
    expected = request_response(net, [(100, 100)])
    net.run(start + 2, all_done(net, expected))
    assert net.now - start == pytest.approx(0.2, abs=0.003)


@pytest.mark.parametrize(
    "impairment",
    [
        {"loss": 0.14},
        {"burst": (0.02, 0.25, 0.7)},
        {"reorder": 0.2, "duplicate": 0.1, "loss": 0.03},
        {"blackouts": [(1.0, 6.0)]},
    ],
    ids=["random-14%", "gilbert-elliott", "reorder-dup", "blackout-5s"],
)
def test_byte_exact_under_impairment(impairment: dict) -> None:
    """Many concurrent streams, 1 B to 3 MB each way, arrive byte-exact through the path."""
    net = Net(OneWayPath(**impairment), OneWayPath(**impairment), seed=7)
    run_transfer(net)
    assert net.client.stats.dropped_auth == net.gateway.stats.dropped_auth == 0


def test_fec_repairs_random_loss_before_retransmission() -> None:
    """At 14 % loss, once loss is measured, FEC recovers most lost packets."""
    net = Net(OneWayPath(loss=0.14), OneWayPath(loss=0.14), seed=3)
    for _ in range(3):
        expected = request_response(net, [(354_640, 1000)] * 3)
        net.run(net.now + 30, all_done(net, expected))
        assert exact(net, expected)
    lost = net.client.stats.packets_lost
    assert net.gateway.stats.fec_recovered > lost  # most losses never wait for a retransmission
    assert net.client.peer_loss == pytest.approx(0.14, abs=0.04)


def test_warm_session_request_near_the_floor() -> None:
    """§12.3.5: on a warm session a 354,640 B request completes within 5 % of the floor."""
    rate = 333e6 / 8
    net = Net(OneWayPath(rate_bytes_per_s=rate), OneWayPath(rate_bytes_per_s=rate))
    floor = 0.2 + (354_640 + 1000) / rate
    times = []
    for _ in range(8):
        start = net.now
        expected = request_response(net, [(354_640, 1000)])
        net.run(start + 10, all_done(net, expected))
        times.append(net.now - start)
        net.run(net.now + 0.05)
    assert sorted(times[3:])[2] <= 1.05 * floor


def forged(net: Net) -> None:
    net.inject("up", b"\x03" + b"\x00" * 60, 0.05)


def test_a_version_1_data_without_its_token_is_dropped_before_the_aead() -> None:
    """DATA laid out as version 1 (no packet-number token), sealed with the session's own
    key: refused before the AEAD (``dropped_token``); the session goes on."""
    net = Net()
    net.run(1.0, lambda: net.client.established)
    keys, pn = net.client._send_keys, 10_000
    assert keys is not None
    header = wire.HEADER.pack(wire.DATA, net.client.connection_id, pn)
    old = header + keys.seal(pn, header, wire.encode_frame(wire.Ping()))
    net.inject("up", old, net.now + 0.001)
    net.run(net.now + 0.01)
    stats = net.gateway.stats
    assert (stats.dropped_token, stats.dropped_auth, stats.packets_received) == (1, 0, 0)
    expected = request_response(net, [(5000, 5000)])
    net.run(net.now + 5, all_done(net, expected))
    assert exact(net, expected)


def test_forged_truncated_flipped_replayed_datagrams_are_dropped() -> None:
    """Bad datagrams are counted, never answered, and never disturb the streams."""
    net = Net()
    net.run(1.0, lambda: net.client.established)
    captured: list[bytes] = []

    def tap(direction: str, datagram: bytes) -> bytes:
        if direction == "up":
            captured.append(datagram)
        return datagram

    net.tap = tap
    expected = request_response(net, [(5000, 5000)])
    net.run(5, all_done(net, expected))
    assert exact(net, expected)
    sent_before = net.gateway.stats.packets_sent
    victim = captured[0]
    now = net.now
    moved = victim[:9] + (10**5).to_bytes(8, "big") + victim[17:]  # a fresh packet number
    net.inject("up", victim, now)  # replayed
    net.inject("up", victim[:20], now)  # truncated
    net.inject("up", moved, now + 0.001)  # header changed: the tag no longer matches
    net.inject("up", moved[:-1] + bytes([moved[-1] ^ 1]), now + 0.002)  # bit flipped
    net.inject("up", moved[:17] + bytes(len(victim) - 17), now + 0.003)  # forged body
    net.inject("up", b"\x07" + victim[1:], now + 0.004)  # unknown type
    # the number's own token (as read off the path once it is sent), a forged body
    token = net.gateway._recv_keys.tokens.token(10**5)
    net.inject("up", moved[:17] + token + bytes(len(victim) - 21), now + 0.005)
    net.run(now + 0.01)
    stats = net.gateway.stats
    # the moved number without its token: dropped before the AEAD (dropped_token)
    drops = (stats.dropped_replay, stats.dropped_auth, stats.dropped_token)
    assert drops == (1, 1, 3) and stats.dropped_malformed == 2
    assert net.gateway.stats.packets_sent == sent_before


def test_wrong_key_exchanges_no_application_byte() -> None:
    """A client with another key gets no WELCOME; the gateway sends nothing at all."""
    net = Net(client_key=bytes(32), gateway_key=KEY)
    sid = net.client.open_stream()
    net.client.send(sid, b"secret", end_stream=True)
    net.run(10.0)
    assert not net.client.established and not net.gateway.established
    assert net.gateway.stats.packets_sent == 0 and net.gateway.stats.dropped_auth > 0
    assert net.received["gateway"] == {} and net.down.sent == 0


def test_reset_reaches_the_peer() -> None:
    """A reset stream ends on both sides with the code given."""
    net = Net()
    net.run(1.0, lambda: net.client.established)
    sid = net.client.open_stream()
    net.client.send(sid, b"x" * 10_000)
    net.run(net.now + 0.3)
    net.client.reset(sid, code=9)
    net.run(net.now + 0.5)
    assert [(r.stream_id, r.code) for r in net.resets["gateway"]] == [(sid, 9)]
    assert sid not in net.gateway.stream_ids


def test_stream_limit_refuses_extra_streams() -> None:
    """Beyond max_streams the gateway refuses a stream with a reset instead of buffering it."""
    net = Net(config=RelayConfig(max_streams=2))
    net.run(1.0, lambda: net.client.established)
    sids = [net.client.open_stream() for _ in range(3)]
    for sid in sids:
        net.client.send(sid, b"hello")
    net.run(net.now + 0.5)
    assert [r.stream_id for r in net.resets["client"]] == [sids[2]]
    assert net.gateway.stats.streams_refused == 1


def test_queued_control_frames_leave_at_the_pacing_rate() -> None:
    """Hundreds of RESETs beyond one burst go out paced, not at the next unrelated timer."""
    slow = 2e5
    net = Net(
        OneWayPath(delay_s=0.05, rate_bytes_per_s=slow),
        OneWayPath(delay_s=0.05, rate_bytes_per_s=slow),
    )
    net.run(1.0, lambda: net.client.established)
    sids = [net.client.open_stream() for _ in range(300)]
    for sid in sids:
        net.client.send(sid, b"hello")
    net.run(net.now + 1, lambda: len(net.gateway.stream_ids) == len(sids))
    net.gateway.send(sids[0], b"x" * 300_000)  # a measured, finite pacing rate
    net.run(net.now + 5, lambda: len(net.received["client"].get(sids[0], b"")) >= 300_000)
    net.run(net.now + 0.5)
    start = net.now
    for sid in net.gateway.stream_ids:
        net.gateway.reset(sid, code=3)
    net.run(start)  # the first burst leaves; the rest are queued behind the pacer
    timer = net.gateway.get_timer()
    assert timer is not None and timer - start < 0.01  # the next pacing slot, not a PTO
    net.run(start + 10, lambda: len(net.resets["client"]) == len(sids))
    assert len(net.resets["client"]) == len(sids)
    assert net.now - start < 0.25


def test_ping_is_acknowledged_and_opens_no_stream() -> None:
    """A PING elicits an ACK from the peer and leaves the stream counters alone."""
    net = Net(OneWayPath(delay_s=0.05), OneWayPath(delay_s=0.05))
    net.run(1.0, lambda: net.client.established)
    net.run(net.now + 0.5)
    received = net.client.stats.packets_received
    net.client.ping()
    net.run(net.now + 0.2)
    assert net.client.stats.packets_received == received + 1
    assert net.client.stats.streams_opened == net.gateway.stats.streams_opened == 0


def test_flow_control_bounds_the_receiver() -> None:
    """A sender never has more than the stream window outstanding beyond what was delivered."""
    config = RelayConfig(stream_window_bytes=64_000, session_window_bytes=256_000)
    net = Net(config=config)
    net.run(1.0, lambda: net.client.established)
    sid = net.client.open_stream()
    net.client.send(sid, payload("big", 1_000_000), end_stream=True)
    peak = 0
    while sid not in net.finished["gateway"] and net.now < 30:
        net.run(net.now + 0.01)
        stream = net.client._streams.get(sid)
        if stream is not None:
            peak = max(peak, stream.send.next_offset - stream.send.base)
    assert bytes(net.received["gateway"][sid]) == payload("big", 1_000_000)
    assert peak <= 64_000 + 16_000


def test_credit_on_consume_holds_a_reader_that_stops_to_one_window() -> None:
    """With credit_on_consume, bytes handed to an application that does not consume
    them earn the sender no credit: it stops one stream window past what was consumed,
    and goes on, byte-exact, as the application consumes (the relay's I/O layer reports
    what its sockets took; a stalled reader must not make it buffer without bound)."""
    window = 64_000
    config = RelayConfig(
        stream_window_bytes=window, session_window_bytes=4 * window, credit_on_consume=True
    )
    net = Net(config=config)
    net.run(1.0, lambda: net.client.established)
    sid = net.client.open_stream()
    data = payload("slow reader", 1_000_000)
    net.client.send(sid, data, end_stream=True)
    net.run(net.now + 5.0)
    stalled = len(net.received["gateway"][sid])
    assert window // 2 <= stalled <= window  # the window, then nothing more
    consumed = 0
    while sid not in net.finished["gateway"] and net.now < 60:
        got = len(net.received["gateway"][sid])
        assert got - consumed <= window  # never more than a window beyond what was consumed
        net.gateway.stream_consumed(sid, got - consumed)
        consumed = got
        net.run(net.now + 0.05)
    assert bytes(net.received["gateway"][sid]) == data


def test_without_credit_on_consume_delivery_is_credit() -> None:
    """The default (the simulator's endpoints): credit follows delivery, and
    stream_consumed does nothing."""
    config = RelayConfig(stream_window_bytes=64_000, session_window_bytes=256_000)
    net = Net(config=config)
    net.run(1.0, lambda: net.client.established)
    sid = net.client.open_stream()
    net.client.send(sid, payload("eager", 500_000), end_stream=True)
    assert net.gateway.stream_consumed(sid, 10) is False
    net.run(30.0, lambda: sid in net.finished["gateway"])
    assert bytes(net.received["gateway"][sid]) == payload("eager", 500_000)


def test_interactive_stream_overtakes_bulk() -> None:
    """A small urgent stream opened behind a bulk transfer finishes long before it."""
    rate = 10e6 / 8
    net = Net(OneWayPath(rate_bytes_per_s=rate), OneWayPath(rate_bytes_per_s=rate))
    net.run(1.0, lambda: net.client.established)
    bulk = net.client.open_stream(priority=5)
    net.client.send(bulk, payload("bulk", 3_000_000), end_stream=True)
    net.run(net.now + 0.3)
    urgent = net.client.open_stream(priority=0)
    start = net.now
    net.client.send(urgent, b"u" * 2000, end_stream=True)
    net.run(start + 5, lambda: urgent in net.finished["gateway"])
    assert net.now - start < 0.4 and bulk not in net.finished["gateway"]


MOVED = ("10.0.0.77", 5555)
ATTACKER = ("10.6.6.6", 6666)


def frames_of(reader: RelayConnection, datagram: bytes) -> list[wire.Frame]:
    """The frames of a DATA datagram, opened with ``reader``'s keys (without taking it)."""
    _, _, pn = wire.parse_header(datagram)
    header = datagram[: wire.DATA_HEADER_BYTES]
    plain = reader._recv_keys.open(pn, header, datagram[wire.DATA_HEADER_BYTES :])
    assert plain is not None
    return wire.parse_frames(plain)


def client_datagram(net: Net, data: bytes = b"hi") -> bytes:
    sid = net.client.open_stream()
    net.client.send(sid, data, end_stream=True)
    ((datagram, _),) = net.client.datagrams_to_send(net.now)
    return datagram


def test_client_address_change_is_validated_before_the_gateway_moves() -> None:
    """RFC 9000 §9.3: the gateway challenges a new client address and moves on the answer."""
    net = Net()
    net.run(1.0, lambda: net.client.established)
    old = net.gateway.peer_addr
    net.gateway.receive_datagram(b"", ("10.9.9.9", 1), net.now)  # garbage from a stranger
    net.gateway.receive_datagram(client_datagram(net), MOVED, net.now)
    assert net.gateway.peer_addr == old  # not yet: anyone could have sent a copy from there
    out = net.gateway.datagrams_to_send(net.now)
    to_new = [d for d, addr in out if addr == MOVED]
    assert len(to_new) == 1 and all(addr in (old, MOVED) for _, addr in out)
    (challenge,) = frames_of(net.client, to_new[0])
    assert isinstance(challenge, wire.PathChallenge)
    net.client.receive_datagram(to_new[0], GATEWAY, net.now)  # the client is there
    answers = [d for d, _ in net.client.datagrams_to_send(net.now)]
    said = [f for d in answers for f in frames_of(net.gateway, d)]
    assert wire.PathResponse(challenge.data) in said
    for datagram in answers:
        net.gateway.receive_datagram(datagram, MOVED, net.now)
    assert net.gateway.peer_addr == MOVED and net.gateway.stats.paths_validated == 1
    assert all(addr == MOVED for _, addr in net.gateway.datagrams_to_send(net.now + 0.01))


def test_a_copy_raced_from_another_address_never_moves_the_session() -> None:
    """An on-path attacker's copy that outruns the original earns a small challenge, no data."""
    net = Net(config=RelayConfig(open_probe_packets=0))  # one datagram per client_datagram
    net.run(1.0, lambda: net.client.established)
    old, sent_by_attacker, sent_to_attacker = net.gateway.peer_addr, 0, 0
    for i in range(6):  # the attacker's copy first; the client's own a moment later
        datagram = client_datagram(net, bytes([i]) * 500)
        net.gateway.receive_datagram(datagram, ATTACKER, net.now)
        sent_by_attacker += len(datagram)
        net.gateway.receive_datagram(datagram, old, net.now + 0.001)  # a replay now: dropped
        net.now += 0.3
        for out, addr in net.gateway.datagrams_to_send(net.now):
            assert addr in (old, ATTACKER)
            if addr == ATTACKER:
                sent_to_attacker += len(out)
                assert [type(f) for f in frames_of(net.client, out)] == [wire.PathChallenge]
    assert net.gateway.peer_addr == old and net.gateway.stats.paths_validated == 0
    assert 0 < sent_to_attacker <= 3 * sent_by_attacker
    # The client's next packet from its own address ends the probe: nothing more goes there.
    net.gateway.receive_datagram(client_datagram(net), old, net.now)
    later = net.gateway.datagrams_to_send(net.now + 5)
    assert later and all(addr == old for _, addr in later)


def test_an_unanswered_probe_gives_up_and_keeps_the_session() -> None:
    """A new address that never answers gets a few backed-off challenges, then none."""
    net = Net()
    net.run(1.0, lambda: net.client.established)
    old = net.gateway.peer_addr
    net.gateway.receive_datagram(client_datagram(net, b"x" * 1200), ATTACKER, net.now)
    challenges, wakes = [], 0
    while (at := net.gateway.get_timer()) is not None and at < net.now + 20 and wakes < 1000:
        wakes += 1
        net.now = max(net.now, at)
        net.gateway.handle_timer(net.now)
        challenges += [net.now for _, a in net.gateway.datagrams_to_send(net.now) if a == ATTACKER]
    assert len(challenges) == 4 and wakes < 50  # no busy timer
    gaps = [b - a for a, b in itertools.pairwise(challenges)]
    assert gaps == sorted(gaps) and gaps[0] > 0
    assert net.gateway.stats.path_probes_failed == 1 and net.gateway.peer_addr == old


def test_a_challenge_rebuilt_by_fec_is_not_answered() -> None:
    """Only a challenge that reached the client proves the path; a repaired copy does not."""
    net = Net()
    net.run(1.0, lambda: net.client.established)
    net.gateway.receive_datagram(client_datagram(net), MOVED, net.now)
    (challenge,) = [d for d, a in net.gateway.datagrams_to_send(net.now) if a == MOVED]
    _, _, pn = wire.parse_header(challenge)
    net.client._on_data(challenge, pn, None, net.now, recovered=True)
    replies = net.client.datagrams_to_send(net.now + 0.01)
    frames = [f for d, _ in replies for f in frames_of(net.gateway, d)]
    assert not any(isinstance(f, wire.PathResponse) for f in frames)


def test_idle_timeout_terminates() -> None:
    """A silent peer ends the session after the idle timeout."""
    net = Net(config=RelayConfig(idle_timeout_s=3.0))
    net.run(1.0, lambda: net.client.established)
    net.up.blackouts.append((0.0, 100.0))
    net.down.blackouts.append((0.0, 100.0))
    net.run(10.0)
    assert not net.client.established and net.client.get_timer() is None


def test_client_hello_is_not_answered_more_than_its_size() -> None:
    """No amplification: the WELCOME is smaller than the HELLO that earns it."""
    client = RelayConnection(KEY, is_client=True)
    client.connect(GATEWAY, 0.0)
    ((hello, _),) = client.datagrams_to_send(0.0)
    gateway = RelayConnection(KEY, is_client=False)
    gateway.receive_datagram(hello, ("1.2.3.4", 5), 0.0)
    ((welcome, _),) = gateway.datagrams_to_send(0.0)
    assert len(hello) == wire.HELLO_BYTES and len(welcome) < len(hello) // 10


@settings(max_examples=50)
@given(st.text(max_size=8), st.integers(0, 40_000), st.data())
def test_payload_is_the_keyed_digest_xor_a_counter(tag: str, size: int, data) -> None:
    """Byte i of payload(tag, size) is the tag's SHA-256 byte i % 32 XOR i % 251, at any
    size (the pattern is built once a period, 8,032 bytes, and repeated)."""
    digest = hashlib.sha256(tag.encode()).digest()
    got = payload(tag, size)
    assert len(got) == size
    for i in data.draw(st.lists(st.integers(0, size - 1), max_size=20)) if size else []:
        assert got[i] == digest[i % 32] ^ (i % 251)
    assert got[: min(size, 300)] == bytes(digest[i % 32] ^ (i % 251) for i in range(min(size, 300)))


@pytest.mark.slow
def test_hundred_megabytes_at_fourteen_percent_loss() -> None:
    """100 MB and its echo-sized reply arrive byte-exact at 14 % loss on 333 Mbit/s, 200 ms."""
    net = Net(OneWayPath(loss=0.14), OneWayPath(loss=0.14), seed=11)
    big = payload("hundred", 100_000_000)
    sid = net.client.open_stream(priority=5)
    expected = {sid: (big, b"ok")}
    net.client.send(sid, big, end_stream=True)
    net.on_gateway_stream = lambda s, data: net.gateway.send(s, b"ok", end_stream=True)
    net.run(600, all_done(net, expected))
    assert exact(net, expected)


def test_dead_peer_rule_spares_a_lossy_path_and_ends_a_silent_one() -> None:
    """dead_peer_s = 1 s: 14 % loss each way never ends the session; a dead gateway does."""
    from tierwise.proto.relay.connection import State

    # seed 20: the old rule (1 s without an answer) ended this session at its 2nd request
    net = Net(
        OneWayPath(loss=0.14), OneWayPath(loss=0.14), seed=20, config=RelayConfig(dead_peer_s=1.0)
    )
    for _ in range(8):
        expected = request_response(net, [(2000, 1000)] * 3)
        net.run(net.now + 30, all_done(net, expected))
        assert net.client.state is not State.CLOSED, f"session ended at t={net.now:.2f} s"
        assert exact(net, expected)
        net.run(net.now + 0.5)
    net.down = OneWayPath(blackouts=[(net.now, net.now + 100)])
    net.gateway = RelayConnection(KEY, is_client=False)  # restarted: knows no session
    request_response(net, [(10_000, 10)])
    start = net.now
    net.run(start + 10, lambda: net.client.state is State.CLOSED)
    assert net.client.state is State.CLOSED and net.now - start < 3.0


def test_forged_packet_numbers_ahead_do_not_move_the_keys_on() -> None:
    """Datagrams that fail authentication, numbered in the next key epochs, leave the
    session's keys alone: the streams go on (an attacker who saw the connection id
    could otherwise make the receiver drop the key in use with two datagrams)."""
    net = Net(OneWayPath(delay_s=0.02), OneWayPath(delay_s=0.02))
    net.run(1.0, lambda: net.client.established)
    first = request_response(net, [(5_000, 5_000)])
    net.run(net.now + 2, all_done(net, first))
    cid, rotate = net.client.connection_id, net.client.config.rotate_packets
    for epoch in (1, 2, 3):
        pn = epoch * rotate  # each with its number's token: the AEAD is what refuses them
        up = wire.DATA_HEADER.pack(wire.DATA, cid, pn, net.gateway._recv_keys.tokens.token(pn))
        down = wire.DATA_HEADER.pack(wire.DATA, cid, pn, net.client._recv_keys.tokens.token(pn))
        net.inject("up", up + bytes(64), net.now + 0.001)
        net.inject("down", down + bytes(64), net.now + 0.001)
    net.run(net.now + 0.1)
    assert net.gateway.stats.dropped_auth >= 3 and net.client.stats.dropped_auth >= 3
    net.on_gateway_stream = None
    sid = net.client.open_stream()
    net.client.send(sid, payload("after the forgeries", 50_000), end_stream=True)
    net.run(net.now + 3, lambda: sid in net.finished["gateway"])
    assert bytes(net.received["gateway"].get(sid, b"")) == payload("after the forgeries", 50_000)


def test_a_session_carries_streams_across_key_rotations() -> None:
    """With a key update every 64 packets, 1 MB each way at 3 % loss arrives byte-exact
    and both directions have moved through many key epochs."""
    config = RelayConfig(rotate_packets=64)
    net = Net(
        OneWayPath(delay_s=0.02, loss=0.03),
        OneWayPath(delay_s=0.02, loss=0.03),
        seed=4,
        config=config,
    )
    net.run(1.0, lambda: net.client.established)
    expected = request_response(net, [(1_000_000, 1_000_000), (10, 10)])
    net.run(net.now + 30, all_done(net, expected))
    assert exact(net, expected)
    assert net.client._send_keys.epoch >= 10 and net.gateway._send_keys.epoch >= 10


def test_a_new_streams_first_bytes_do_not_wait_behind_older_small_streams() -> None:
    """Three downloads under the bulk mark keep their streams busy; a later stream's one
    status byte still leaves next, not after them (the gateway's status byte once waited
    behind three 2 MB downloads until each had passed 1 MB: 0.4 s and more on loopback)."""
    rate = 10e6 / 8
    net = Net(
        OneWayPath(delay_s=0.02, rate_bytes_per_s=rate),
        OneWayPath(delay_s=0.02, rate_bytes_per_s=rate),
    )
    net.run(1.0, lambda: net.client.established)
    sids = [net.client.open_stream() for _ in range(4)]
    for sid in sids:
        net.client.send(sid, b"?")
    net.run(net.now + 0.1, lambda: set(sids) <= set(net.gateway.stream_ids))
    for sid in sids[:3]:
        net.gateway.send(sid, payload(f"busy {sid}", 900_000))
    net.run(net.now + 0.2)
    written_s = net.now
    net.gateway.send(sids[3], b"\x00")
    net.run(net.now + 5, lambda: sids[3] in net.received["client"])
    assert net.received["client"].get(sids[3]) == b"\x00"
    assert net.now - written_s < 0.1  # one-way delay plus a few packets, not 2 MB's worth
