"""``GET /stats`` on the SOCKS port answers loopback peers only, by the one loopback rule."""

from __future__ import annotations

import asyncio
import json

import pytest

from tierwise.relay.socks import _stats


class Peer:
    """The reader and writer of one connection from ``peer``; what was written is kept."""

    def __init__(self, peer: tuple) -> None:
        self.peer = peer
        self.written = b""

    async def readuntil(self, separator: bytes) -> bytes:
        return b"ET /stats HTTP/1.0" + separator

    def get_extra_info(self, name: str) -> tuple:
        assert name == "peername"
        return self.peer

    def write(self, data: bytes) -> None:
        self.written += data

    async def drain(self) -> None:
        pass


class Snapshot:
    def snapshot(self) -> dict:
        return {"role": "client", "srtt_s": 0.01}


@pytest.mark.parametrize(
    ("peer", "answered"),
    [
        (("127.0.0.1", 40000), True),
        (("::1", 40000, 0, 0), True),
        # a dual-stack listener ([::]) shows an IPv4 peer mapped: 127.0.0.1 is still loopback
        (("::ffff:127.0.0.1", 40000, 0, 0), True),
        (("::ffff:10.0.0.1", 40000, 0, 0), False),
        (("10.0.0.1", 40000), False),
        (("fe80::1%lo", 40000, 0, 1), False),
    ],
)
def test_stats_answers_loopback_peers_only(peer: tuple, answered: bool) -> None:
    conn = Peer(peer)
    asyncio.run(_stats(Snapshot(), conn, conn))  # type: ignore[arg-type]
    if not answered:
        assert conn.written == b""
        return
    head, _, body = conn.written.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200 OK") and json.loads(body)["srtt_s"] == 0.01
