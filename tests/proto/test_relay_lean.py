"""Bulk at 14 % loss with less CPU and fewer bytes per goodput byte (sans-IO, synthetic time).

A bulk burst's blocks get a leaner per-block target by default (``fec_bulk_target`` 0.8,
was 0.99): a block FEC misses is retransmitted inside the window, which costs a bulk
stream no completion time, while each repair costs bytes and zfec's encode grows with
the repairs. Blocks that carry a request's data keep the request target, and a burst's
last bandwidth-delay product keeps the old 0.99 (a retransmission there adds a round trip
to the burst's end).
"""

from __future__ import annotations

from tierwise.proto.relay import RelayConfig
from tierwise.proto.relay.connection import FEC_BULK_TAIL_TARGET
from tierwise.proto.relay.fec import CODE_ZFEC, FecDecoder, FecEncoder
from tierwise.sim.relay import Net, OneWayPath, payload


def _bulk(config: RelayConfig | None) -> dict[str, int]:
    """A 30 MB bulk stream client → gateway at 14 % loss each way, 200 ms, 50 Mbit/s:
    what the client sent and the gateway delivered and rebuilt between 1.2 s and 4 s
    (past start-up, the stream far from its end)."""
    rate = 50e6 / 8
    net = Net(
        OneWayPath(rate_bytes_per_s=rate, loss=0.14),
        OneWayPath(rate_bytes_per_s=rate, loss=0.14),
        seed=5,
        config=config,
    )
    net.run(5, lambda: net.client.established)
    sid = net.client.open_stream(priority=5)
    start = net.now
    net.client.send(sid, payload("bulk", 30_000_000), end_stream=True)
    marks = []
    for until in (1.2, 4.0):
        net.run(start + until)
        c, g = net.client.stats, net.gateway.stats
        got = len(net.received["gateway"].get(sid, b""))
        marks.append((c.packets_sent, c.repair_packets_sent, got, g.fec_recovered))
    (p0, r0, d0, f0), (p1, r1, d1, f1) = marks
    return {"sent": p1 - p0, "repairs": r1 - r0, "delivered": d1 - d0, "rebuilt": f1 - f0}


def test_bulk_at_14_percent_sends_fewer_repairs_and_datagrams() -> None:
    """Past start-up a bulk burst sends ≤ 0.8 × the repairs of a 0.99 per-block target
    (the old default: ≈ 1 repair per 3 data packets) and fewer datagrams per byte
    delivered, and delivers no less."""
    lean = _bulk(None)
    old = _bulk(RelayConfig(fec_bulk_target=0.99))
    assert old["repairs"] > 0.25 * (old["sent"] - old["repairs"])
    assert lean["repairs"] / lean["sent"] < 0.8 * old["repairs"] / old["sent"]
    assert lean["sent"] / lean["delivered"] < 0.98 * old["sent"] / old["delivered"]
    assert lean["delivered"] >= 0.97 * old["delivered"]


def test_a_request_beside_bulk_keeps_its_fec() -> None:
    """While a bulk burst runs on the bulk target, a block that carries a request's data
    gets the request target, and the request finishes near its floor."""
    rate = 100e6 / 8
    net = Net(
        OneWayPath(rate_bytes_per_s=rate, loss=0.14), OneWayPath(rate_bytes_per_s=rate, loss=0.14)
    )
    net.run(5, lambda: net.client.established)
    client = net.client
    bulk = client.open_stream(priority=5)
    client.send(bulk, payload("bulk", 30_000_000), end_stream=True)
    net.run(net.now + 1.5)  # the bulk burst is far past 16 blocks
    assert not client._block_small
    assert client._block_target() == client.config.fec_bulk_target
    up, down = payload("up", 354_640), payload("down", 1000)
    net.on_gateway_stream = lambda sid, data: (
        net.gateway.send(sid, down, end_stream=True) if sid != bulk else None
    )
    times = []
    for i in range(4):
        sid = client.open_stream(priority=0)
        start = net.now
        client.send(sid, up, end_stream=True)
        if i == 0:  # step until the request's packets are in the open block
            net.run(start + 0.5, lambda: client._block_small)
            assert client._block_small
            assert client._block_target() >= client.config.fec_target
        net.run(start + 10, lambda sid=sid: sid in net.finished["client"])
        assert bytes(net.received["client"].pop(sid)) == down
        times.append(net.now - start)
    floor = 0.2 + (354_640 + 1000) / rate
    assert sorted(times)[1] < 1.25 * floor, [round(t / floor, 2) for t in times]


def test_a_bulk_bursts_last_bdp_keeps_the_tail_target() -> None:
    """Once less than a bandwidth-delay product is queued, a bulk block gets
    ``FEC_BULK_TAIL_TARGET`` (0.99): its losses would lengthen the burst by a round trip."""
    rate = 100e6 / 8
    net = Net(
        OneWayPath(rate_bytes_per_s=rate, loss=0.14), OneWayPath(rate_bytes_per_s=rate, loss=0.14)
    )
    net.run(5, lambda: net.client.established)
    client = net.client
    sid = client.open_stream(priority=5)
    client.send(sid, payload("bulk", 8_000_000), end_stream=True)

    def bdp() -> float:
        return client.rate.btl_bw_bytes_per_s * (client.rate.min_rtt_s or 0.0)

    def steady() -> bool:  # past start-up and the bulk mark, well before the end
        sent = client.stats.stream_bytes_sent
        return not client.rate.startup and sent > 2_000_000 and client._queued_bytes() > bdp()

    net.run(net.now + 2.0, steady)
    assert steady()
    assert client._block_target() == client.config.fec_bulk_target == 0.8
    net.run(net.now + 5.0, lambda: 0 < client._queued_bytes() < bdp())
    assert 0 < client._queued_bytes() < bdp()
    assert client._block_target() == FEC_BULK_TAIL_TARGET == 0.99


def test_a_decoder_does_not_rescan_a_block_it_has_rebuilt() -> None:
    """Repairs that arrive after their block was rebuilt are counted as spare and cost
    no scan of the block's packets (the lookup is not called again)."""
    enc = FecEncoder(CODE_ZFEC, 8, 0.999)
    datagrams = [bytes([i]) * 100 for i in range(8)]
    for pn, d in enumerate(datagrams):
        enc.add(pn, d, protect=True)
    repairs = enc.close(0.3)
    assert len(repairs) >= 3
    dec = FecDecoder()
    seen = {pn for pn in range(8) if pn != 2}
    for pn in seen:
        dec.on_datagram(pn, datagrams[pn])
    calls = []

    def received(pn: int) -> bool:
        calls.append(pn)
        return pn in seen

    assert dec.on_repair(repairs[0], received) == [datagrams[2]]
    seen.add(2)
    calls.clear()
    for extra in repairs[1:]:
        assert dec.on_repair(extra, received) == []
    assert calls == [] and dec.spare_repairs == len(repairs) - 1


def test_bulk_target_zero_is_accepted_and_sends_no_repairs() -> None:
    """``fec_bulk_target = 0`` is valid (bulk blocks retransmit); a block closed with a
    zero target has no repairs."""
    assert RelayConfig(fec_bulk_target=0.0).fec_bulk_target == 0.0
    enc = FecEncoder(CODE_ZFEC, 8, 0.999)
    for pn in range(8):
        enc.add(pn, bytes(50), protect=True)
    assert enc.close(0.14, 0.0) == []
