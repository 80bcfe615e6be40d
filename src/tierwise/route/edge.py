"""The gateway's edge: what a request must be before the router predicts anything.

Two layers, both answering in OpenAI's error shape (``{"error": {"message", "type",
"param", "code"}}``) and never with a 5xx for what a client sent:

- **The connection** (:func:`guarded_protocol`, uvicorn's httptools protocol with
  limits it lacks): a request head larger than ``gateway.max_header`` is a 431 and a
  head not complete within ``gateway.header_timeout`` a 408 (slow clients hold no
  connection for long); a ``Content-Length`` over ``gateway.max_body`` is a 413 before
  a byte of the body is read, and a chunked body is counted as it arrives (413 at
  the cap); a malformed request (a negative or doubled length, a bad chunk size, both
  ``Transfer-Encoding`` and ``Content-Length``) is a 400. After a refusal the rest of
  what the client sends is read and dropped for up to a second, then the connection
  closes — so the client reads its answer instead of a reset. A body that pauses for
  ``gateway.header_timeout`` is a 408 too.
- **The request** (:class:`Gate`): the client's key (``Authorization: Bearer``, looked
  up by digest in ``gateway.keys_file``: 401), its rate (a token bucket: 429 with
  ``Retry-After``) and its requests in flight (429); then :func:`read_body` (the cap
  again, for servers without the protocol above) and the schema of
  :mod:`tierwise.openai_api` (400 naming the field).

Which paths need a key when keys are on: every one, except ``/metrics`` on a gateway
that listens on loopback only (a scraper on the same host needs none; beyond
loopback it sends a key like any client).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tierwise.addresses import is_loopback
from tierwise.errors import ScenarioError, first_line
from tierwise.openai_api import RequestRejected
from tierwise.route.keys import Client, KeyRing, load_keys

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from tierwise.route.config import Gateway

__all__ = [
    "DEPARTURE",
    "Departure",
    "Gate",
    "check_exposure",
    "guarded_protocol",
    "read_body",
    "rejection",
]

DEPARTURE = "tierwise.departure"  # the scope's extension holding the request's Departure
KEYS_CHECK_S = 1.0  # the keys file is looked at (one stat) at most this often
LINGER_S = 1.0  # after a refusal, read and drop what the client still sends this long
_KINDS = {401: "authentication_error", 429: "rate_limit_error", 404: "not_found_error"}


def rejection(exc: RequestRejected) -> Response:
    """A refusal as the HTTP answer a client of OpenAI's API expects."""
    from starlette.responses import Response

    content = json.dumps(exc.body()).encode()
    return Response(content, exc.status, headers=exc.headers, media_type="application/json")


def refuse(status: int, message: str, code: str | None = None, **headers: str) -> RequestRejected:
    return RequestRejected(
        status, message, code=code, kind=_KINDS.get(status, "invalid_request_error"),
        headers=headers,
    )  # fmt: skip


async def read_body(request: Request, cap: int) -> bytes:
    """The whole body, refused (413) past ``cap`` bytes: a ``Content-Length`` over it at
    once, a chunked body as soon as it has passed it. Chunks are joined once."""
    from starlette.requests import ClientDisconnect

    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > cap:
        raise _too_large(cap)
    chunks: list[bytes] = []
    size = 0
    receive = request.receive
    while True:  # the ASGI messages themselves: a small body is one message
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            raise _too_large(cap)
        if not message.get("more_body", False):
            return chunk if not chunks else b"".join([*chunks, chunk])
        chunks.append(chunk)


def _too_large(cap: int) -> RequestRejected:
    return refuse(413, f"Request body too large: the limit is {cap:,} bytes.", "request_too_large")


def check_exposure(cfg: Gateway, public_flag: bool = False) -> None:
    """Refuse to serve beyond loopback without client keys, unless told so explicitly:
    whoever reaches such a gateway spends the sites' (cloud) API keys."""
    if cfg.keys_file is None and not (cfg.public_without_keys or public_flag):
        if not is_loopback(cfg.host):
            raise ScenarioError(
                f"listens on {cfg.host}, beyond loopback, without client keys: anyone who "
                "reaches it spends the sites' API keys. Add keys (tierwise route keys add "
                "NAME --keys-file F, then gateway.keys_file = F) or, to serve openly, set "
                "gateway.public_without_keys = true (--public-without-keys)",
                path="gateway.host",
            )


@dataclass
class _Bucket:
    rate: float
    burst: float
    concurrency: int
    tokens: float
    at: float
    in_flight: int = 0
    counter: Any = None  # the client's admitted-requests counter (labels() looked up once)


class Gate:
    """Who may send (keys), how fast (a token bucket per key) and how much at once."""

    def __init__(self, cfg: Gateway, registry: Any = None) -> None:
        self.cfg = cfg
        self.ring = KeyRing(load_keys(cfg.keys_file)) if cfg.keys_file else None
        self._keys_seen = _file_stamp(cfg.keys_file) if cfg.keys_file else None
        self._keys_checked = time.monotonic()
        self.reload_asked = False  # set by SIGHUP (a signal handler): reload at the next request
        self.reload_error: str | None = None  # the last reload's refusal, if it failed
        self.metrics_open = self.ring is None or is_loopback(cfg.host)
        self.buckets: dict[str, _Bucket] = {}
        self.rejected = self.admitted = None
        if registry is not None:
            from prometheus_client import Counter

            self.rejected = Counter(
                "tierwise_route_rejected", "Requests refused at the edge",
                ["status", "code"], registry=registry,
            )  # fmt: skip
            self.admitted = Counter(
                "tierwise_route_client_requests", "Requests admitted, by client key name",
                ["client"], registry=registry,
            )  # fmt: skip

    def note(self, exc: RequestRejected) -> None:
        if self.rejected is not None:
            self.rejected.labels(str(exc.status), exc.code or "").inc()

    def admit(self, scope: dict[str, Any]) -> Client | None:
        """The client sending ``scope`` (None with keys off), counted in flight; refused
        with 401 (no or unknown key) or 429 (over its rate or concurrency)."""
        if self.ring is None:
            return None
        if self.reload_asked or time.monotonic() - self._keys_checked >= KEYS_CHECK_S:
            self.reload_keys()
        auth = _header(scope["headers"], b"authorization")
        client = self.ring.find(auth)
        if client is None:
            what = "No API key provided" if not auth else "Incorrect API key provided"
            raise refuse(
                401, f"{what}. Send 'Authorization: Bearer <key>' with a key from "
                "tierwise route keys add.", "invalid_api_key",
            )  # fmt: skip
        b = self.buckets.get(client.name)
        now = time.monotonic()
        if b is None:
            g = self.cfg
            rate = client.rate or g.key_rate
            burst = float(client.burst or g.key_burst)
            b = self.buckets[client.name] = _Bucket(
                rate, burst, client.concurrency or g.key_concurrency, burst, now
            )
            if self.admitted is not None:
                b.counter = self.admitted.labels(client.name)
        tokens = b.tokens + (now - b.at) * b.rate
        b.tokens = tokens if tokens < b.burst else b.burst
        b.at = now
        if b.in_flight >= b.concurrency:
            raise refuse(
                429, f"Too many requests in flight for key {client.name!r} (limit "
                f"{b.concurrency}).", "concurrency_limit_exceeded", **{"retry-after": "1"},
            )  # fmt: skip
        if b.tokens < 1.0:
            wait = math.ceil((1.0 - b.tokens) / b.rate)
            raise refuse(
                429, f"Rate limit reached for key {client.name!r}: {b.rate:g} requests per "
                f"second.", "rate_limit_exceeded", **{"retry-after": str(max(wait, 1))},
            )  # fmt: skip
        b.tokens -= 1.0
        b.in_flight += 1
        if b.counter is not None:
            b.counter.inc()
        return client

    def reload_keys(self) -> bool:
        """Read the keys file again if it changed (its mtime, size or inode) or a reload
        was asked (SIGHUP): added keys are let in and removed ones refused from the next
        request on, without a restart. A file that no longer loads (a typo, 0644) keeps
        the keys in force and says why once on stderr. Whether the keys changed."""
        self._keys_checked = time.monotonic()
        asked, self.reload_asked = self.reload_asked, False
        path = self.cfg.keys_file
        if path is None or self.ring is None:
            return False
        stamp = _file_stamp(path)
        if stamp == self._keys_seen and not asked:
            return False
        self._keys_seen = stamp
        try:
            clients = load_keys(path)
        except ScenarioError as exc:
            message = f"tierwise route: keys file not reloaded, the old keys stay: {exc}"
            if message != self.reload_error:
                print(message, file=sys.stderr, flush=True)
            self.reload_error = message
            return False
        self.reload_error = None
        self.ring = KeyRing(clients)
        g = self.cfg
        for c in clients.values():  # changed limits apply now; requests in flight still count
            if (b := self.buckets.get(c.name)) is not None:
                b.rate, b.burst = c.rate or g.key_rate, float(c.burst or g.key_burst)
                b.concurrency = c.concurrency or g.key_concurrency
                b.tokens = min(b.tokens, b.burst)
        print(f"tierwise route: keys file reloaded, {len(clients)} clients", file=sys.stderr,
              flush=True)  # fmt: skip
        return True

    def release(self, client: Client | None) -> None:
        if client is not None:
            self.buckets[client.name].in_flight -= 1


def _file_stamp(path: str | None) -> tuple[int, int, int] | None:
    """What tells a changed file: its mtime (ns), size and inode (None if it is gone)."""
    try:
        st = os.stat(path) if path is not None else None
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino) if st is not None else None


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


# ------------------------------------------------------------------ the connection


class Departure:
    """Whether a request's client has gone (its connection lost, or refused mid-request),
    and what to call when it goes — set by :func:`guarded_protocol` in the request's
    ``scope["extensions"][DEPARTURE]``, so an app learns of a departure without a task
    of its own awaiting ASGI's ``http.disconnect``."""

    __slots__ = ("callbacks", "gone")

    def __init__(self) -> None:
        self.gone = False
        self.callbacks: list[Any] = []

    def watch(self, callback: Any) -> None:
        """Call ``callback()`` when the client goes (at once if it has)."""
        if self.gone:
            callback()
        else:
            self.callbacks.append(callback)

    def unwatch(self, callback: Any) -> None:
        with contextlib.suppress(ValueError):
            self.callbacks.remove(callback)

    def left(self) -> None:
        if not self.gone:
            self.gone = True
            callbacks, self.callbacks = self.callbacks, []
            for callback in callbacks:
                callback()


def guarded_protocol(max_body: int, max_header: int, header_timeout_s: float) -> type:
    """uvicorn's httptools protocol (writing through
    :func:`~tierwise.route.coalesce.coalescing_protocol`'s head holder) with the
    limits of the module docstring."""
    import httptools

    from tierwise.route.coalesce import coalescing_protocol

    class _Refused(Exception):
        pass

    class GuardedHttpToolsProtocol(coalescing_protocol()):  # type: ignore[misc]
        """One timer per connection, re-armed when it fires (not per request): a request
        only stores the time its phase began, so the limits cost a request a few
        attribute writes. Phases: ``head`` (waiting for or reading a request head),
        ``body`` (reading its body: the time is that of the last byte) and ``app``
        (the answer is being made: no limit here, ``gateway.timeout`` bounds it)."""

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._phase = "head"
            self._since = self.loop.time()
            self._head = 0  # bytes received in this head so far
            self._body = 0
            self._refusal: RequestRejected | None = None
            self._dropping = False
            self._timer = self.loop.call_later(header_timeout_s, self._tick)

        def connection_lost(self, exc: Exception | None) -> None:
            self._timer.cancel()
            cycle = self.cycle
            running = cycle is not None and not cycle.response_complete
            super().connection_lost(exc)
            if running:  # as uvicorn tells the cycle it marks disconnected
                _left(cycle)

        def data_received(self, data: bytes) -> None:
            if self._dropping:
                return
            if self._phase == "head":
                self._head += len(data)
            self._unset_keepalive_if_required()
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                self._refuse(refuse(400, "Protocol upgrades are not supported.", "upgrade"))
                return
            except httptools.HttpParserError as exc:
                cause = self._refusal or refuse(
                    400, f"Invalid HTTP request: {first_line(exc)}.", "invalid_http"
                )
                self._refuse(cause)
                return
            if self._phase == "head" and self._head > max_header:
                self._refuse(_header_too_large(max_header))

        def on_headers_complete(self) -> None:
            if self._head > max_header and self._head_size() > max_header:
                self._refusal = _header_too_large(max_header)
                raise _Refused
            length = _header(self.headers, b"content-length")
            if length is not None and length.isdigit() and int(length) > max_body:
                self._refusal = _too_large(max_body)
                raise _Refused
            self._phase, self._since, self._body = "body", self.loop.time(), 0
            self.scope.setdefault("extensions", {})[DEPARTURE] = Departure()
            super().on_headers_complete()

        def _head_size(self) -> int:
            """The head's size as parsed (this chunk may hold a body after it)."""
            return len(self.url) + sum(len(k) + len(v) + 4 for k, v in self.headers)

        def on_body(self, body: bytes) -> None:
            self._body += len(body)
            self._since = self.loop.time()
            if self._body > max_body:
                self._refusal = _too_large(max_body)
                raise _Refused
            super().on_body(body)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._head = 0
            if self.cycle is not None and self.cycle.response_complete:  # answered early
                self._phase, self._since = "head", self.loop.time()
            else:
                self._phase = "app"

        def on_response_complete(self) -> None:
            pipelined = bool(self.pipeline)  # a request already read: its answer is next
            super().on_response_complete()
            if self._phase == "app" and not pipelined:  # the next head: within the timeout
                self._phase, self._since = "head", self.loop.time()

        def _tick(self) -> None:
            """The connection's timer: a head or a body late by ``header_timeout`` is
            refused (an idle connection closed); otherwise look again when it could be."""
            if self.transport.is_closing():
                return
            wait = header_timeout_s
            if self._phase != "app":
                idle = self.loop.time() - self._since
                if idle >= header_timeout_s:
                    self._late()
                    return
                wait -= idle
            self._timer = self.loop.call_later(wait, self._tick)

        def _late(self) -> None:
            if self._phase == "head" and self._head == 0:  # idle: nothing to answer
                self.transport.close()
                return
            what = "Request head not received" if self._phase == "head" else (
                "No byte of the request body"
            )  # fmt: skip
            self._refuse(refuse(408, f"{what} within {header_timeout_s:g} s.", "request_timeout"))

        def _refuse(self, exc: RequestRejected) -> None:
            """Answer ``exc`` (unless a response is under way), read and drop whatever
            else comes for :data:`LINGER_S`, then close."""
            self._dropping = True
            self._timer.cancel()
            cycle = self.cycle
            running = cycle is not None and not cycle.response_complete
            if running:  # the app is reading this body: it sees a disconnect
                cycle.disconnected = True
                cycle.message_event.set()
                _left(cycle)
            if not running or not cycle.response_started:
                content = json.dumps(exc.body()).encode()
                head = [
                    f"HTTP/1.1 {exc.status} {_REASONS.get(exc.status, '')}",
                    "content-type: application/json",
                    f"content-length: {len(content)}",
                    "connection: close",
                    *(f"{k}: {v}" for k, v in exc.headers.items()),
                ]
                self.transport.write("\r\n".join(head).encode() + b"\r\n\r\n" + content)
            with contextlib.suppress(OSError, RuntimeError):
                if self.transport.can_write_eof():
                    self.transport.write_eof()
                self.transport.resume_reading()
            self.loop.call_later(LINGER_S, self.transport.close)

    return GuardedHttpToolsProtocol


def _left(cycle: Any) -> None:
    """The client of ``cycle``'s request has gone: its :class:`Departure` says so."""
    departure = cycle.scope.get("extensions", {}).get(DEPARTURE)
    if departure is not None:
        departure.left()


def _header_too_large(limit: int) -> RequestRejected:
    return refuse(
        431, f"Request header fields too large: the limit is {limit:,} bytes.",
        "request_header_fields_too_large",
    )  # fmt: skip


_REASONS = {
    400: "Bad Request", 408: "Request Timeout", 413: "Content Too Large",
    431: "Request Header Fields Too Large",
}  # fmt: skip
