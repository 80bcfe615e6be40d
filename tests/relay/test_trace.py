"""The optional event trace of a relay process (``TIERWISE_RELAY_TRACE``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tierwise.proto.relay import RelayConnection
from tierwise.relay import trace
from tierwise.relay.session import Session

KEY = bytes(range(32))


def test_untraced_process_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the variable tracing is off and an event is a no-op."""
    monkeypatch.delenv(trace.ENV, raising=False)
    monkeypatch.setattr(trace, "_checked", False)
    monkeypatch.setattr(trace, "_file", None)
    assert not trace.enabled()
    trace.event("rx", 1)  # nowhere to write: must not raise


def test_a_handshake_over_loopback_is_traced_on_the_monotonic_clock(traced: Path) -> None:
    """Two sessions on real UDP sockets: the trace has their datagrams, in time order."""
    start = time.monotonic()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        sessions: list[Session] = []

        class Proto(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: tuple) -> None:
                index = 1 if addr[1] == ports[0] else 0
                sessions[index].datagram_received(data, addr)

        transports = [
            (await loop.create_datagram_endpoint(Proto, local_addr=("127.0.0.1", 0)))[0]
            for _ in range(2)
        ]
        ports = [t.get_extra_info("sockname")[1] for t in transports]
        client = RelayConnection(KEY, is_client=True)
        gateway = RelayConnection(KEY, is_client=False)
        client.connect(("127.0.0.1", ports[1]), loop.time())
        for conn, transport in zip((client, gateway), transports, strict=True):
            sessions.append(Session(conn, transport, lambda s, e: None))
        sessions[0].transmit()
        for _ in range(100):
            if client.established:
                break
            await asyncio.sleep(0.01)
        assert client.established
        for session, transport in zip(sessions, transports, strict=True):
            session.close()
            transport.close()

    asyncio.run(run())
    trace._file.flush()
    rows = [line.split() for line in traced.read_text().splitlines()]
    kinds = {row[1] for row in rows}
    assert {"rx", "tx"} <= kinds
    times = [float(row[0]) for row in rows]
    assert times == sorted(times) and start <= times[0] <= time.monotonic()
    assert all(len(row) == 11 for row in rows if row[1] == "tx")
