"""A receiver of a bulk flight reads once a millisecond, not once a datagram.

Real loopback sockets and real relay sessions: the batching endpoint's read pause
(``BatchTransport.pause_reading_for``) holds what arrives meanwhile in the kernel and
hands it over in one batch, with each datagram's own arrival time; the relay client
asks for it only while the gateway's flight is bulk (ACK_LATER), never for a request.
"""

from __future__ import annotations

import asyncio
import socket
import time

from tierwise.proto.relay import RelayConnection
from tierwise.relay.batchudp import BULK_READ_PAUSE_S, BatchTransport, open_batch_endpoint
from tierwise.relay.udp import encode_addr
from tierwise.sim.relay import Net, OneWayPath, payload

from .conftest import relay_pair


class Recorder(asyncio.DatagramProtocol):
    """Records each batch; asks for a pause of ``pause_s`` after each (0: none)."""

    def __init__(self, pause_s: float = 0.0) -> None:
        self.pause_s = pause_s
        self.batches: list[list[bytes]] = []
        self.arrivals: list[list[float]] = []
        self.transport: BatchTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagrams_received(self, batch: list[tuple[bytes, tuple]], arrivals: list[float]) -> None:
        self.batches.append([data for data, _ in batch])
        self.arrivals.append(arrivals)
        if self.pause_s and self.transport is not None:
            self.transport.pause_reading_for(self.pause_s)


def _paced(port: int, count: int, gap_s: float) -> float:
    """Send ``count`` datagrams ``gap_s`` apart (a thread: the loop under test pauses);
    how long the sending took."""
    start = time.monotonic()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        for i in range(count):
            tx.sendto(i.to_bytes(4, "big") * 50, ("127.0.0.1", port))
            time.sleep(gap_s)
    return time.monotonic() - start


def _run(pause_s: float, count: int = 40) -> tuple[Recorder, float]:
    async def run() -> tuple[Recorder, float]:
        proto = Recorder(pause_s)
        transport = await open_batch_endpoint(proto, local_addr=("127.0.0.1", 0))
        port = transport.get_extra_info("sockname")[1]
        took = await asyncio.to_thread(_paced, port, count, 0.0002)
        await asyncio.sleep(0.05)
        transport.close()
        return proto, took

    return asyncio.run(run())


def test_a_paused_reader_takes_what_arrived_meanwhile_in_one_batch() -> None:
    """Datagrams 0.2 ms apart: paused 5 ms after each batch, the reader wakes at most once
    per pause while they come, every datagram in order and exactly once, each with its
    own arrival time."""
    proto, took = _run(pause_s=0.005)
    flat = [d for batch in proto.batches for d in batch]
    assert flat == [i.to_bytes(4, "big") * 50 for i in range(40)]
    assert len(proto.batches) <= took / 0.005 + 2
    stamps = [t for batch in proto.arrivals for t in batch]
    assert stamps == sorted(stamps)
    # a batch's datagrams keep their arrival spacing, not the read's single time
    big = max(proto.arrivals, key=len)
    assert len(big) >= 2 and big[-1] > big[0]
    assert proto.transport is not None and proto.transport.pauses == len(proto.batches)


def test_a_closed_transport_ends_a_pause_quietly() -> None:
    async def run() -> Recorder:
        proto = Recorder(pause_s=0.01)
        transport = await open_batch_endpoint(proto, local_addr=("127.0.0.1", 0))
        port = transport.get_extra_info("sockname")[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.sendto(b"one", ("127.0.0.1", port))
            await asyncio.sleep(0.003)
            transport.close()  # during the pause that reading "one" started
            tx.sendto(b"two", ("127.0.0.1", port))
        await asyncio.sleep(0.03)
        return proto

    proto = asyncio.run(run())
    assert proto.batches == [[b"one"]]


def test_only_a_bulk_flight_asks_for_a_pause() -> None:
    """The sans-IO flag the I/O layer reads: a request's datagrams and start-up's never
    read as bulk; a window-filling download past start-up does."""
    net = Net(OneWayPath(rate_bytes_per_s=12.5e6), OneWayPath(rate_bytes_per_s=12.5e6))
    net.run(1.0, lambda: net.client.established)
    sid = net.client.open_stream()
    net.client.send(sid, payload("request", 354_640), end_stream=True)
    seen: list[bool] = []

    def watch(name: str, datagram: bytes) -> bytes:
        if name == "up":
            seen.append(net.gateway.bulk_arriving)
        return datagram

    net.tap = watch
    net.run(net.now + 1.0, lambda: sid in net.finished["gateway"])
    assert sid in net.finished["gateway"] and len(seen) > 200 and not any(seen)
    net.tap = None
    bulk = net.gateway.open_stream(priority=5)
    net.gateway.send(bulk, payload("bulk", 10_000_000), end_stream=True)
    net.run(net.now + 3.0, lambda: net.client.bulk_arriving)
    assert net.client.bulk_arriving, "a download past start-up arrives as bulk"
    # its sender, pacing the flight out, may read ACKs as late (nothing else waits on them)
    net.run(net.now + 1.0, lambda: net.gateway.ack_read_delay_s > 0)
    assert abs(net.gateway.ack_read_delay_s - 0.2 / 16) < 0.002
    assert net.client.ack_read_delay_s == 0.0  # the client sends only ACKs
    assert isinstance(net.client, RelayConnection)
    # on the 200 ms path a sixteenth of the RTT; never before an RTT sample
    assert abs(net.client.bulk_read_delay_s - 0.2 / 16) < 0.002
    fresh = RelayConnection(bytes(32), is_client=True)
    assert fresh.bulk_read_delay_s == 0.0


def test_a_short_path_never_pauses_the_reader() -> None:
    """On a 1 ms path a sixteenth of the RTT is below the event loop's millisecond: the
    same download arrives as bulk but may not wait."""
    net = Net(
        OneWayPath(rate_bytes_per_s=12.5e6, delay_s=0.0005),
        OneWayPath(rate_bytes_per_s=12.5e6, delay_s=0.0005),
    )
    net.run(1.0, lambda: net.client.established)
    sid = net.client.open_stream()
    net.client.send(sid, b"x", end_stream=True)
    net.run(net.now + 0.1)
    bulk = net.gateway.open_stream(priority=5)
    net.gateway.send(bulk, payload("bulk", 10_000_000), end_stream=True)
    net.run(net.now + 3.0, lambda: net.client.bulk_arriving)
    assert net.client.bulk_arriving
    assert 0 < net.client.bulk_read_delay_s < BULK_READ_PAUSE_S


def test_the_relay_client_pauses_its_reads_during_a_download(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A real gateway and client on loopback (one event loop) carry 8 MB down through the
    SOCKS port with the client's read pause shrunk to fit loopback's RTT (a millisecond
    is many of its round trips, so the relay takes none there): the client's socket took
    pauses, and every byte arrived."""
    from tierwise.relay import client as client_module

    monkeypatch.setattr(client_module, "BULK_READ_PAUSE_S", 1e-6)
    size = 8_000_000
    data = payload("down", size)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(1)
        writer.write(data)
        await writer.drain()
        writer.close()

    async def run() -> tuple[int, int, bytes]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        target = server.sockets[0].getsockname()[1]
        async with relay_pair({("127.0.0.1", target)}) as (_gateway, client, socks):
            reader, writer = await asyncio.open_connection("127.0.0.1", socks)
            writer.write(b"\x05\x01\x00\x05\x01\x00" + encode_addr("127.0.0.1", target))
            assert await reader.readexactly(2) == b"\x05\x00"
            assert (await reader.readexactly(10))[1] == 0
            writer.write(b"D")
            got = await asyncio.wait_for(reader.read(-1), 30)
            writer.close()
            transport = client._transport
            assert isinstance(transport, BatchTransport)
            assert client.session is not None
            received = client.session.conn.stats.packets_received
            pauses = transport.pauses
        server.close()
        return pauses, received, got

    pauses, received, got = asyncio.run(run())
    assert got == data
    assert pauses > 0 and received > 0
