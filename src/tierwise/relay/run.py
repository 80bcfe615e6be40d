"""Running the gateway and the client as foreground processes (systemd-friendly).

SIGTERM or SIGINT starts a drain: listeners close, open streams get up to
``DRAIN_S`` to finish, then the session is closed and the process exits. The
gateway's stats endpoint (``stats``, :mod:`.metrics`) answers until the drain ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
from pathlib import Path

from tierwise.addresses import format_address, is_loopback
from tierwise.errors import ScenarioError
from tierwise.listen import listen_socket
from tierwise.proto.relay import RelayConfig
from tierwise.relay.batchudp import open_batch_endpoint
from tierwise.relay.client import REDIAL_S, Client
from tierwise.relay.gateway import IDLE_TIMEOUT_S, Gateway
from tierwise.relay.pathmemory import PathMemory
from tierwise.relay.pipe import NOT_ALLOWED, OK
from tierwise.relay.session import widen_buffers
from tierwise.relay.socks import serve_forward, serve_socks

__all__ = ["fetch_stats", "run_client", "run_gateway"]

log = logging.getLogger("tierwise.relay")
DRAIN_S = 5.0
FETCH_TIMEOUT_S = 10.0  # `relay stats`: an endpoint that accepts and never answers
FETCH_MAX_BYTES = 16 << 20


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _drain(busy) -> None:  # type: ignore[no-untyped-def]
    try:
        async with asyncio.timeout(DRAIN_S):
            while busy():
                await asyncio.sleep(0.05)
    except TimeoutError:
        log.warning("drain: streams still open after %.0f s; closing", DRAIN_S)


async def run_gateway(
    key: bytes,
    listen: tuple[str, int],
    allow: set[tuple[str, int]],
    *,
    max_sessions: int = 64,
    max_streams: int = 1024,
    session: dict | None = None,
    stats: tuple[str, int] | None = None,
    path_memory: Path | None = None,
) -> None:
    """``session``: RelayConfig fields from the ``[session]`` table and flags (tuning.py);
    ``stats``: where to serve ``GET /stats`` and ``GET /metrics`` (off if ``None``);
    ``path_memory``: the state file of what sessions measured (None: no memory)."""
    settings = {"idle_timeout_s": IDLE_TIMEOUT_S, **(session or {})}
    config = RelayConfig(max_streams=max_streams, **settings)
    gateway = Gateway(key, allow, config=config, max_sessions=max_sessions)
    if path_memory is not None:
        gateway.memory = PathMemory(path_memory, "gateway").load()
    stats_sock = listen_socket(*stats, source="--stats") if stats is not None else None
    try:
        transport = await open_batch_endpoint(gateway, local_addr=listen, reuse_port=True)
    except OSError as exc:
        if stats_sock is not None:
            stats_sock.close()
        raise ScenarioError(
            f"cannot listen on udp {format_address(listen)}: {_reason(exc)}", path="--listen"
        ) from None
    widen_buffers(transport)
    if not gateway.guard():
        log.warning("no kernel socket filter: every datagram at the port is read in Python")
    watch = asyncio.get_running_loop().create_task(_watch_floods(gateway))
    server = await _serve_stats(gateway, stats_sock) if stats_sock is not None else None
    log.info("gateway listening on udp %s:%s; allowed: %s", *listen, sorted(allow))
    stop = _stop_event()
    await stop.wait()
    log.info("draining")
    await _drain(lambda: gateway.busy)
    watch.cancel()
    gateway.close()
    transport.close()
    if server is not None:
        server.close()


async def _watch_floods(gateway: Gateway) -> None:
    """Once a second: a flood's log line (at most one a minute, :meth:`Gateway.watch_flood`)."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(1.0)
        gateway.watch_flood(loop.time())


async def _serve_stats(gateway: Gateway, sock: socket.socket) -> asyncio.Server:
    """The stats endpoint on the listening ``sock`` (bound first: an address in use is
    one line naming ``--stats`` before anything else starts)."""
    from tierwise.relay.metrics import serve_stats

    server = await serve_stats(gateway, sock)
    bound = sock.getsockname()
    where = format_address(bound)
    log.info("stats on http://%s/stats and /metrics", where)
    if not is_loopback(bound[0]):
        log.warning("the stats endpoint on %s has no authentication: firewall it", where)
    return server


async def run_client(
    key: bytes,
    gateway: tuple[str, int],
    socks: tuple[str, int] | None,
    forwards: list[tuple[tuple[str, int], tuple[str, int]]],
    credentials: tuple[str, str] | None,
    *,
    connect_timeout_s: float = 10.0,
    udp_buffer_bytes: int = 1 << 20,
    session: dict | None = None,
    path_memory: Path | None = None,
) -> None:
    """``session``: RelayConfig fields from the ``[session]`` table and flags (tuning.py);
    ``path_memory``: the state file of what sessions measured (None: no memory)."""
    config = RelayConfig(**(session or {}))
    memory = None if path_memory is None else PathMemory(path_memory, "client").load()
    listeners = [(socks, "--socks")] if socks is not None else []
    _can_listen(listeners + [(listen, "--forward") for listen, _ in forwards])
    client = Client(
        key,
        gateway,
        config=config,
        credentials=credentials,
        udp_buffer_bytes=udp_buffer_bytes,
        memory=memory,
    )
    await _connect(client, gateway, connect_timeout_s)
    for _, target in forwards:
        await _check_forward(client, target)
    servers = []
    try:
        if socks is not None:
            servers.append(await serve_socks(client, *socks))
            log.info("SOCKS5 on %s:%s", *socks)
        for listen, target in forwards:
            servers.append(await serve_forward(client, listen, target))
            log.info("forwarding %s:%s to %s:%s", *listen, *target)
    except OSError as exc:  # taken between the check and now
        client.close()
        raise ScenarioError(f"cannot listen: {_reason(exc)}", path="--socks/--forward") from None
    stop = _stop_event()
    await stop.wait()
    log.info("draining")
    for server in servers:
        server.close()
    await _drain(lambda: client.busy)
    client.close()
    await _let_connections_end()


def _reason(exc: OSError) -> str:
    """The OS's words for ``exc``: asyncio's "Connect call failed ('h', p)" and
    "error while attempting to bind on address …" say less than ``strerror`` does."""
    if exc.errno is not None and exc.errno > 0:
        return os.strerror(exc.errno)
    return exc.strerror or str(exc) or type(exc).__name__


def _can_listen(listeners: list[tuple[tuple[str, int], str]]) -> None:
    """Bind every local listener at once, then let go: an address in use, not local or
    unresolvable is one line naming its flag before the session is opened (and before
    any log line), not after the gateway has answered."""
    held: list[socket.socket] = []
    try:
        for (host, port), flag in listeners:
            held.append(listen_socket(host, port, source=flag))
    finally:
        for sock in held:
            sock.close()


async def _let_connections_end(timeout_s: float = 1.0) -> None:
    """Give the connections just reset a moment to finish: cancelled instead, each
    would log a traceback (Python 3.11's start_server callback) and close with a FIN."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if others:
        await asyncio.wait(others, timeout=timeout_s)


async def _check_forward(client: Client, target: tuple[str, int]) -> None:
    """A ``--forward`` to a destination the gateway refuses could never work: one line,
    exit 2. One the gateway allows but cannot reach yet (a service still starting) is
    forwarded all the same, with a warning."""
    status = await client.check(*target)
    if status == NOT_ALLOWED:
        client.close()
        raise ScenarioError(
            f"the gateway refuses {target[0]}:{target[1]} (not in its --allow list)",
            path="--forward",
        )
    if status != OK:
        log.warning("--forward %s:%s: the gateway answered status %d", *target, status)


async def _connect(client: Client, gateway: tuple[str, int], timeout_s: float) -> None:
    """Open the session or fail with one line: a bad address, silence or a wrong key."""
    try:
        await client.start()
    except OSError as exc:
        raise ScenarioError(
            f"cannot reach {format_address(gateway)}: {_reason(exc)}", path="--gateway"
        ) from None
    try:
        async with asyncio.timeout(timeout_s):
            while not client.ready.is_set():  # a fresh HELLO every REDIAL_S, no backoff
                try:
                    await asyncio.wait_for(client.ready.wait(), REDIAL_S)
                except TimeoutError:
                    client.redial()
    except TimeoutError:
        raise ScenarioError(
            f"no answer from {format_address(gateway)} within {timeout_s:g} s "
            "(is the gateway running, reachable over UDP, and using the same key and "
            "[session] rotate_packets, with its clock within 2 minutes of this one?)",
            path="--gateway",
        ) from None


async def _read_to_end(reader: asyncio.StreamReader, limit: int) -> bytes:
    """What the peer sends until it closes, at most ``limit`` bytes."""
    raw = bytearray()
    while len(raw) < limit and (chunk := await reader.read(limit - len(raw))):
        raw += chunk
    return bytes(raw)


async def fetch_stats(addr: tuple[str, int], role: str = "client") -> dict:
    """A running relay's measurements (``GET /stats``): a client's, asked over its SOCKS
    port, or a gateway's, asked at its ``--stats`` address (``role="gateway"``)."""
    flag = f"--{role}"
    what = "relay client" if role == "client" else "relay gateway stats endpoint"
    where = format_address(addr)
    writer = None
    try:
        async with asyncio.timeout(FETCH_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(*addr)
            writer.write(b"GET /stats HTTP/1.0\r\n\r\n")
            raw = await _read_to_end(reader, FETCH_MAX_BYTES)
    except TimeoutError:  # before OSError: TimeoutError is one, with no strerror
        raise ScenarioError(
            f"{where} did not answer within {FETCH_TIMEOUT_S:g} s (is it a {what}?)", path=flag
        ) from None
    except (OSError, UnicodeError) as exc:  # refused, reset, a name that does not resolve
        reason = _reason(exc) if isinstance(exc, OSError) else "not a valid host name"
        raise ScenarioError(f"no {what} at {where}: {reason}", path=flag) from None
    finally:
        if writer is not None:
            writer.close()
    _, _, body = raw.partition(b"\r\n\r\n")
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict) or (data.get("role") == "gateway") != (role == "gateway"):
        raise ScenarioError(f"{where} is not a {what}", path=flag)
    return data
