"""The kernel's programs on the relay's sockets: what passes, what is dropped and counted.

Small bursts on loopback (no flood): each program is run by the kernel itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

import pytest

from tests.relay.conftest import KEY
from tierwise.proto.relay import wire
from tierwise.proto.relay.crypto import ADMIT_SLOTS
from tierwise.relay import gateway as gateway_module
from tierwise.relay import kfilter
from tierwise.relay.batchudp import kernel_drops, open_batch_endpoint
from tierwise.relay.client import Client
from tierwise.relay.gateway import Gateway
from tierwise.relay.metrics import render_metrics


def _pair() -> tuple[socket.socket, socket.socket, int]:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    return rx, tx, rx.getsockname()[1]


def _drain(sock: socket.socket) -> list[bytes]:
    time.sleep(0.05)
    got = []
    while True:
        try:
            got.append(sock.recv(65535))
        except BlockingIOError:
            return got


def data(cid: bytes, n: int = 60) -> bytes:
    return bytes([wire.DATA]) + cid + os.urandom(n)


def hello() -> bytes:
    return bytes([wire.HELLO]) + os.urandom(wire.HELLO_BYTES - 1)


def test_gateway_program_passes_hellos_and_its_sessions_only() -> None:
    cid, other = os.urandom(8), os.urandom(8)
    rx, tx, port = _pair()
    assert kfilter.attach(rx, kfilter.gateway_program([cid, os.urandom(8)]))
    good = [data(cid), data(cid, 1400), hello()]
    bad = [data(other), os.urandom(100), b"", bytes([wire.WELCOME]) + cid + bytes(60),
           bytes([wire.HELLO]) + os.urandom(300), data(cid)[:32]]  # fmt: skip
    for d in good + bad:
        tx.sendto(d, ("127.0.0.1", port))
    assert sorted(_drain(rx)) == sorted(good)
    assert kernel_drops(rx) == len(bad)  # the socket's drops count the filter's


def numbered(cid: bytes, pn: int, n: int = 60) -> bytes:
    return wire.HEADER.pack(wire.DATA, cid, pn) + os.urandom(n)


def test_client_program_passes_welcome_and_data_of_its_ids() -> None:
    """WELCOME and DATA of its ids with a number its session could have reached; a forged
    DATA's random 64-bit number (a live id, a bad tag: client-badtag) is dropped."""
    cid = os.urandom(8)
    rx, tx, port = _pair()
    assert kfilter.attach(rx, kfilter.client_program([cid]))
    good = [
        bytes([wire.WELCOME]) + cid + bytes(100),
        numbered(cid, 5),
        numbered(cid, (1 << 32) + 7),
    ]
    bad = [numbered(os.urandom(8), 5), hello(), os.urandom(50), numbered(cid, 2 << 32),
           numbered(cid, 0xDEADBEEF_00000001), numbered(cid, (1 << 64) - 1)]  # fmt: skip
    for d in good + bad:
        tx.sendto(d, ("127.0.0.1", port))
    assert sorted(_drain(rx)) == sorted(good)
    assert kernel_drops(rx) == len(bad)
    assert kfilter.attach(rx, kfilter.client_program([cid], pn_high=1))  # a long session
    good, bad = [numbered(cid, 2 << 32), numbered(cid, (3 << 32) - 1)], [numbered(cid, 3 << 32)]
    for d in good + bad:
        tx.sendto(d, ("127.0.0.1", port))
    assert sorted(_drain(rx)) == sorted(good)
    assert kernel_drops(rx) == 6 + 1


def test_programs_stay_within_the_kernel_limit() -> None:
    ids = [os.urandom(8) for _ in range(kfilter.MAX_FILTER_IDS)]
    assert len(kfilter.gateway_program(ids)) <= kfilter.BPF_MAXINSNS
    peers = [(cid, ("127.0.0.1", 40000 + i)) for i, cid in enumerate(ids)]
    assert len(kfilter.steer_program(peers)) <= kfilter.BPF_MAXINSNS
    # past the limit: the shape alone, never a refusal (and never a dropped session)
    many = [*ids, os.urandom(8)]
    assert len(kfilter.gateway_program(many)) < 20
    assert len(kfilter.steer_program([(c, ("::1", 1)) for c in many])) < 20


async def _guarded() -> tuple[Gateway, asyncio.DatagramTransport, tuple[str, int]]:
    gateway = Gateway(KEY, set())
    transport = await open_batch_endpoint(gateway, local_addr=("127.0.0.1", 0), reuse_port=True)
    assert gateway.guard()
    return gateway, transport, transport.get_extra_info("sockname")


def test_the_filter_follows_sessions_as_they_come_and_go() -> None:
    """A new session's datagrams pass (through the fast socket); garbage and a closed
    session's datagrams are dropped by the kernel and counted as dropped_kernel."""

    async def run() -> None:
        gateway, transport, addr = await _guarded()
        clients = []
        try:
            junk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for _ in range(200):
                junk.sendto(os.urandom(80), addr)
                junk.sendto(data(os.urandom(8)), addr)
            for _ in range(3):  # sessions opened one after another: each one's HELLO passes
                client = Client(KEY, addr)
                await client.start()
                await asyncio.wait_for(client.ready.wait(), 5)
                clients.append(client)
            assert len(gateway.sessions) == 3
            reads = gateway.transport.reads  # type: ignore[union-attr]
            for client in clients:
                client._probe()
            await asyncio.sleep(0.2)
            assert gateway.transport.reads > reads  # type: ignore[union-attr]  # fast socket
            assert gateway.dropped == 0  # Python saw none of the junk
            assert gateway.totals()["dropped_kernel"] >= 400
            # a session ends: its id leaves the programs
            gone = clients.pop()
            cid = gone.session.conn.connection_id  # type: ignore[union-attr]
            gone.close()
            deadline = time.monotonic() + 5
            while cid in gateway.sessions:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            before = gateway.kernel_drops()
            for _ in range(50):
                junk.sendto(data(cid), addr)
            await asyncio.sleep(0.1)
            assert gateway.kernel_drops() - before == 50 and gateway.dropped == 0
            # the others carry on, and a moved client (a new port) is followed
            await clients[0].rebind()
            clients[0]._probe()
            await asyncio.sleep(0.3)
            moved = gateway.sessions[clients[0].session.conn.connection_id]  # type: ignore[union-attr]
            assert moved.conn.peer_addr == clients[0]._transport.get_extra_info("sockname")  # type: ignore[union-attr]
            assert gateway._peers[moved.conn.connection_id] == moved.conn.peer_addr
        finally:
            for client in clients:
                client.close()
            gateway.close()
            transport.close()

    asyncio.run(run())


def test_at_rest_a_session_costs_no_filter() -> None:
    """No flood: nothing is dropped, the session socket has no filter of its own (the
    steering decides once per datagram), and a session's datagrams are all read there."""

    async def run() -> None:
        gateway, transport, addr = await _guarded()
        client = Client(KEY, addr)
        try:
            await client.start()
            await asyncio.wait_for(client.ready.wait(), 5)
            slow = gateway._hello_transport
            assert slow is not None
            slow_reads = slow.reads
            for _ in range(20):
                client._probe()
                await asyncio.sleep(0.01)
            assert slow.reads == slow_reads
            assert gateway.kernel_drops() == 0 and gateway.dropped == 0
            assert client.counters.get("dropped_kernel", 0) == 0
        finally:
            client.close()
            gateway.close()
            transport.close()

    asyncio.run(run())


def test_kernel_drops_are_in_the_metrics() -> None:
    async def run() -> bytes:
        gateway, transport, addr = await _guarded()
        try:
            junk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for _ in range(30):
                junk.sendto(os.urandom(40), addr)
            await asyncio.sleep(0.1)
            assert gateway.snapshot()["totals"]["dropped_kernel"] == 30
            return render_metrics(gateway.snapshot())
        finally:
            gateway.close()
            transport.close()

    text = asyncio.run(run()).decode()
    assert 'tierwise_relay_gateway_datagrams_dropped_total{reason="kernel"} 30.0' in text


def test_a_flood_is_one_log_line_a_minute(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drops above FLOOD_RATE a second: one warning, then none for a minute however long
    it lasts, then one again; one line when it ends."""
    gateway = Gateway(KEY, set())
    drops = [0]
    monkeypatch.setattr(gateway, "kernel_drops", lambda: drops[0])
    caplog.set_level(logging.INFO, "tierwise.relay.gateway")
    gateway.watch_flood(0.0)
    for t in range(1, 150):  # 149 s of 50,000 drops a second
        drops[0] += 50_000
        gateway.watch_flood(float(t))
    lines = [r for r in caplog.records if "flood" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.WARNING] * 3  # at 1 s, 61 s, 121 s
    assert "50000 datagrams/s" in lines[0].getMessage()
    gateway.watch_flood(151.0)  # quiet again
    gateway.watch_flood(152.0)
    lines = [r for r in caplog.records if "flood" in r.getMessage()]
    assert len(lines) == 4 and "flood over" in lines[-1].getMessage()
    assert gateway_module.FLOOD_WARN_EVERY_S == 60.0


def _tagged_hello(key: bytes = KEY, offset_s: float = 0.0) -> bytes:
    from tierwise.proto.relay import RelayConnection

    client = RelayConnection(key, is_client=True)
    client.connect(("127.0.0.1", 1), now=1.0, wall_s=time.time() + offset_s)
    return client.datagrams_to_send(1.0)[0][0]


def test_hello_program_passes_only_tags_it_lists() -> None:
    """The HELLO socket's filter: this version with a listed admission tag; HELLO-shaped
    datagrams without one (a flood from anyone without the key) are the kernel's drops."""
    from tierwise.proto.relay.crypto import admission_key, admission_tags

    tags = admission_tags(admission_key(KEY), time.time(), 120.0)
    for program in (kfilter.hello_program(tags=tags), kfilter.gateway_program([], tags=tags)):
        rx, tx, port = _pair()
        assert kfilter.attach(rx, program)
        good = [_tagged_hello(), _tagged_hello(offset_s=-110.0), _tagged_hello(offset_s=110.0)]
        old = bytearray(_tagged_hello())
        old[wire.HELLO_VERSION_AT] = 0
        bad = [hello(), _tagged_hello(bytes(32)), _tagged_hello(offset_s=400.0), bytes(old),
               _tagged_hello()[:600]]  # fmt: skip
        for d in good + bad:
            tx.sendto(d, ("127.0.0.1", port))
        assert sorted(_drain(rx)) == sorted(good)
        assert kernel_drops(rx) == len(bad)
    assert len(kfilter.hello_program(tags=[os.urandom(8)] * 2 + [os.urandom(8)])) == 9 + 11
    # past MAX_TAGS: the shape alone, within the kernel's limit
    many = [os.urandom(8) for _ in range(kfilter.MAX_TAGS + 1)]
    assert len(kfilter.hello_program(tags=many)) < 20


def test_a_guarded_gateway_admits_keyed_hellos_and_the_kernel_drops_the_rest() -> None:
    """HELLO-shaped datagrams without the key's tag never reach Python; a client whose
    clock is 100 s off still gets in; the tags rotate with the window."""

    async def run() -> None:
        gateway, transport, addr = await _guarded()
        client = None
        try:
            junk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for _ in range(300):
                junk.sendto(hello(), addr)
                junk.sendto(_tagged_hello(bytes(32)), addr)
            slow = gateway._hello_transport
            assert slow is not None
            await asyncio.sleep(0.1)
            assert slow.reads == 0 and gateway.dropped == 0
            assert gateway.kernel_drops() == 600
            junk.sendto(_tagged_hello(offset_s=100.0), addr)
            await asyncio.sleep(0.1)
            assert slow.reads == 1 and len(gateway.sessions) == 1
            client = Client(KEY, addr)
            await client.start()
            await asyncio.wait_for(client.ready.wait(), 5)
            assert len(gateway.sessions) == 2 and gateway.kernel_drops() == 600
            tags = gateway.admit_tags
            assert gateway._admission(time.time() + 30.0)
            slots = ADMIT_SLOTS  # one window in, one out: each with its slots' tags
            assert len(gateway.admit_tags - tags) == slots == len(tags - gateway.admit_tags)
            assert gateway._admit_timer is not None
        finally:
            if client is not None:
                client.close()
            gateway.close()
            transport.close()
        assert gateway._admit_timer is None

    asyncio.run(run())


def test_a_program_the_kernel_refuses_is_loosened_never_left_stale() -> None:
    """Steering for 400 sessions (3,600 instructions: more than this kernel's option
    memory takes) falls back to the shape alone: a session's DATA still reaches the
    session socket, whether or not the kernel took the long program."""
    group = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
    for sock in group:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setblocking(False)
    group[0].bind(("127.0.0.1", 0))
    for sock in group[1:]:
        sock.bind(group[0].getsockname())
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("127.0.0.1", 0))
    peers = [(os.urandom(8), ("127.0.0.1", 20000 + i)) for i in range(399)]
    cid = os.urandom(8)
    peers.append((cid, tx.getsockname()))
    assert kfilter.attach_steering(group[0], kfilter.steer_program(peers[:2]))
    prog = kfilter.steer_program(peers)
    assert len(prog) > 3000
    assert kfilter.attach_or_loosen(
        group[0], prog, kfilter.steer_program(loose=True), steering=True
    )
    for _ in range(20):
        tx.sendto(data(cid), group[0].getsockname())
    assert len(_drain(group[0])) == 20
    assert _drain(group[1]) == _drain(group[2]) == []
