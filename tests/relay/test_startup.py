"""A client started before its gateway: once the gateway is up, one session, not two.

`relay client` says HELLO again every ``REDIAL_S`` while the handshake is unanswered (no
backoff: the user is waiting). Opening a fresh session for each of those would race the
old session's own HELLO retry: a gateway a round trip away answers both, keeps a second
session until its idle timeout, and the client drops the first WELCOME as forged. The
retry is the same HELLO, so a gateway answers it from the session it has.
"""

from __future__ import annotations

import asyncio

import pytest

from tierwise.relay.client import REDIAL_S, Client
from tierwise.relay.gateway import Gateway

from .conftest import KEY

ONE_WAY_S = 0.02


class _Far(asyncio.DatagramProtocol):
    """A UDP hop ``ONE_WAY_S`` long each way, to a gateway that may not be up yet."""

    def __init__(self) -> None:
        self.gateway: tuple[str, int] | None = None
        self.client: tuple[str, int] | None = None
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if addr == self.gateway:
            to = self.client
        else:
            self.client, to = addr, self.gateway
        if to is not None and self.transport is not None:
            asyncio.get_running_loop().call_later(ONE_WAY_S, self.transport.sendto, data, to)


async def _start_late(up_after_s: float) -> tuple[int, int, int]:
    loop = asyncio.get_running_loop()
    far = _Far()
    hop, _ = await loop.create_datagram_endpoint(lambda: far, local_addr=("127.0.0.1", 0))
    client = Client(KEY, ("127.0.0.1", hop.get_extra_info("sockname")[1]))
    await client.start()
    gateway = Gateway(KEY, set())
    started = loop.time()
    transport = None
    try:
        # what `relay client` does while it waits
        while not client.ready.is_set() and loop.time() - started < 10:
            if transport is None and loop.time() - started >= up_after_s:
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: gateway, local_addr=("127.0.0.1", 0)
                )
                far.gateway = transport.get_extra_info("sockname")
            try:
                await asyncio.wait_for(client.ready.wait(), REDIAL_S)
            except TimeoutError:
                client.redial()
        await asyncio.sleep(6 * ONE_WAY_S)  # any HELLO still on its way arrives
        assert client.session is not None
        dropped = client.session.conn.stats.dropped_auth + client.counters["dropped_auth"]
        return len(gateway.sessions), dropped, gateway.counters["dropped_auth"]
    finally:
        client.close()
        await asyncio.sleep(0.05)
        if transport is not None:
            transport.close()
        hop.close()


@pytest.mark.parametrize("up_after_s", [0.45, 0.95, 1.45])
def test_a_client_started_before_its_gateway_opens_one_session(up_after_s: float) -> None:
    sessions, client_drops, gateway_drops = asyncio.run(_start_late(up_after_s))
    assert (sessions, client_drops, gateway_drops) == (1, 0, 0)
