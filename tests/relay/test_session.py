"""The asyncio binding of a relay session: its one timer over a real UDP socket."""

from __future__ import annotations

import asyncio

from tierwise.proto.relay import RelayConfig, RelayConnection
from tierwise.relay.session import Session

KEY = bytes(range(32))


async def _session() -> tuple[Session, asyncio.DatagramTransport]:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
    )
    peer = transport.get_extra_info("sockname")  # HELLOs to ourselves: nobody answers
    conn = RelayConnection(KEY, is_client=True)
    conn.connect(peer, loop.time())
    return Session(conn, transport, lambda session, event: None), transport


def test_an_earlier_timer_is_kept_and_re_armed_when_it_fires() -> None:
    """A deadline that moves later keeps the armed timer; its firing re-arms the real one."""

    async def run() -> None:
        session, transport = await _session()
        try:
            session._arm()  # the HELLO is due now
            early = session._timer_at
            session.conn.datagrams_to_send(session.now())  # HELLO out: next one in 0.5 s
            assert session.conn.get_timer() > early
            session._arm()
            assert session._timer_at == early  # no new timer handle for a later deadline
            await asyncio.sleep(0.05)
            assert session._timer_at == session.conn.get_timer()
        finally:
            session.close()
            transport.close()

    asyncio.run(run())


def test_a_deadline_moved_earlier_re_arms_at_once() -> None:
    """A deadline earlier than the armed timer replaces it."""

    async def run() -> None:
        session, transport = await _session()
        try:
            session.transmit()  # HELLO out, timer at the retry (0.5 s)
            later = session._timer_at
            session.conn._hello_at = session.now() + 0.01
            session._arm()
            assert session._timer_at is not None and session._timer_at < later
        finally:
            session.close()
            transport.close()

    asyncio.run(run())


def test_session_sockets_get_wide_kernel_buffers() -> None:
    """The session socket's receive buffer is 8 MB (as root), not rmem_default's 208 KB."""
    import os

    from tierwise.relay.session import SOCKET_BUFFER_BYTES, widen_buffers

    async def widen() -> int:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
        )
        try:
            return widen_buffers(transport)
        finally:
            transport.close()

    got = asyncio.run(widen())
    with open("/proc/sys/net/core/rmem_max") as f:
        cap = int(f.read())
    assert got == SOCKET_BUFFER_BYTES if os.geteuid() == 0 else got >= min(cap, 1 << 17)


def test_a_batch_sends_the_first_prompt_ack_before_feeding_the_rest() -> None:
    """A gateway reading a new session's first flight twelve datagrams at a time sends the
    ACK its peer waits for after the second (ack_every), before the other ten are fed, and
    the next one after the batch: the client learns the flight has arrived a batch sooner.
    Once a flight: the next batch's ACK waits for its end, as before."""
    import socket

    from tests.proto.pair import drain

    async def run() -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
        )
        peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        peer.bind(("127.0.0.1", 0))
        peer.settimeout(2.0)
        client_addr, gw_addr = peer.getsockname(), transport.get_extra_info("sockname")
        # no opening probe: the flight below is the first the gateway reads
        client = RelayConnection(KEY, is_client=True, config=RelayConfig(open_probe_packets=0))
        gateway = RelayConnection(KEY, is_client=False)
        session = Session(gateway, transport, lambda session, event: None)
        try:
            now = loop.time()
            t = now - 1.0  # the handshake and a ping a second ago: the gateway knows the RTT
            client.connect(gw_addr, t)
            for data, _ in client.datagrams_to_send(t):
                gateway.receive_datagram(data, client_addr, t + 0.05)
            for data, _ in gateway.datagrams_to_send(t + 0.05):
                client.receive_datagram(data, gw_addr, t + 0.1)
            gateway.ping()
            for data, _ in gateway.datagrams_to_send(t + 0.2):
                client.receive_datagram(data, gw_addr, t + 0.25)
            for data, _ in drain(client, t + 0.3):  # its ACK, after the ACK delay
                gateway.receive_datagram(data, client_addr, t + 0.35)
            assert gateway._rtt.min_s is not None
            first_pn = client._pn
            client.send(client.open_stream(), bytes(20 * 1300), end_stream=True)
            flight = [(d, client_addr) for d, _ in drain(client, now)]
            session.receive_batch(flight[:12], None)
            client.receive_datagram(peer.recv(2048), gw_addr, loop.time())
            assert client._largest_acked == first_pn + 1  # sent after the second datagram
            session.transmit()
            client.receive_datagram(peer.recv(2048), gw_addr, loop.time())
            assert client._largest_acked == first_pn + 11
            session.receive_batch(flight[12:20], None)  # the flight's next batch: an ACK
            peer.setblocking(False)  # went a moment ago, so none leaves mid-batch
            try:
                peer.recv(2048)
                raise AssertionError("an ACK left mid-batch twice in one flight")
            except BlockingIOError:
                pass
        finally:
            session.close()
            transport.close()
            peer.close()

    asyncio.run(run())
