"""Security over real sockets on loopback: tampered datagrams, wrong keys, never an open proxy."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from tests.relay.conftest import KEY, Stack
from tierwise.proto.relay import RelayConfig, RelayConnection, wire
from tierwise.relay.client import Client
from tierwise.relay.gateway import Gateway
from tierwise.relay.socks import serve_socks
from tierwise.relay.udp import encode_addr


class Recorder:
    """Wraps the client's datagram transport and keeps a copy of what it sends."""

    def __init__(self, inner: asyncio.DatagramTransport) -> None:
        self.inner, self.sent, self.withheld = inner, [], []

    def sendto(self, data: bytes, addr: object = None) -> None:
        self.sent.append(bytes(data))
        if data[0] == wire.DATA and not self.withheld:
            self.withheld.append(bytes(data))  # lost on the way: its packet number stays fresh
            return
        self.inner.sendto(data, addr)


def socks_status(port: int, host: str, target_port: int) -> int:
    """The reply code of a SOCKS5 CONNECT to ``host:target_port``."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(b"\x05\x01\x00")
        assert s.recv(2) == b"\x05\x00"
        s.sendall(b"\x05\x01\x00" + encode_addr(host, target_port))
        return s.recv(10)[1]


def test_tampered_datagrams_are_dropped_unanswered(stack: Stack) -> None:
    """Replayed, truncated, bit-flipped and forged datagrams: counted, dropped, never answered."""
    assert socks_status(stack.socks_port, "127.0.0.1", stack.http_port) == 0
    session = stack.client.session
    assert session is not None
    recorder = Recorder(session.transport)
    session.transport = recorder  # type: ignore[assignment]
    assert socks_status(stack.socks_port, "127.0.0.1", stack.http_port) == 0
    deadline = time.monotonic() + 5.0  # the reply no longer waits for the gateway (no extra RTT)
    while len(data := [d for d in recorder.sent if d[0] == wire.DATA]) < 2:
        assert time.monotonic() < deadline, "no DATA datagram after the withheld one"
        time.sleep(0.01)
    gw_session = next(iter(stack.gateway.sessions.values()))
    original = data[-1]
    # A replay is a copy of what the gateway already took: wait until it has taken the
    # original (a copy that outruns it is the first authentic arrival, not a replay).
    original_pn = int.from_bytes(original[9:17], "big")
    while not gw_session.conn._replay.seen.contains(original_pn):
        assert time.monotonic() < deadline, "the gateway never took the original"
        time.sleep(0.01)
    before = dict(vars(gw_session.conn.stats))
    peer = gw_session.conn.peer_addr
    fresh = recorder.withheld[0]  # authentic, never delivered: only the AEAD can reject a flip
    flipped = [fresh[:i] + bytes([fresh[i] ^ 1 << (i % 8)]) + fresh[i + 1 :]
               for i in range(wire.HEADER_BYTES, len(fresh), 7)]  # fmt: skip
    pn_bumped = original[:9] + (2**40).to_bytes(8, "big") + original[17:]
    forged = original[: wire.HEADER_BYTES] + os.urandom(len(original) - wire.HEADER_BYTES)
    attacks = [original, original[:-1], original[: wire.HEADER_BYTES + 3], pn_bumped, forged]
    attacks += flipped
    attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    attacker.bind(("127.0.0.1", 0))
    attacker.settimeout(0.5)
    try:
        for datagram in attacks:
            attacker.sendto(datagram, ("127.0.0.1", stack.gateway_port))
        try:
            answer = attacker.recv(2048)
        except TimeoutError:
            answer = None
    finally:
        attacker.close()
    stats = vars(gw_session.conn.stats)
    drops = ("dropped_replay", "dropped_auth", "dropped_token", "dropped_malformed")
    rejected = sum(stats[k] - before[k] for k in drops)
    assert answer is None  # no amplification, no oracle
    assert stats["dropped_replay"] > before["dropped_replay"]
    # a flip in the packet number's token fails before the AEAD, any other at the AEAD
    failed = sum(stats[k] - before[k] for k in ("dropped_auth", "dropped_token"))
    assert failed >= len(flipped)
    assert rejected + stack.gateway.dropped >= len(attacks)
    assert gw_session.conn.peer_addr == peer  # an attacker cannot steer the session
    assert socks_status(stack.socks_port, "127.0.0.1", stack.http_port) == 0  # still works


class Racer:
    """Holds the client's datagrams back while armed, so an attacker's copy arrives first."""

    def __init__(self, inner: asyncio.DatagramTransport) -> None:
        self.inner, self.queue, self.holding = inner, [], True

    def sendto(self, data: bytes, addr: object = None) -> None:
        if self.holding:
            self.queue.append((bytes(data), addr))
        else:
            self.inner.sendto(data, addr)

    async def release(self) -> None:
        self.holding = False
        for data, addr in self.queue:
            self.inner.sendto(data, addr)


def test_a_copy_that_outruns_the_original_gets_a_challenge_not_the_session(stack: Stack) -> None:
    """An on-path attacker races an authentic datagram from its own address (RFC 9000 §9.3).

    The gateway takes the copy (it is the first to arrive) but does not move the session:
    it challenges the new address with a datagram a fraction of the copy's size, sends
    nothing else there, and keeps serving the client where it was validated.
    """
    assert socks_status(stack.socks_port, "127.0.0.1", stack.http_port) == 0
    session = stack.client.session
    assert session is not None
    gw_conn = next(iter(stack.gateway.sessions.values())).conn
    peer = gw_conn.peer_addr
    racer = Racer(session.transport)
    session.transport = racer  # type: ignore[assignment]
    attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    attacker.bind(("127.0.0.1", 0))
    attacker.settimeout(0.3)
    with ThreadPoolExecutor(1) as pool:
        status = pool.submit(socks_status, stack.socks_port, "127.0.0.1", stack.http_port)
        deadline = time.monotonic() + 10.0
        while not [d for d, _ in racer.queue if d[0] == wire.DATA]:
            assert time.monotonic() < deadline, "the client sent no DATA datagram"
            time.sleep(0.01)
        copy = [d for d, _ in racer.queue if d[0] == wire.DATA][-1]
        attacker.sendto(copy, ("127.0.0.1", stack.gateway_port))
        pn = int.from_bytes(copy[9:17], "big")
        while not gw_conn._replay.seen.contains(pn):  # the copy arrived first
            assert time.monotonic() < deadline, "the gateway never took the copy"
            time.sleep(0.01)
        stack.call(racer.release())
        assert status.result(20) == 0  # the client's request carried on
    got: list[bytes] = []
    try:
        while True:
            got.append(attacker.recv(2048))
    except TimeoutError:
        pass
    finally:
        attacker.close()
    assert got, "no challenge: the new address was neither validated nor refused"
    assert sum(map(len, got)) <= 3 * len(copy)  # no amplification
    keys = session.conn._recv_keys
    for datagram in got:  # only challenges went there: no ACK, no stream data
        _, _, dpn = wire.parse_header(datagram)
        plain = keys.open(
            dpn, datagram[: wire.DATA_HEADER_BYTES], datagram[wire.DATA_HEADER_BYTES :]
        )
        assert plain is not None
        assert all(isinstance(f, wire.PathChallenge) for f in wire.parse_frames(plain))
    assert gw_conn.peer_addr == peer and gw_conn.stats.paths_validated == 0
    assert socks_status(stack.socks_port, "127.0.0.1", stack.http_port) == 0


def test_wrong_key_exchanges_no_application_data(stack: Stack) -> None:
    """A client with another key gets not one datagram back and reaches no destination."""

    async def attempt() -> tuple[float, int]:
        client = Client(os.urandom(32), ("127.0.0.1", stack.gateway_port))
        await client.start()
        server = await serve_socks(client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        status = await loop.run_in_executor(None, socks_status, port, "127.0.0.1", stack.http_port)
        server.close()
        return client.last_rx_s, status

    import tierwise.relay.client as client_module

    timeout_s = client_module.STATUS_TIMEOUT_S
    client_module.STATUS_TIMEOUT_S = 1.0
    try:
        connected = stack.gateway.counters["connected"]
        last_rx_s, status = stack.call(attempt())
    finally:
        client_module.STATUS_TIMEOUT_S = timeout_s
    assert last_rx_s == 0.0  # not a single datagram came back
    assert status == 1  # general failure: no session
    assert stack.gateway.counters["connected"] == connected and len(stack.gateway.sessions) == 1


def test_never_an_open_proxy(stack: Stack) -> None:
    """Other ports, other spellings of an allowed address and names get SOCKS reply 2."""
    port = stack.http_port
    refused = [
        ("127.0.0.1", port + 1),  # a neighbouring port
        ("127.0.0.1", 22),
        ("::1", port),  # IPv6 literal of the same host
        ("::ffff:127.0.0.1", port),  # IPv4-mapped IPv6
        ("127.1", port),  # resolves to 127.0.0.1, but is not the allowed name
        ("2130706433", port),  # 127.0.0.1 as a number
        ("localhost.localdomain", port),
        ("127.0.0.2", port),
    ]
    connected = stack.gateway.counters["connected"]
    for host, p in refused:
        assert socks_status(stack.socks_port, host, p) == 2, (host, p)
    assert stack.gateway.counters["refused"] == len(refused)
    assert stack.gateway.counters["connected"] == connected  # nothing reached any server
    for host in ("127.0.0.1", "LOCALHOST"):  # the allowed ones, however spelled
        assert socks_status(stack.socks_port, host, port) == 0, host


def refused_or_reset(port: int, target_port: int) -> bool:
    """Reply 1, or (a destination known good: the reply is optimistic) reply 0 then a reset."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(b"\x05\x01\x00")
        assert s.recv(2) == b"\x05\x00"
        s.sendall(b"\x05\x01\x00" + encode_addr("127.0.0.1", target_port))
        code = s.recv(10)[1]
        if code != 0:
            return code == 1
        try:  # the reset may come before the request is even written
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            s.recv(100)  # a FIN (b"") or data would pass for a clean end
            return False
        except ConnectionResetError:
            return True


def test_streams_past_the_limit_are_refused(stack: Stack) -> None:
    """A session's open streams are bounded: one more gets reply 1 at once, a freed slot works."""

    async def up() -> tuple[int, list]:
        gateway = Gateway(KEY, {("127.0.0.1", stack.http_port)}, RelayConfig(max_streams=4))
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: gateway, local_addr=("127.0.0.1", 0)
        )
        client = Client(KEY, transport.get_extra_info("sockname"))
        await client.start()
        server = await serve_socks(client, "127.0.0.1", 0)
        return server.sockets[0].getsockname()[1], [server.close, transport.close]

    port, closers = stack.call(up())
    held = []
    try:
        for _ in range(10):  # refused streams must not keep a slot
            assert socks_status(port, "127.0.0.1", stack.http_port + 1) == 2
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"\x05\x01\x00")
            s.recv(2)
            s.sendall(b"\x05\x01\x00" + encode_addr("127.0.0.1", stack.http_port))
            assert s.recv(10)[1] == 0
            held.append(s)
        t0 = time.monotonic()
        assert refused_or_reset(port, stack.http_port)
        assert time.monotonic() - t0 < 4.0  # refused, not timed out (the read waits 20 s)
        held.pop().close()
        time.sleep(0.2)
        assert socks_status(port, "127.0.0.1", stack.http_port) == 0
    finally:
        for s in held:
            s.close()
        for close in closers:
            stack.loop.call_soon_threadsafe(close)


def _hello(wall_s: float | None) -> tuple[RelayConnection, bytes]:
    """A client connection and the HELLO it sends, dated ``wall_s`` (None: undated)."""
    conn = RelayConnection(KEY, is_client=True)
    conn.connect(("127.0.0.1", 9), 0.0, wall_s=wall_s)
    ((hello, _),) = conn.datagrams_to_send(0.0)
    return conn, hello


def test_a_recorded_hello_opens_no_second_session() -> None:
    """An attacker who recorded a HELLO replays it after its session ended: no session
    is opened for nobody, nothing is answered (no WELCOME to reflect), one drop counted.
    An undated HELLO, one dated ten minutes off, and, at a restarted gateway, one dated
    before its start are refused the same way; a fresh HELLO still opens a session."""

    async def run() -> dict[str, object]:
        loop = asyncio.get_running_loop()
        gateway = Gateway(KEY, set())
        transport, _ = await loop.create_datagram_endpoint(
            lambda: gateway, local_addr=("127.0.0.1", 0)
        )
        addr = transport.get_extra_info("sockname")
        attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        attacker.bind(("127.0.0.1", 0))
        attacker.setblocking(False)
        out: dict[str, object] = {}

        async def exchange(datagram: bytes) -> bytes | None:
            attacker.sendto(datagram, addr)
            try:
                return await asyncio.wait_for(loop.sock_recv(attacker, 2048), 0.3)
            except TimeoutError:
                return None

        try:
            client, recorded = _hello(time.time())
            welcome = await exchange(recorded)
            assert welcome is not None and len(gateway.sessions) == 1
            client.receive_datagram(welcome, addr, 0.0)
            assert client.established
            client.close_session()
            for datagram, _ in client.datagrams_to_send(0.01):
                attacker.sendto(datagram, addr)
            for _ in range(50):
                if not gateway.sessions:
                    break
                await asyncio.sleep(0.01)
            out["after close"] = len(gateway.sessions)
            out["replay answered"] = await exchange(recorded)
            out["undated answered"] = await exchange(_hello(None)[1])
            out["stale answered"] = await exchange(_hello(time.time() - 600)[1])
            out["sessions"] = len(gateway.sessions)
            out["counters"] = {k: gateway.counters[k] for k in ("dropped_replay", "dropped_auth")}
            restarted = Gateway(KEY, set())  # remembers nothing: its start is the watermark
            recorded_before = _hello(time.time() - 5)[1]  # recorded 5 s before the restart
            restarted.datagrams_received([(recorded_before, attacker.getsockname())])
            out["restarted"] = (len(restarted.sessions), restarted.counters["dropped_replay"])
            out["fresh answered"] = await exchange(_hello(time.time())[1]) is not None
            return out
        finally:
            attacker.close()
            transport.close()

    out = asyncio.run(run())
    assert out == {
        "after close": 0,
        "replay answered": None,
        "undated answered": None,
        "stale answered": None,
        "sessions": 0,
        "counters": {"dropped_replay": 1, "dropped_auth": 2},
        "restarted": (0, 1),
        "fresh answered": True,
    }


def test_the_hello_ledger_is_bounded_and_keeps_refusing_what_it_let_go() -> None:
    from tierwise.relay.gateway import HELLO_WINDOW_S, HelloLedger

    now = 1_000_000.0
    ledger = HelloLedger(started_wall_s=now - 100, max_entries=4)
    for i in range(10):
        cid = i.to_bytes(8, "big")
        assert ledger.refuse(cid, now + i, now + i) is None
        ledger.admit(cid, now + i, now + i)
    assert len(ledger) == 4
    # let go past the bound: dated at or below the watermark, refused all the same
    assert ledger.refuse((0).to_bytes(8, "big"), now, now + 10) == "replay"
    assert ledger.refuse((9).to_bytes(8, "big"), now + 9, now + 10) == "replay"
    assert ledger.refuse(b"new-id!!", now + 10, now + 10) is None
    later = now + 10 + HELLO_WINDOW_S + 1  # entries past the window go; the window refuses
    ledger.admit(b"new-id!!", later, later)
    assert len(ledger) == 1
    assert ledger.refuse((9).to_bytes(8, "big"), now + 9, later) == "auth"


def test_a_clock_off_by_minutes_is_logged_once_a_minute(caplog) -> None:  # type: ignore[no-untyped-def]
    """A client whose clock is 10 minutes off gets no session: the operator reads why in
    the gateway's log, once a minute however many HELLOs come (they are not yet
    authenticated, so a flood of them must not flood the log)."""
    import logging

    gateway = Gateway(KEY, set())
    hellos = [(_hello(time.time() + 600)[1], ("127.0.0.1", 40000 + i)) for i in range(50)]
    with caplog.at_level(logging.WARNING, logger="tierwise.relay.gateway"):
        gateway.datagrams_received(hellos)
    assert gateway.counters["dropped_auth"] == 50 and not gateway.sessions
    (record,) = caplog.records
    assert "dated +600 s" in record.getMessage() and "within 120 s" in record.getMessage()
