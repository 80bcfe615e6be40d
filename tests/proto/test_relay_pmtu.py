"""OneWayPath MTU discovery (RFC 8899) of the relay session over simulated links with an MTU."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierwise.errors import LocalProtocolError
from tierwise.proto.relay import RelayConfig
from tierwise.proto.relay.meter import LossMeter
from tierwise.proto.relay.pmtu import (
    BASE_DATAGRAM_BYTES,
    MAX_DATAGRAM_BYTES,
    REPAIR_EXTRA_BYTES,
    PmtuSearch,
)
from tierwise.sim.relay import Net, OneWayPath, all_done, payload, request_response

UDP_IP = 28  # the simulated links' IPv4 + UDP header
JUMBO_BYTES = 9000 - UDP_IP - REPAIR_EXTRA_BYTES  # 8,876 (the DATA header of wire version 2)
JUMBO = RelayConfig(max_datagram_bytes=JUMBO_BYTES)


def jumbo_net(mtu: int, loss: float = 0.0, seed: int = 1) -> tuple[Net, list[int]]:
    """A 100 ms path each way with ``mtu``; the sizes of every datagram put on it."""
    net = Net(
        OneWayPath(delay_s=0.05, loss=loss, mtu_bytes=mtu),
        OneWayPath(delay_s=0.05, loss=loss, mtu_bytes=mtu),
        seed=seed,
        config=JUMBO,
    )
    sizes: list[int] = []
    net.tap = lambda name, datagram: (sizes.append(len(datagram)), datagram)[1]
    return net, sizes


def transfer(net: Net, up: int, down: int, until: float = 120.0) -> None:
    expected = request_response(net, [(up, down), (1000, 1000)])
    net.run(until, all_done(net, expected))
    for sid, (sent_up, sent_down) in expected.items():
        assert bytes(net.received["gateway"][sid]) == sent_up, f"stream {sid} up"
        assert bytes(net.received["client"][sid]) == sent_down, f"stream {sid} down"


def test_the_datagram_bound_is_the_largest_udp_payload_less_a_repair() -> None:
    """max_datagram_bytes goes up to 65,000 (a repair still fits 65,487 B) and no further."""
    assert RelayConfig(max_datagram_bytes=MAX_DATAGRAM_BYTES).max_datagram_bytes == 65_000
    assert MAX_DATAGRAM_BYTES + REPAIR_EXTRA_BYTES <= 65_535 - 40 - 8
    with pytest.raises(LocalProtocolError, match=r"\[200, 65000\], got 65001"):
        RelayConfig(max_datagram_bytes=65_001)


def test_a_session_converges_to_a_jumbo_links_mtu() -> None:
    """Over a 9,000-byte MTU each end's sender probes up to 8,972 B and sends 8,876 B data
    datagrams; nothing it sends is too large for the link, and delivery is byte-exact."""
    net, sizes = jumbo_net(9000)
    transfer(net, 20_000_000, 20_000_000)
    for conn in (net.client, net.gateway):
        stats = conn.pmtu_stats()
        assert stats["pmtu_bytes"] == 9000 - UDP_IP, stats
        assert stats["datagram_bytes"] == JUMBO_BYTES and stats["pmtu_probes_lost"] == 0, stats
    assert net.up.oversize == net.down.oversize == 0
    assert max(sizes) <= 9000 - UDP_IP
    jumbo = sum(size for size in sizes if size > 8000)
    assert jumbo > 0.8 * sum(sizes)  # the bulk went in jumbo datagrams


def test_an_ethernet_link_stops_the_search_at_its_mtu() -> None:
    """Over a 1,500-byte MTU the probes of 1,452 and 1,472 B are acknowledged; the larger
    ones are lost, 4,048 B three times (RFC 8899 MAX_PROBES), which ends the search. Those
    are the only datagrams the link drops for size, and none counts as a lost packet."""
    net, sizes = jumbo_net(1500)
    transfer(net, 2_000_000, 2_000_000)
    net.run(net.now + 3.0)  # the last probes' fate settles
    for conn, path in ((net.client, net.up), (net.gateway, net.down)):
        stats = conn.pmtu_stats()
        assert stats["pmtu_bytes"] == 1500 - UDP_IP
        assert stats["datagram_bytes"] == 1500 - UDP_IP - REPAIR_EXTRA_BYTES
        # six sizes at once; then only 4,048 B again, twice
        assert (stats["pmtu_probes_sent"], stats["pmtu_probes_acked"]) == (8, 2)
        assert stats["pmtu_probes_lost"] == 6 == path.oversize
        assert conn.stats.packets_lost == 0 and conn.stats.retransmitted_bytes == 0
    assert max(size for size in sizes if size < 4000) <= 1500 - UDP_IP


def test_probe_losses_are_not_congestion() -> None:
    """The lost probes leave the rate controller alone: the 1,500-byte path's bulk, searched,
    takes no longer than the same transfer at the fixed default size."""
    net, _ = jumbo_net(1500)
    transfer(net, 8_000_000, 1000)
    fixed = Net(OneWayPath(delay_s=0.05, mtu_bytes=1500), OneWayPath(delay_s=0.05, mtu_bytes=1500))
    transfer(fixed, 8_000_000, 1000)
    assert 3 <= net.client.pmtu_stats()["pmtu_probes_lost"] <= net.up.oversize  # last: in flight
    assert net.client.stats.packets_lost == 0
    assert net.now <= fixed.now * 1.02, (net.now, fixed.now)


def test_a_link_whose_mtu_shrinks_is_a_black_hole_the_sender_leaves() -> None:
    """The path's MTU drops from 9,000 to 1,500 mid-transfer: the large datagrams vanish while
    a base-size probe gets through, so each sender falls back to 1,350 B and the transfer
    completes byte-exact."""
    net, _ = jumbo_net(9000)
    expected = request_response(net, [(20_000_000, 20_000_000)])
    ends = (net.client, net.gateway)
    net.run(3.0, lambda: all(conn.pmtu_stats()["datagram_bytes"] == JUMBO_BYTES for conn in ends))
    assert all(conn.pmtu_stats()["datagram_bytes"] == JUMBO_BYTES for conn in ends)
    assert not net.finished["client"]
    net.up.mtu_bytes = net.down.mtu_bytes = 1500
    net.run(200.0, all_done(net, expected))
    for sid, (up, down) in expected.items():
        assert bytes(net.received["gateway"][sid]) == up
        assert bytes(net.received["client"][sid]) == down
    for conn in (net.client, net.gateway):
        stats = conn.pmtu_stats()
        assert stats["pmtu_black_holes"] >= 1, stats
        assert stats["datagram_bytes"] <= 1500 - UDP_IP - REPAIR_EXTRA_BYTES, stats


def test_random_loss_is_not_a_black_hole() -> None:
    """At 14 % random loss on a jumbo link the search still converges (a lost probe is tried
    again) and the sender keeps its large datagrams, on every seed of six.

    A queue that overflows drops a run of large datagrams, which the black-hole counter
    cannot tell from a path that shrank; the confirmation's probes of the current size
    can (one gets through). With the base-size probe alone, 6 of 12 seeds fell back to
    1,350 B here. Each seed's search must end at 8,880 B on both ends but for one: a
    probe lost in a burst may still be unsettled when the 6 MB transfers end (seed 3)."""
    found = []
    for seed in range(1, 7):
        net, _ = jumbo_net(9000, loss=0.14, seed=seed)
        transfer(net, 6_000_000, 6_000_000, until=300.0)
        stats = [conn.pmtu_stats() for conn in (net.client, net.gateway)]
        assert all(s["pmtu_black_holes"] == 0 for s in stats), (seed, stats)
        found.append(all(s["datagram_bytes"] == JUMBO_BYTES for s in stats))
    assert sum(found) >= 5, found


def test_the_default_size_sends_no_probe() -> None:
    """At the default 1,350 B (the base) the search is off: no probe, the old behaviour."""
    search = PmtuSearch(BASE_DATAGRAM_BYTES)
    assert search.due(0.0, 1000) is None and not search.searching
    net = Net(OneWayPath(delay_s=0.05), OneWayPath(delay_s=0.05))
    transfer(net, 500_000, 500_000)
    assert net.client.pmtu_stats()["pmtu_probes_sent"] == 0
    assert net.client.pmtu_stats()["datagram_bytes"] == BASE_DATAGRAM_BYTES


def test_a_request_goes_before_the_probes() -> None:
    """Probes fall due at packet 256, in the middle of this request: they wait until its
    data is out (and go between FEC blocks), so it never queues behind them."""
    net = Net(
        OneWayPath(delay_s=0.05, mtu_bytes=9000),
        OneWayPath(delay_s=0.05, mtu_bytes=9000),
        config=JUMBO,
    )
    client = net.client
    size = 600_000  # ≈ 450 datagrams of the base size
    sid = client.open_stream()
    client.send(sid, payload("req", size), end_stream=True)
    seen: list[tuple[int, int]] = []  # (datagram size, stream bytes sent by then)
    net.tap = lambda name, d: (
        seen.append((len(d), client.stats.stream_bytes_sent)) if name == "up" else None,
        d,
    )[1]
    net.run(5, lambda: sid in net.finished["gateway"])
    assert sid in net.finished["gateway"]
    big = BASE_DATAGRAM_BYTES + REPAIR_EXTRA_BYTES
    probes = [(n, sent) for n, sent in seen if n > big]
    assert len(probes) == 6, seen
    assert all(sent >= size for _, sent in probes), probes  # the request's data was out
    assert max(n for n, sent in seen if sent < size) <= big


def test_lost_probes_do_not_read_as_path_loss() -> None:
    """On a clean 1,500-byte path the larger probes are lost: the receiver counts their gaps
    as loss and reports it, and the sender takes their share out, so it reads no loss and
    sizes no repairs from them (it read 0.3–0.5 % and sent repairs before)."""
    net, _ = jumbo_net(1500)
    expected = request_response(net, [(354_640, 1000)] * 4)
    net.run(30, all_done(net, expected))
    assert all_done(net, expected)()
    net.run(net.now + 2.0)  # the last probes' fate settles
    for conn in (net.client, net.gateway):
        assert conn.pmtu_stats()["pmtu_probes_lost"] == 6, conn.pmtu_stats()
        assert conn.peer_loss == 0.0, conn.peer_loss
        assert conn.stats.packets_lost == 0


def test_a_path_that_carries_only_the_base_size_ends_the_search_there() -> None:
    """Every probe is lost (a 1,470-byte MTU: the base datagram and its repair fit, 1,452 B
    does not): the search ends at the base size without a black hole, data is never lost
    and the sender reads no loss."""
    net, _ = jumbo_net(1470)
    transfer(net, 2_000_000, 2_000_000)
    net.run(net.now + 3.0)  # the last probes' fate settles
    for conn in (net.client, net.gateway):
        stats = conn.pmtu_stats()
        assert stats["datagram_bytes"] == BASE_DATAGRAM_BYTES, stats
        assert stats["pmtu_probes_acked"] == 0 and stats["pmtu_black_holes"] == 0, stats
        # six sizes at once, then 1,452 B twice more (RFC 8899 MAX_PROBES)
        assert stats["pmtu_probes_lost"] == stats["pmtu_probes_sent"] == 8, stats
        assert conn.stats.packets_lost == 0 and conn.peer_loss == 0.0
    assert net.up.oversize == net.down.oversize == 8


@settings(max_examples=80, deadline=None)
@given(
    st.integers(20, 1500),
    st.sets(st.integers(1, 1500), max_size=12),
    st.sets(st.integers(1, 1500), max_size=200),
    st.lists(st.integers(0, 1500), min_size=1, max_size=20),
)
def test_the_probes_share_is_what_the_peers_meter_reads_of_their_gaps(
    n: int, probes: set[int], others: set[int], checkpoints: list[int]
) -> None:
    """The peer's meter fed with every gap, less the share :meth:`PmtuSearch.peer_loss` takes
    out, is the meter fed with the other gaps only (the meter is linear in its gaps)."""
    probes = {pn for pn in probes if pn < n}
    others = {pn for pn in others if pn < n} - probes
    search = PmtuSearch(8880)
    every, rest = LossMeter(), LossMeter()
    marks = sorted({pn for pn in checkpoints if pn < n} - probes - others)
    for pn in range(n):
        if pn in probes:  # a probe that never arrives: declared lost, or (odd) still in flight
            search.on_sent(pn, 4048)
            if pn % 2 == 0:
                search.on_lost(pn, 4048, 0.0)
            rest.on_packet(pn)  # the meter without the probes' gaps
            continue
        if pn not in others:
            rest.on_packet(pn)
            every.on_packet(pn)
        else:
            continue
        if marks and pn == marks[0]:
            marks.pop(0)
            assert search.peer_loss(every.loss, pn) == pytest.approx(rest.loss, abs=1e-6)
