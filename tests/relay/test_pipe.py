"""A Pipe's flow-control reports: what its socket never took is still credited."""

from __future__ import annotations

import asyncio

from tierwise.proto.relay import RelayConfig
from tierwise.relay.pipe import Pipe
from tierwise.relay.session import Session
from tierwise.sim.relay import Net, payload


def test_bytes_an_aborted_pipe_never_wrote_are_credited() -> None:
    """Data delivered in the same turn as the reset that aborts the pipe frees its window."""
    net = Net(config=RelayConfig(credit_on_consume=True))
    net.run(1.0, lambda: net.client.established)
    sid = net.client.open_stream()
    net.client.send(sid, payload("dropped", 5_000))
    net.run(net.now + 0.5, lambda: len(net.received["gateway"].get(sid, b"")) == 5_000)
    conn, data = net.gateway, bytes(net.received["gateway"][sid])
    before = conn._delivered_total

    async def run() -> int:
        loop = asyncio.get_running_loop()
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        _, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        udp, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
        )
        conn.peer_addr = udp.get_extra_info("sockname")  # nothing leaves loopback
        session = Session(conn, udp, lambda s, e: None)
        pipe = Pipe(session, sid, writer)
        pipe.deliver(data, False)  # its write is due later this turn ...
        pipe.abort()  # ... but a reset aborts the pipe first
        await asyncio.sleep(0.01)
        session.close()
        udp.close()
        server.close()
        return conn._delivered_total - before

    assert asyncio.run(run()) == len(data)
