"""The gateway's stats endpoint (``--stats``): ``GET /stats`` (JSON) and ``GET /metrics``.

``/stats`` is :meth:`~tierwise.relay.gateway.Gateway.snapshot` as JSON (SI units in
the key names); ``/metrics`` is the same snapshot in the Prometheus text exposition
format (prometheus_client's, in a registry of its own per answer). There is no
authentication: the endpoint binds loopback unless the operator names another address.

It is a security boundary, so one connection can make the process do little: the
request head is at most ``MAX_REQUEST_BYTES`` and must arrive within ``READ_TIMEOUT_S``;
one request, one answer, then close (HTTP/1.1 ``Connection: close``); a method other
than GET is 405, another path 404, a malformed or oversized head 400, a slow one 408;
at most ``MAX_CONNECTIONS`` are served at once (the others are closed unanswered). The
answer's size is bounded by :data:`~tierwise.relay.gateway.STATS_SESSIONS`. It reads the
sessions, never changes them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tierwise.jsonvalue import plain
from tierwise.relay.gateway import Gateway

__all__ = ["render_metrics", "serve_stats"]

log = logging.getLogger("tierwise.relay.stats")
MAX_REQUEST_BYTES = 4096  # a request line and a few headers; Prometheus sends ~300 B
READ_TIMEOUT_S = 5.0  # for the whole head, and again for the answer to drain
MAX_CONNECTIONS = 8  # a scraper and an operator or two; more wait for nothing
PREFIX = "tierwise_relay_gateway_"

# totals key: (metric, help); every other totals key becomes `<key>_total` (new counters too)
COUNTERS: dict[str, tuple[str, str]] = {
    "sessions_opened": ("sessions_opened", "Sessions established (authentic HELLOs)"),
    "sessions_ended": ("sessions_ended", "Sessions ended (closed, idle or failed)"),
    "sessions_refused": ("sessions_refused", "HELLOs dropped while max_sessions were open"),
    "hello_tags_struck": (
        "hello_tags_struck",
        "Admission tags struck from the kernel's list: copied from the path and flooded",
    ),
    "streams_opened": ("streams_opened", "Streams opened by clients"),
    "streams_refused": ("streams_refused", "Streams refused beyond max_streams"),
    "destinations_refused": (
        "destinations_refused",
        "Streams and UDP datagrams to a destination not in --allow",
    ),
    "connected": ("connections", "TCP connections made to allowed destinations"),
    "packets_sent": ("packets_sent", "Datagrams sent to clients"),
    "packets_received": ("packets_received", "Authentic datagrams received from clients"),
    "packets_lost": ("packets_lost", "Datagrams sent and declared lost"),
    "bytes_sent": ("sent_bytes", "Bytes of datagrams sent to clients"),
    "bytes_received": ("received_bytes", "Bytes of datagrams received from clients"),
    "stream_bytes_sent": ("stream_sent_bytes", "Stream payload bytes sent (first copies)"),
    "retransmitted_bytes": ("retransmitted_bytes", "Stream bytes sent again"),
    "repair_packets_sent": ("repair_packets_sent", "FEC repair datagrams sent"),
    "repair_bytes_sent": ("repair_sent_bytes", "Bytes of FEC repair datagrams sent"),
    "fec_recovered": ("fec_recovered", "Datagrams recovered by FEC"),
}
DROP_HELP = (
    "Datagrams dropped unanswered, by reason: auth (failed authentication, forged HELLOs "
    "and HELLOs dated over 2 minutes off included), replay (a packet or a session's HELLO "
    "seen before), malformed, unknown_session (names no session and is no HELLO), "
    "flow_control (past the granted credit), kernel (dropped before the gateway read "
    "them: by its socket filter, not the relay's or naming no session, or a full socket "
    "queue; SO_RXQ_OVFL)"
)
GAUGES: dict[str, tuple[str, str]] = {
    "sessions_open": ("sessions", "Sessions open"),
    "max_sessions": ("max_sessions", "Most sessions at once (--max-sessions)"),
    "streams_open": ("streams", "Streams open over all sessions"),
    "udp_associations_open": ("udp_associations", "SOCKS5 UDP ASSOCIATE streams open"),
    "uptime_s": ("uptime_seconds", "Seconds since the gateway started"),
    "sessions_listed": ("sessions_listed", "Sessions listed one by one (the busiest)"),
}
# one gauge per session of the busiest listed, labelled by session id and client address
SESSION_GAUGES: dict[str, tuple[str, str]] = {
    "age_s": ("session_age_seconds", "Seconds since the session was established"),
    "srtt_s": ("session_srtt_seconds", "Smoothed round-trip time"),
    "min_rtt_s": ("session_min_rtt_seconds", "Least round-trip time seen"),
    "bandwidth_bytes_per_s": ("session_bandwidth_bytes_per_second", "Measured delivery rate"),
    "pacing_rate_bytes_per_s": ("session_pacing_rate_bytes_per_second", "Pacing rate"),
    "fec_overhead": ("session_fec_overhead_ratio", "Repair bytes per stream byte sent"),
    "streams": ("session_streams", "Streams open in the session"),
    "bytes_sent": ("session_sent_bytes", "Bytes sent to the client"),
    "bytes_received": ("session_received_bytes", "Bytes received from the client"),
}


def render_metrics(snapshot: dict[str, Any]) -> bytes:
    """The Prometheus text exposition of a gateway :meth:`~Gateway.snapshot`."""
    registry = CollectorRegistry()
    registry.register(_Collector(snapshot))
    return generate_latest(registry)


class _Collector:
    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        for key, (name, text) in GAUGES.items():
            yield GaugeMetricFamily(PREFIX + name, text, value=snap[key])
        yield from _counters(snap["totals"])
        yield from _sessions(snap["sessions"])


def _counters(totals: dict[str, int]) -> Iterator[Metric]:
    drops = CounterMetricFamily(PREFIX + "datagrams_dropped", DROP_HELP, labels=["reason"])
    for key, value in totals.items():
        if key.startswith("dropped_"):
            drops.add_metric([key.removeprefix("dropped_")], value)
            continue
        name, text = COUNTERS.get(key, (key, f"Count of {key} (relay stats --gateway)"))
        yield CounterMetricFamily(PREFIX + name, text, value=value)
    yield drops


def _sessions(sessions: list[dict[str, Any]]) -> Iterator[Metric]:
    labels = ["session", "peer"]
    for key, (name, text) in SESSION_GAUGES.items():
        family = GaugeMetricFamily(PREFIX + name, text, labels=labels)
        for entry in sessions:
            family.add_metric([entry["id"], entry["peer"]], entry[key])
        yield family
    loss = GaugeMetricFamily(
        PREFIX + "session_loss_ratio",
        "Measured loss rate: in (client to gateway) and out (gateway to client)",
        labels=[*labels, "direction"],
    )
    for entry in sessions:
        loss.add_metric([entry["id"], entry["peer"], "in"], entry["loss_in"])
        loss.add_metric([entry["id"], entry["peer"], "out"], entry["loss_out"])
    yield loss


_REASONS = {
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
}


async def serve_stats(gateway: Gateway, sock: socket.socket) -> asyncio.Server:
    """Serve ``/stats`` and ``/metrics`` of ``gateway`` on the listening ``sock``."""
    busy = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal busy
        if busy >= MAX_CONNECTIONS:
            writer.transport.abort()
            return
        busy += 1
        try:
            status, kind, body = await _answer(gateway, reader)
            await _send(writer, status, kind, body)
        except (ConnectionError, TimeoutError) as exc:  # gone, or not reading its answer
            log.debug("stats connection: %s", exc)
            writer.transport.abort()
        finally:
            busy -= 1
            writer.close()

    return await asyncio.start_server(handle, sock=sock, limit=MAX_REQUEST_BYTES)


async def _answer(gateway: Gateway, reader: asyncio.StreamReader) -> tuple[int, str, bytes]:
    """``(status, content type, body)`` for the one request on ``reader``."""
    try:
        async with asyncio.timeout(READ_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
    except TimeoutError:
        return _error(408, "the request head did not arrive in time")
    except asyncio.IncompleteReadError:
        return _error(400, "the request ended before its head did")
    except (asyncio.LimitOverrunError, ValueError):
        return _error(400, f"the request head is over {MAX_REQUEST_BYTES} bytes")
    parts = head.split(b"\r\n", 1)[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return _error(400, "expected a request line: GET /stats HTTP/1.1")
    method, target = parts[0], parts[1].split(b"?", 1)[0]
    if method != b"GET":
        return _error(405, "only GET is served")
    if target == b"/stats":
        return 200, "application/json", json.dumps(plain(gateway.snapshot())).encode()
    if target == b"/metrics":
        return 200, CONTENT_TYPE_LATEST, render_metrics(gateway.snapshot())
    return _error(404, "the paths are /stats (JSON) and /metrics (Prometheus)")


def _error(status: int, message: str) -> tuple[int, str, bytes]:
    return status, "text/plain; charset=utf-8", f"{status} {message}\n".encode()


async def _send(writer: asyncio.StreamWriter, status: int, kind: str, body: bytes) -> None:
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n"
    )
    if status == 405:
        head += "Allow: GET\r\n"
    writer.write(head.encode() + b"\r\n" + body)
    async with asyncio.timeout(READ_TIMEOUT_S):
        await writer.drain()
