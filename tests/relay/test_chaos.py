"""Chaos over real loopback sockets: a few hundred streams through one session, with
applications and destinations that misbehave at random (seeded).

The class of fault hunted here: the application layer (``Gateway._streams``,
``Session.held``, the client's ``Session.handlers``, a :class:`Pipe`) and the sans-IO
connection disagreeing about whether a stream exists. Afterwards:

- no traceback, no "Task exception was never retrieved", no ERROR record;
- every stream either byte-exact (SHA-256, both ways) or failed with an error its
  application sees, never an orderly end after truncated data (at either end);
- nothing left behind once every stream ended (streams, held, handlers, tasks);
- a normal request through the same session still works, byte-exact.

``test_chaos_through_a_gateway_restart``: 40 of them in flight when the gateway dies
(in this process: its UDP port closes, its destination sockets are aborted, nothing
leaves it any more) and a new one takes its port; each ends byte-exact or with an
error, the streams after it go through the new gateway's session, and nothing stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import logging
import random
import socket
import struct
from collections import Counter
from dataclasses import dataclass, field

import pytest

from tests.relay.conftest import KEY, relay_pair
from tierwise.relay.client import Client
from tierwise.relay.gateway import Gateway
from tierwise.relay.pipe import Pipe
from tierwise.relay.socks import serve_forward
from tierwise.relay.udp import encode_addr

HEAD = struct.Struct(">QQ")  # what the application sends first: upload bytes, answer bytes
STREAM_TIMEOUT_S = 25.0
SINK_HOLD_S = 1.0  # a destination that never reads holds its connection this long
_LINGER_RST = struct.pack("ii", 1, 0)

DESTINATIONS = ("count", "echo", "big", "slow", "refuse", "closed", "rst", "fin", "sink", "udp")
APPS = ("normal", "noread", "early", "reset", "instant", "eager")
# what each side may legitimately see (anything else fails the test)
EXACT_PAIRS = {
    (a, d) for a in ("normal", "noread", "eager") for d in ("count", "echo", "big", "slow", "udp")
}
UDP_DATAGRAMS = 8  # an association's application sends this many and waits for their echoes
# ... until all are back or its control connection ends, at most this long (a session
# given up after its gateway died and the association moved to the next one: seconds,
# more on a loaded host; within STREAM_TIMEOUT_S)
ECHOES_S = 15.0


class _UdpEcho(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.transport.sendto(data, addr)  # type: ignore[attr-defined]


class _Inbox(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.queue.put_nowait(data)


def payload(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    writer.transport.abort()


@dataclass
class Destinations:
    """One listening port per behaviour; what each connection saw, by outcome."""

    ports: dict[str, int] = field(default_factory=dict)
    seen: Counter[str] = field(default_factory=Counter)
    servers: list[asyncio.Server] = field(default_factory=list)

    async def start(self) -> None:
        for name in DESTINATIONS:
            if name == "refuse":
                self.ports[name] = 9  # discard: never on --allow
                continue
            if name == "udp":  # a UDP echo, reached by SOCKS UDP ASSOCIATE
                loop = asyncio.get_running_loop()
                transport, _ = await loop.create_datagram_endpoint(
                    _UdpEcho, local_addr=("127.0.0.1", 0)
                )
                self.udp = transport
                self.ports[name] = transport.get_extra_info("sockname")[1]
                continue
            if name == "closed":  # allowed, nothing listening
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    self.ports[name] = s.getsockname()[1]
                continue
            handler = getattr(self, f"_{name}")
            server = await asyncio.start_server(handler, "127.0.0.1", 0)
            self.servers.append(server)
            self.ports[name] = server.sockets[0].getsockname()[1]

    def close(self) -> None:
        for server in self.servers:
            server.close()
        self.udp.close()

    async def _read_upload(self, reader: asyncio.StreamReader) -> tuple[int, bytes] | None:
        """The upload's answer size and SHA-256, or None (an error or a truncated upload)."""
        try:
            head = await reader.readexactly(HEAD.size)
        except asyncio.IncompleteReadError as exc:
            self.seen["truncated" if exc.partial else "empty"] += 1
            return None
        except (ConnectionError, OSError):
            self.seen["error"] += 1
            return None
        size, answer = HEAD.unpack(head)
        digest, got = hashlib.sha256(), 0
        try:
            while chunk := await reader.read(1 << 16):
                digest.update(chunk)
                got += len(chunk)
        except (ConnectionError, OSError):
            self.seen["error"] += 1
            return None
        if got != size:
            self.seen["truncated"] += 1  # an orderly EOF after a short upload: a relay fault
            return None
        self.seen["complete"] += 1
        return answer, digest.digest()

    async def _count(self, reader, writer, delay: float = 0.0) -> None:  # type: ignore[no-untyped-def]
        try:
            if delay:
                await asyncio.sleep(delay)
            got = await self._read_upload(reader)
            if got is None:
                _rst(writer)
                return
            answer, digest = got
            writer.write(digest)
            body = payload(answer, answer)
            for at in range(0, answer, 1 << 16):
                writer.write(body[at : at + (1 << 16)])
                await writer.drain()
            writer.write_eof()
            await writer.drain()
        except (ConnectionError, OSError):
            self.seen["error"] += 1
        finally:
            writer.close()

    async def _big(self, reader, writer) -> None:  # type: ignore[no-untyped-def]
        await self._count(reader, writer)  # the application asks for a big answer

    async def _slow(self, reader, writer) -> None:  # type: ignore[no-untyped-def]
        await self._count(reader, writer, delay=0.3)

    async def _echo(self, reader, writer) -> None:  # type: ignore[no-untyped-def]
        try:
            while chunk := await reader.read(1 << 16):
                writer.write(chunk)
                await writer.drain()
            writer.write_eof()
            await writer.drain()
            self.seen["complete"] += 1
        except (ConnectionError, OSError):
            self.seen["error"] += 1
        finally:
            writer.close()

    async def _rst(self, reader, writer) -> None:  # type: ignore[no-untyped-def]
        with contextlib.suppress(OSError):  # TimeoutError and ConnectionError among them
            await asyncio.wait_for(reader.read(100), 0.05)
        _rst(writer)

    async def _fin(self, reader, writer) -> None:  # type: ignore[no-untyped-def]
        writer.close()

    async def _sink(self, reader, writer) -> None:  # type: ignore[no-untyped-def]
        await asyncio.sleep(SINK_HOLD_S)
        _rst(writer)


async def _echoes(
    inbox: _Inbox, control: asyncio.StreamReader, head: bytes, count: int
) -> list[bytes]:
    """The association's echoes (``head`` stripped) as they come back, until ``count``
    are in, its control connection ends (or says anything), or ``ECHOES_S`` passed."""
    got: list[bytes] = []
    ended = asyncio.ensure_future(control.read(1))
    try:
        async with asyncio.timeout(ECHOES_S):
            while len(got) < count and not ended.done():
                arrival = asyncio.ensure_future(inbox.queue.get())
                await asyncio.wait({arrival, ended}, return_when=asyncio.FIRST_COMPLETED)
                if not arrival.done():
                    arrival.cancel()
                    break
                got.append(arrival.result())
    except TimeoutError:
        pass
    finally:
        ended.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
            await ended
    while not inbox.queue.empty() and len(got) < count:
        got.append(inbox.queue.get_nowait())
    for datagram in got:
        assert datagram.startswith(head), datagram[:16]
    return [datagram[len(head) :] for datagram in got]


async def _socks_open(
    port: int, target: int, eager: bytes = b""
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A SOCKS5 CONNECT to 127.0.0.1:``target``; ``eager`` is sent before the reply.
    Raises ConnectionError when the proxy answers with an error code."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"\x05\x01\x00" + b"\x05\x01\x00" + encode_addr("127.0.0.1", target) + eager)
    await writer.drain()
    hello = await reader.readexactly(2)
    assert hello == b"\x05\x00", hello
    reply = await reader.readexactly(10)
    if reply[1] != 0:
        writer.close()
        raise ConnectionRefusedError(f"SOCKS reply {reply[1]}")
    return reader, writer


@dataclass
class Plan:
    index: int
    app: str
    dest: str
    via: str  # socks or forward
    size: int
    answer: int


def plans(seed: int, count: int) -> list[Plan]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        dest = rng.choice(DESTINATIONS)
        app = rng.choice(APPS)
        via = "forward" if dest in ("count", "refuse") and rng.random() < 0.4 else "socks"
        size = int(10 ** rng.uniform(0, 6.5)) if rng.random() < 0.9 else 0
        answer = int(10 ** rng.uniform(0, 6.6)) if dest == "big" else rng.randrange(0, 5000)
        out.append(Plan(i, app, dest, via, size, answer))
    return out


class Harness:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.outcomes: Counter[str] = Counter()
        self.faults: list[str] = []

    async def run_one(
        self, p: Plan, socks: int, forwards: dict[str, int], dport: int, strict: bool = True
    ) -> None:
        """One stream; a fault is recorded unless it ended as its pair allows (not
        ``strict``: in flight when the gateway died, an error is allowed too)."""
        try:
            async with asyncio.timeout(STREAM_TIMEOUT_S):
                outcome = await self._run(p, socks, forwards, dport)
        except TimeoutError:
            outcome = "hung"
        self.outcomes[outcome] += 1
        exact = (p.app, p.dest) in EXACT_PAIRS
        bad = outcome in ("hung", "truncated", "mismatch")
        if exact and outcome not in ("exact" if strict else ("exact", "error")):
            bad = True
        if outcome == "empty" and p.dest != "fin":
            bad = True  # only a destination that closed at once ends a stream with nothing
        if bad:
            self.faults.append(f"{p}: {outcome}")

    async def _run(self, p: Plan, socks: int, forwards: dict[str, int], dport: int) -> str:
        if p.dest == "udp":
            return await self._associate(p, socks, dport)
        body = payload(self.seed * 100_003 + p.index, p.size)
        upload = HEAD.pack(p.size, p.answer) + body
        try:
            if p.via == "forward":
                reader, writer = await asyncio.open_connection("127.0.0.1", forwards[p.dest])
                if p.app == "instant":
                    writer.close()
                    return "instant"
            elif p.app == "instant":
                reader, writer = await asyncio.open_connection("127.0.0.1", socks)
                writer.write(b"\x05\x01\x00\x05\x01\x00" + encode_addr("127.0.0.1", dport))
                writer.close()
                return "instant"
            else:
                eager = upload[:4096] if p.app == "eager" else b""
                reader, writer = await _socks_open(socks, dport, eager)
                upload = upload[len(eager) :]
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            return "error"
        try:
            return await self._talk(p, reader, writer, upload, body)
        except (ConnectionError, OSError):
            return "error"
        finally:
            writer.close()

    async def _talk(self, p: Plan, reader, writer, upload: bytes, body: bytes) -> str:  # type: ignore[no-untyped-def]
        if p.app == "reset":
            writer.write(upload[: len(upload) // 2])
            await asyncio.sleep(0.01)
            _rst(writer)
            return "reset"
        received = asyncio.get_running_loop().create_task(
            self._receive(p, reader, delay=0.5 if p.app == "noread" else 0.0)
        )
        try:
            for at in range(0, len(upload), 1 << 16):
                writer.write(upload[at : at + (1 << 16)])
                await writer.drain()
            if p.app == "early":
                received.cancel()
                return "early"
            writer.write_eof()
            got = await received
        finally:
            received.cancel()
        if p.dest == "echo":
            want = HEAD.pack(p.size, p.answer) + body
        else:
            want = hashlib.sha256(body).digest() + payload(p.answer, p.answer)
        if got == want:
            return "exact"
        if not got:
            return "empty"
        return "mismatch" if len(got) == len(want) else "truncated"

    async def _associate(self, p: Plan, socks: int, dport: int) -> str:
        """SOCKS UDP ASSOCIATE: datagrams to the UDP echo and back, then the control
        connection closed (or reset, or closed at once)."""
        loop = asyncio.get_running_loop()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", socks)
        except OSError:
            return "error"
        inbox = _Inbox()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: inbox, local_addr=("127.0.0.1", 0)
        )
        try:
            writer.write(b"\x05\x01\x00\x05\x03\x00" + encode_addr("0.0.0.0", 0))
            if p.app == "instant":
                return "instant"
            if await reader.readexactly(2) != b"\x05\x00":
                return "mismatch"
            reply = await reader.readexactly(10)
            if reply[1] != 0:
                return "error"
            relay_port = struct.unpack(">H", reply[8:10])[0]
            rng = random.Random(self.seed * 7 + p.index)
            sent = [rng.randbytes(rng.randrange(1, 1200)) for _ in range(UDP_DATAGRAMS)]
            head = b"\0\0\0" + encode_addr("127.0.0.1", dport)
            for data in sent:
                transport.sendto(head + data, ("127.0.0.1", relay_port))
            if p.app == "reset":
                _rst(writer)
                return "reset"
            if p.app == "early":
                return "early"
            got = await _echoes(inbox, reader, head, len(sent))
            if sorted(got) == sorted(sent):
                return "exact"
            # datagrams lost: allowed only where the association ended, which its
            # application sees as its control connection closed (RFC 1928 §7)
            try:
                ended = await asyncio.wait_for(reader.read(1), 0.5) == b""
            except TimeoutError:
                ended = False
            return "error" if ended else "truncated"
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            return "error"
        finally:
            transport.close()
            writer.close()

    async def _receive(self, p: Plan, reader: asyncio.StreamReader, delay: float) -> bytes:
        await asyncio.sleep(delay)
        got = bytearray()
        while chunk := await reader.read(1 << 16):
            got += chunk
        return bytes(got)


def leftovers(gateway: Gateway, client: Client) -> dict[str, object]:
    """What a stream left behind once every stream ended (all should be empty)."""
    out: dict[str, object] = {
        "gateway._streams": {
            sid: (type(p.pipe).__name__, p.connecting, p.answered, bytes(p.buf[:1]))
            for (_, sid), p in gateway._streams.items()
        }
    }
    out["gateway._tasks"] = len(gateway._tasks)
    out["gateway.associations"] = gateway.associations
    for i, session in enumerate(gateway.sessions.values()):
        out[f"gateway session {i} held"] = set(session.held)
        out[f"gateway session {i} streams"] = session.conn.stream_ids
        out[f"gateway session {i} unconsumed bytes"] = session.conn.unconsumed_bytes
    session = client.session
    assert session is not None
    out["client handlers"] = {
        sid: getattr(h, "__qualname__", type(h).__name__) for sid, h in session.handlers.items()
    }
    out["client held"] = set(session.held)
    out["client streams"] = session.conn.stream_ids
    out["client unconsumed bytes"] = session.conn.unconsumed_bytes
    out["client moves"] = len(client._moves)
    out["client lingering"] = dict(client.lingering)
    return {k: v for k, v in out.items() if v}


async def chaos(seed: int, count: int, concurrent: int, restart: bool = False) -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    dests = Destinations()
    await dests.start()
    allow = {("127.0.0.1", port) for name, port in dests.ports.items() if name != "refuse"}
    async with relay_pair(allow) as (gateway, client, socks_port):
        forwards: dict[str, int] = {}
        servers = []
        for name in ("count", "refuse"):
            target = ("127.0.0.1", dests.ports[name])
            fwd = await serve_forward(client, ("127.0.0.1", 0), target)
            servers.append(fwd)
            forwards[name] = fwd.sockets[0].getsockname()[1]
        exercise = _exercise_restart if restart else _exercise
        try:
            harness = await exercise(
                seed, count, concurrent, gateway, client, socks_port, forwards, dests
            )
        finally:
            for server in servers:
                server.close()
    dests.close()
    gc.collect()  # a task that failed unseen reports itself when it is collected
    await asyncio.sleep(0)
    assert not errors, errors
    print(f"seed {seed}: app outcomes {dict(harness.outcomes)}, destinations {dict(dests.seen)}")


async def _exercise(
    seed: int,
    count: int,
    concurrent: int,
    gateway: Gateway,
    client: Client,
    socks_port: int,
    forwards: dict[str, int],
    dests: Destinations,
) -> Harness:
    harness = Harness(seed)
    todo = plans(seed, count)
    half = len(todo) * 3 // 4
    # three quarters concurrently (in waves), the rest one after another
    for at in range(0, half, concurrent):
        wave = todo[at : at + concurrent]
        await asyncio.gather(
            *(harness.run_one(p, socks_port, forwards, dests.ports[p.dest]) for p in wave)
        )
    for p in todo[half:]:
        await harness.run_one(p, socks_port, forwards, dests.ports[p.dest])
    await ends_clean(harness, gateway, client, socks_port, forwards, dests)
    assert dests.seen["truncated"] == 0, dests.seen
    return harness


async def ends_clean(
    harness: Harness,
    gateway: Gateway,
    client: Client,
    socks_port: int,
    forwards: dict[str, int],
    dests: Destinations,
) -> None:
    """Every stream ended: nothing of them may stay (the sink's hold, the acks of FINs),
    and the session still carries a normal request, byte-exact, with no fault seen."""
    left: dict[str, object] = {}
    for _ in range(100):
        await asyncio.sleep(0.1)
        left = leftovers(gateway, client)
        tasks = asyncio.all_tasks() - {asyncio.current_task(), client._watchdog}
        if tasks:
            left["tasks"] = [t.get_coro() for t in tasks]
        if not left:
            break
    assert not left, f"left behind: {left!r}; faults: {harness.faults}"
    normal = Plan(-1, "normal", "count", "socks", 1_500_000, 700_000)
    assert await harness._run(normal, socks_port, forwards, dests.ports["count"]) == "exact"
    assert len(gateway.sessions) == 1
    assert not harness.faults, "\n".join(harness.faults)


class _Dead:
    """A dead process's UDP socket: what its leftovers in this loop send goes nowhere."""

    def sendto(self, data: bytes, addr: object = None) -> None:
        pass


def kill(gateway: Gateway) -> None:
    """As the gateway's process dying would: its UDP port closes at once, and the kernel
    closes its sockets to the destinations; no datagram leaves it any more."""
    assert gateway.transport is not None
    gateway.transport.close()
    for session in gateway.sessions.values():
        session.close()
        session.transport = _Dead()  # type: ignore[assignment]
    for pending in list(gateway._streams.values()):
        if isinstance(pending.pipe, Pipe):
            pending.pipe.writer.transport.abort()
        elif pending.pipe is not None:  # an association: its sockets close (its reset is lost)
            pending.pipe.abort()
    for task in gateway._tasks:
        task.cancel()


async def _exercise_restart(
    seed: int,
    count: int,
    concurrent: int,
    gateway: Gateway,
    client: Client,
    socks_port: int,
    forwards: dict[str, int],
    dests: Destinations,
) -> Harness:
    """Streams in flight when the gateway dies and a new one takes its port: each ends
    byte-exact or with an error; later streams go through the new gateway, byte-exact."""
    harness = Harness(seed)
    todo = [p for p in plans(seed, count) if p.dest not in ("sink", "slow")]
    port = gateway.transport.get_extra_info("sockname")[1]  # type: ignore[union-attr]
    loop = asyncio.get_running_loop()
    wave = todo[:concurrent]
    running = asyncio.gather(
        *(harness.run_one(p, socks_port, forwards, dests.ports[p.dest], strict=False) for p in wave)
    )
    await asyncio.sleep(0.3)
    kill(gateway)
    await asyncio.sleep(0.2)  # its port closes at the next turn; a new process starts
    fresh = Gateway(KEY, gateway.allow)
    transport, _ = await loop.create_datagram_endpoint(
        lambda: fresh, local_addr=("127.0.0.1", port)
    )
    try:
        await running
        print(f"in flight at the restart: {dict(harness.outcomes)}")
        for p in todo[concurrent:]:
            await harness.run_one(p, socks_port, forwards, dests.ports[p.dest])
        await ends_clean(harness, fresh, client, socks_port, forwards, dests)
        # a dying gateway's sockets close with an RST while an upload is unfinished (they
        # linger zero until the stream's FIN is written): no destination sees it end
        assert dests.seen["truncated"] == 0, dests.seen
    finally:
        fresh.close()
        await asyncio.sleep(0.05)
        transport.close()
    return harness


def _run(
    seed: int,
    count: int,
    concurrent: int,
    caplog: pytest.LogCaptureFixture,
    restart: bool = False,
) -> None:
    caplog.set_level(logging.WARNING, logger="tierwise")

    async def bounded() -> None:  # in this task: every other task is the relay's or ours
        async with asyncio.timeout(240):
            await chaos(seed, count, concurrent, restart)

    asyncio.run(bounded())
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]


@pytest.mark.parametrize("seed", [1])
def test_chaos(seed: int, caplog: pytest.LogCaptureFixture) -> None:
    _run(seed, 200, 40, caplog)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2])  # seeds 2-7 ran clean (115 s); CI keeps one
def test_chaos_sweep(seed: int, caplog: pytest.LogCaptureFixture) -> None:
    _run(seed, 300, 60, caplog)


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow),
                                  pytest.param(3, marks=pytest.mark.slow)])  # fmt: skip
def test_chaos_through_a_gateway_restart(seed: int, caplog: pytest.LogCaptureFixture) -> None:
    _run(seed, 80, 40, caplog, restart=True)
