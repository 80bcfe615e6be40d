"""Many concurrent streams through real sockets and an impaired UDP path on loopback.

The client's datagrams reach the gateway, and the gateway's reach the client, through
a UDP proxy that applies the simulator's own :class:`~tierwise.sim.relay.OneWayPath` (delay,
rate, random or Gilbert–Elliott loss, reordering, duplication, blackouts) on the event
loop's clock. The streams are SOCKS5 connections to a TCP service that answers each
upload's SHA-256 and a download of the size asked for: every stream must complete
byte-exact both ways, or — where the issue allows it — fail with an error its
application sees, never end cleanly after truncated data.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest

from tests.relay.conftest import KEY, stop_loop, tcp_source
from tierwise.proto.relay import PeerResponsive, PeerSilent
from tierwise.relay.client import Client
from tierwise.relay.gateway import Gateway
from tierwise.relay.socks import serve_socks
from tierwise.relay.udp import encode_addr
from tierwise.sim.relay import OneWayPath, payload

_HEAD = struct.Struct(">QQ")  # upload bytes, download bytes


class ImpairedPath:
    """A UDP proxy between the client and the gateway: ``up`` and ``down`` impair each way."""

    def __init__(
        self, gateway: tuple[str, int], up: OneWayPath, down: OneWayPath, seed: int
    ) -> None:
        self.gateway, self.up, self.down = gateway, up, down
        self.rng = np.random.default_rng(seed)
        self.client_addr: tuple[str, int] | None = None
        self.t0 = 0.0

    async def start(self) -> tuple[str, int]:
        """Open both sockets; the address the client should dial."""
        loop = asyncio.get_running_loop()
        self.loop, self.t0 = loop, loop.time()
        self.front, _ = await loop.create_datagram_endpoint(
            lambda: _Side(self._from_client), local_addr=("127.0.0.1", 0)
        )
        self.back, _ = await loop.create_datagram_endpoint(
            lambda: _Side(self._from_gateway), remote_addr=self.gateway
        )
        return self.front.get_extra_info("sockname")

    def now(self) -> float:
        return self.loop.time() - self.t0

    def _from_client(self, data: bytes, addr: tuple[str, int]) -> None:
        self.client_addr = addr
        self._forward(self.up, data, lambda d: self.back.sendto(d))

    def _from_gateway(self, data: bytes, addr: tuple[str, int]) -> None:
        if self.client_addr is not None:
            self._forward(self.down, data, lambda d: self.front.sendto(d, self.client_addr))

    def _forward(self, path: OneWayPath, data: bytes, send) -> None:  # type: ignore[no-untyped-def]
        now = self.now()
        for at in path.arrivals(len(data) + 28, now, self.rng):
            self.loop.call_later(at - now, send, data)

    def close(self) -> None:
        self.front.close()
        self.back.close()


class _Side(asyncio.DatagramProtocol):
    def __init__(self, on_datagram) -> None:  # type: ignore[no-untyped-def]
        self.on_datagram = on_datagram

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.on_datagram(data, addr)


@pytest.fixture
def service() -> Iterator[int]:
    """A TCP service: read the header and the upload, answer its SHA-256 and the download."""

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                reader = conn.makefile("rb")
                up, down = _HEAD.unpack(reader.read(_HEAD.size))
                digest = hashlib.sha256(reader.read(up)).digest()
                conn.sendall(digest + payload(f"down {up}", down))
            except OSError:
                pass

    with tcp_source(lambda: 0, lambda conn, _: serve(conn), threading.Event()) as port:
        yield port


def exchange(socks_port: int, service_port: int, up: int, down: int, timeout_s: float) -> str:
    """'complete', 'error: …' or 'truncated: …' for one stream through SOCKS5."""
    data = payload(f"up {up} {down}", up)
    try:
        with socket.create_connection(("127.0.0.1", socks_port), timeout=timeout_s) as s:
            s.sendall(b"\x05\x01\x00")
            assert s.recv(2) == b"\x05\x00"
            s.sendall(b"\x05\x01\x00" + encode_addr("127.0.0.1", service_port))
            head = s.recv(10)
            if head[1] != 0:
                return f"error: SOCKS reply {head[1]}"
            s.sendall(_HEAD.pack(up, down))
            for at in range(0, up, 1 << 16):  # the timeout bounds each piece, not the upload:
                s.sendall(data[at : at + (1 << 16)])  # one sendall's is its whole duration
            got = bytearray()
            while chunk := s.recv(1 << 16):
                got += chunk
    except OSError as exc:
        return f"error: {exc!r}"
    if bytes(got) == hashlib.sha256(data).digest() + payload(f"down {up}", down):
        return "complete"
    return f"truncated: {len(got)} of {32 + down} B"


def sizes(seed: int, count: int, max_bytes: int) -> list[tuple[int, int]]:
    """Random sizes each way, log-uniform from 1 B to ``max_bytes`` (the extremes included)."""
    rng = np.random.default_rng(seed)
    drawn = np.exp(rng.uniform(0, np.log(max_bytes), size=(count, 2))).astype(int)
    pairs = [(int(u), int(d)) for u, d in drawn]
    return [(1, max_bytes), (max_bytes, 1), *pairs]


def run_streams(  # type: ignore[no-untyped-def]
    path: OneWayPath,
    pairs: list[tuple[int, int]],
    service: int,
    after_s: float = 0.0,
    seen: dict | None = None,
    mid_s: float | None = None,
    rebind: bool = False,
    owed: dict | None = None,
    mid_until: tuple[Callable[[dict], bool], float] | None = None,
):
    """Start the stack behind an impaired path; run ``pairs`` concurrently; their outcomes,
    the outcome of one more stream opened ``after_s`` later, and the two paths used.
    ``seen`` gets how often the client's session went silent and answered again;
    ``mid_s`` after the streams start ``seen["mid"]`` gets the client's stats — with
    ``mid_until`` (a condition on them, a time after the start) the first that meet the
    condition, polled until that time — and, with ``rebind``, the client then moves to a
    new UDP port. ``owed`` gets each session's credit
    balance (``unconsumed_bytes``) once every stream has ended, where it is not 0."""
    paths = replace(path), replace(path)  # fresh state each way, the module's left alone
    client_of: list[Client] = []
    gateway_of: list[Gateway] = []
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def up() -> tuple[int, list]:
        gateway = Gateway(KEY, {("127.0.0.1", service)})
        gateway_of.append(gateway)
        gw, _ = await loop.create_datagram_endpoint(lambda: gateway, local_addr=("127.0.0.1", 0))
        impaired = ImpairedPath(gw.get_extra_info("sockname"), *paths, seed=11)
        client = Client(KEY, await impaired.start())
        client_of.append(client)
        if seen is not None:
            _count_silences(client, seen)
        await client.start()
        await asyncio.wait_for(client.ready.wait(), 10)
        server = await serve_socks(client, "127.0.0.1", 0)
        impaired.t0 = loop.time()  # blackouts count from when the streams start
        return server.sockets[0].getsockname()[1], [server.close, client.close, impaired.close,
                                                   gw.close]  # fmt: skip

    socks_port, closers = asyncio.run_coroutine_threadsafe(up(), loop).result(15)
    try:
        with ThreadPoolExecutor(len(pairs)) as pool:
            started = time.monotonic()
            futures = [pool.submit(exchange, socks_port, service, u, d, 60) for u, d in pairs]
            if mid_s is not None:
                time.sleep(mid_s)
                until, by_s = mid_until or ((lambda _: True), 0.0)
                while seen is not None:
                    seen["mid"] = asyncio.run_coroutine_threadsafe(_snapshot(client_of[0]),
                                                                   loop).result(10)  # fmt: skip
                    if until(seen["mid"]) or time.monotonic() - started >= by_s:
                        break
                    time.sleep(0.05)
                if rebind:
                    asyncio.run_coroutine_threadsafe(client_of[0].rebind(), loop).result(10)
            outcomes = [f.result() for f in futures]
        time.sleep(after_s)
        later = exchange(socks_port, service, 10_000, 10_000, 10)
        if owed is not None:
            balance = _balance(gateway_of[0], client_of[0])
            owed.update(asyncio.run_coroutine_threadsafe(balance, loop).result(15))
    finally:
        stop_loop(loop, thread, closers)
    return outcomes, later, paths


async def _balance(gateway: Gateway, client: Client, within_s: float = 5.0) -> dict:
    """Each session's ``unconsumed_bytes`` where not 0, once no stream is left (or the
    open streams, after ``within_s``)."""
    sessions = {f"gateway {i}": s for i, s in enumerate(gateway.sessions.values())}
    sessions.update({f"client lingering {i}": s for i, s in enumerate(client.lingering.values())})
    if client.session is not None:
        sessions["client"] = client.session
    for _ in range(int(within_s / 0.05)):
        if not any(s.conn.stream_ids for s in sessions.values()):
            break
        await asyncio.sleep(0.05)
    open_streams = {f"{k} streams": s.conn.stream_ids for k, s in sessions.items()}
    owed = {k: s.conn.unconsumed_bytes for k, s in sessions.items()}
    return {k: v for k, v in {**open_streams, **owed}.items() if v}


async def _snapshot(client: Client) -> dict:
    return client.snapshot()


def _count_silences(client: Client, seen: dict) -> None:
    """Count the PeerSilent and PeerResponsive events the client's sessions hand it."""
    seen.update(silent=0, responsive=0)
    on_event = client._on_event

    def counting(session, event) -> None:  # type: ignore[no-untyped-def]
        if isinstance(event, PeerSilent):
            seen["silent"] += 1
        elif isinstance(event, PeerResponsive):
            seen["responsive"] += 1
        on_event(session, event)

    client._on_event = counting  # type: ignore[method-assign]


IMPAIRMENTS = {
    "random-14%": OneWayPath(delay_s=0.01, loss=0.14),
    "gilbert-elliott": OneWayPath(delay_s=0.01, burst=(0.02, 0.25, 0.7)),
    "reorder-dup": OneWayPath(delay_s=0.01, reorder=0.2, duplicate=0.1, loss=0.03),
}


@pytest.mark.parametrize("name", list(IMPAIRMENTS))
def test_concurrent_streams_are_byte_exact_through_an_impaired_path(
    name: str, service: int
) -> None:
    """10 concurrent streams, 1 B to 1 MB each way, arrive byte-exact both ways."""
    owed: dict = {}
    outcomes, later, paths = run_streams(
        IMPAIRMENTS[name], sizes(7, 8, 1_000_000), service, owed=owed
    )
    assert outcomes == ["complete"] * len(outcomes), outcomes
    assert not owed, owed  # every delivered byte credited once, at both ends
    assert later == "complete"
    for path in paths:  # the path did impair both ways
        assert path.sent > 500 and path.dropped > 0.02 * path.sent, (path.sent, path.dropped)


@pytest.mark.slow
@pytest.mark.parametrize("rebind", [False, True], ids=["same-port", "port-moved-in-the-dark"])
def test_concurrent_streams_are_byte_exact_across_a_five_second_blackout(
    service: int, rebind: bool
) -> None:
    """A 5 s blackout of both directions mid-transfer: every stream completes byte-exact.

    The client notices the silence in 1–3 s and opens a new session for new streams,
    but keeps the old one and its streams (probing) for its grace; the gateway keeps the
    session through the silence (its idle timeout is 12 s): once the path returns, the
    old session hears the gateway again and its streams carry on. With ``rebind`` the
    client's UDP port also changes in the dark, once the session is kept (the kept
    session moves too).

    The kept session is awaited from 2 s on (1 s into the blackout, the soonest the
    client may notice) until 5.5 s (half a second before the path returns), not looked
    for once at a fixed time: on a loaded host the client notices later."""
    path = OneWayPath(delay_s=0.01, rate_bytes_per_s=2e6, blackouts=[(1.0, 6.0)])
    seen: dict = {}
    started = time.monotonic()
    owed: dict = {}
    kept = (lambda stats: stats["sessions_kept"] == 1, 5.5)
    outcomes, later, paths = run_streams(
        path, sizes(8, 6, 1_000_000), service, seen=seen, mid_s=2.0, rebind=rebind,
        owed=owed, mid_until=kept,
    )  # fmt: skip
    assert outcomes == ["complete"] * len(outcomes), outcomes
    assert not owed, owed  # the kept session's streams too: every byte credited once
    assert later == "complete"
    assert time.monotonic() - started > 6.0  # the transfer outlasted the blackout
    # the blackout took datagrams each way: at least the probes a silent end sends with
    # backoff over 5 s (one direction dropped 19 in a CI run at load ~1, so not "> 20")
    for one_way in paths:
        assert one_way.dropped >= 5, (one_way.sent, one_way.dropped)
    assert seen["silent"] >= 1 and seen["responsive"] >= 1, seen  # the rule did act
    assert seen["mid"]["sessions_kept"] == 1 and seen["mid"]["streams_kept"] >= 1, seen["mid"]


@pytest.mark.slow
def test_gateway_restarted_behind_a_blackout_resets_old_streams_and_serves_new_ones(
    service: int,
) -> None:
    """Both directions dark from 0.5 s to 3 s and the gateway restarted meanwhile, behind
    the path (the proxy's port stays open: no ICMP tells the client). Once the path is
    back the client's new session reaches the new gateway and the old session, probed and
    unanswered, ends: every stream open across it fails with an error, never a clean end
    of truncated data, and a stream opened as the path returns is carried within 2 s."""
    path = OneWayPath(delay_s=0.01, rate_bytes_per_s=2e6, blackouts=[(0.5, 3.0)])
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    held: dict = {}

    async def up() -> int:
        gateway = Gateway(KEY, {("127.0.0.1", service)})
        held["gw"], _ = await loop.create_datagram_endpoint(
            lambda: gateway, local_addr=("127.0.0.1", 0)
        )
        held["path"] = ImpairedPath(held["gw"].get_extra_info("sockname"), replace(path),
                                    replace(path), seed=11)  # fmt: skip
        held["client"] = Client(KEY, await held["path"].start())
        await held["client"].start()
        await asyncio.wait_for(held["client"].ready.wait(), 10)
        held["socks"] = await serve_socks(held["client"], "127.0.0.1", 0)
        held["path"].t0 = loop.time()
        return held["socks"].sockets[0].getsockname()[1]

    async def restart() -> None:
        held["gw"].close()  # the old gateway's sessions are gone with it
        gateway = Gateway(KEY, {("127.0.0.1", service)})
        held["gw"], _ = await loop.create_datagram_endpoint(
            lambda: gateway, local_addr=("127.0.0.1", 0)
        )
        impaired = held["path"]
        impaired.back.close()
        impaired.back, _ = await loop.create_datagram_endpoint(
            lambda: _Side(impaired._from_gateway), remote_addr=held["gw"].get_extra_info("sockname")
        )

    socks_port = asyncio.run_coroutine_threadsafe(up(), loop).result(15)
    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(exchange, socks_port, service, u, d, 30)
                       for u, d in sizes(9, 4, 1_000_000)]  # fmt: skip
            time.sleep(1.0)
            asyncio.run_coroutine_threadsafe(restart(), loop).result(10)
            time.sleep(max(0.0, 3.0 - (loop.time() - held["path"].t0)))
            back_s = time.monotonic()
            later = exchange(socks_port, service, 10_000, 10_000, 10)
            later_s = time.monotonic() - back_s
            outcomes = [f.result() for f in futures]
            done_s = time.monotonic() - back_s
    finally:
        closers = [held["socks"].close, held["client"].close, held["path"].close, held["gw"].close]
        stop_loop(loop, thread, closers)
    assert not [o for o in outcomes if o.startswith("truncated")], outcomes
    assert [o for o in outcomes if o.startswith("error")], outcomes  # they were mid-transfer
    # Carried by a new session, not after the 15 s grace; idle hosts carry it in < 2 s
    # (docs/validation.md), a loaded CI host has taken 3.7 s, so the bounds are the grace's half.
    print(f"\nlater stream {later_s:.2f} s after the path returned; all settled at {done_s:.2f} s")
    assert later == "complete" and later_s < 7.5, (later, later_s)
    assert done_s < 10.0  # proven gone after the path returned, not at the 15 s grace
