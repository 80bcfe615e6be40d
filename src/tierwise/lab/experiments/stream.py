"""Model token streams through each transport: how late every token arrives (issue 32).

A model answers as a token stream (server-sent events), not a file: what a user sees
is each token's lateness, not the transfer's time. :class:`TokenSource` plays the
model in the server namespace: on ``GET /v1/stream`` it answers ``200 OK``,
``Content-Type: text/event-stream``, then emits ``tokens`` events at
``tokens_per_s`` (50/s, a few bytes of text each: a chat model's pace), one write
per event with ``TCP_NODELAY`` (as an ASGI server sends them), each carrying its
index and its emission time on the monotonic clock, then ``data: [DONE]``.

The client (the client namespace, the same process, so the same clock) reads through
each transport of :mod:`.tunnels` and stamps every event as its last byte arrives.
A token's lateness is its arrival less the earliest it could arrive on the same
path without loss: its emission plus the one-way delay (half the RTT; a few bytes
add no serialisation worth counting)::

    lateness_i = arrival_i − (emitted_i + RTT/2)

so it is measured per token, never assumed from a transfer time; at 0 % loss it
shows what a transport adds by itself. Streams alternate between the transports,
``streams`` per transport at each loss level (random loss each way: the request
goes up, the tokens come down).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tierwise.errors import LabError
from tierwise.lab.bench import netns
from tierwise.lab.bench.emulator import Direction
from tierwise.lab.bench.path import MTU_BYTES, EmulatedPath, PathConfig
from tierwise.lab.bench.service import set_congestion
from tierwise.lab.experiments.tunnels import (
    kcptun_unavailable_reason,
    open_tunnel,
    retry_until,
    tunnel_record,
)

__all__ = [
    "LATE_S",
    "StreamExperiment",
    "TokenSource",
    "lateness_summary",
    "read_stream",
    "run_stream",
]

STREAM_PATH = "/v1/stream"
CONNECT_TIMEOUT_S = 15.0
WARMUP_TIMEOUT_S = 60.0
LATE_S = (0.1, 0.5)  # the thresholds: ≤ 1 % (14 %) / 0.1 % (3.6 %) > 100 ms; 0.1 % > 500 ms
MAX_EVENT_BYTES = 4096  # a token event is ≈ 60 bytes: more without a blank line is not ours
_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Connection: close\r\n\r\n"
)


@dataclass(frozen=True)
class StreamExperiment:
    """``streams`` streams of ``tokens`` tokens per transport at each loss level."""

    vias: tuple[str, ...]
    losses: tuple[float, ...] = (0.0, 0.036, 0.14)
    tokens: int = 500
    streams: int = 4
    tokens_per_s: float = 50.0
    token_text: str = "tok "  # 4 bytes of text per token (a token is ≈ 4 characters)
    rtt_s: float = 0.200
    rate_bytes_per_s: float = 333e6 / 8
    cc: str = "cubic"
    seed: int = 0
    mtu_bytes: int = MTU_BYTES

    def __post_init__(self) -> None:
        if not 1 <= self.tokens <= 1_000_000 or not 1 <= self.streams <= 10_000:
            raise LabError("tokens must be in [1, 1e6] and streams in [1, 1e4]")
        if not 0 < self.tokens_per_s <= 10_000:
            raise LabError("tokens_per_s must be in (0, 10,000]")

    def path_config(self, loss: float) -> PathConfig:
        """Half the RTT and the rate each way, ``loss`` each way."""
        half = self.rtt_s / 2
        up = Direction(delay_s=half, rate_bytes_per_s=self.rate_bytes_per_s, loss=loss)
        down = Direction(delay_s=half, rate_bytes_per_s=self.rate_bytes_per_s, loss=loss)
        return PathConfig(up=up, down=down, seed=self.seed, mtu_bytes=self.mtu_bytes)

    @property
    def stream_s(self) -> float:
        return self.tokens / self.tokens_per_s


class TokenSource:
    """A token-streaming model service on ``listener`` (bound and listening): every
    ``GET /v1/stream`` gets ``tokens`` SSE events at ``tokens_per_s``."""

    def __init__(
        self, listener: socket.socket, tokens: int, tokens_per_s: float, text: str = "tok "
    ) -> None:
        self.listener = listener
        self.tokens, self.interval_s, self.text = tokens, 1.0 / tokens_per_s, text
        self.late_emits = 0  # events this source wrote more than 5 ms after their slot
        self.thread = threading.Thread(target=self._serve, daemon=True, name="token-source")
        self.thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.listener.getsockname()[:2]

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request = _read_head(conn)
            if request is None or not request.startswith(f"GET {STREAM_PATH} ".encode()):
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                return
            conn.sendall(_HEAD)
            start = time.monotonic()
            for i in range(self.tokens):
                slot = start + i * self.interval_s
                if (wait := slot - time.monotonic()) > 0:
                    time.sleep(wait)
                emitted = time.monotonic()
                if emitted - slot > 0.005:
                    self.late_emits += 1
                event = {"i": i, "t": emitted, "choices": [{"delta": {"content": self.text}}]}
                conn.sendall(b"data: " + json.dumps(event).encode() + b"\n\n")
            conn.sendall(b"data: [DONE]\n\n")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(5)


def _read_head(conn: socket.socket) -> bytes | None:
    """The request's head (up to the blank line), at most 8 kB; None if it never ends."""
    conn.settimeout(CONNECT_TIMEOUT_S)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(4096)
        if not chunk or len(head) > 8192:
            return None
        head += chunk
    return head


def read_stream(
    sock: socket.socket, address: tuple[str, int], timeout_s: float
) -> list[tuple[int, float, float]]:
    """Connect, ask for the stream, and read it to ``[DONE]``: ``(index, emitted,
    arrived)`` per token on the monotonic clock, stamped when its event's last byte
    arrived. A stream that breaks, stalls for ``timeout_s`` or is malformed raises
    ``LabError`` naming what was wrong (a failure is a result the caller counts)."""
    sock.settimeout(CONNECT_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.connect(address)
    sock.sendall(
        f"GET {STREAM_PATH} HTTP/1.1\r\nHost: model\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    sock.settimeout(timeout_s)
    buf = b""
    head_done = False
    tokens: list[tuple[int, float, float]] = []
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise LabError(
                f"the stream stalled for {timeout_s:g} s after {len(tokens)} tokens"
            ) from None
        arrived = time.monotonic()
        if not chunk:
            raise LabError(f"the stream ended without [DONE] after {len(tokens)} tokens")
        buf += chunk
        if not head_done:
            if b"\r\n\r\n" not in buf:
                continue
            head, buf = buf.split(b"\r\n\r\n", 1)
            if not head.startswith(b"HTTP/1.1 200"):
                status = head.split(b"\r\n", 1)[0]
                raise LabError(f"the service answered {status!r}")
            head_done = True
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if event == b"data: [DONE]":
                return tokens
            tokens.append(_token(event, arrived))
        if len(buf) > MAX_EVENT_BYTES:
            raise LabError(f"an event longer than {MAX_EVENT_BYTES} bytes")


def _token(event: bytes, arrived: float) -> tuple[int, float, float]:
    if not event.startswith(b"data: "):
        raise LabError(f"not an SSE data event: {event[:40]!r}")
    try:
        data = json.loads(event[6:])
        return int(data["i"]), float(data["t"]), arrived
    except (ValueError, KeyError, TypeError) as exc:
        raise LabError(f"a malformed token event: {event[:60]!r}") from exc


def lateness_summary(latenesses: list[float], failed: int = 0) -> dict:
    """Count, share later than each of ``LATE_S``, median, p99, p99.9 and the worst (s)."""
    import numpy as np

    row: dict = {"tokens": len(latenesses), "failed_streams": failed}
    if not latenesses:
        return row
    values = np.asarray(latenesses)
    for bound in LATE_S:
        row[f"late_over_{bound * 1e3:g}ms"] = float(np.mean(values > bound))
    p50, p99, p999 = (float(x) for x in np.percentile(values, [50, 99, 99.9]))
    row.update(median_s=p50, p99_s=p99, p999_s=p999, worst_s=float(values.max()))
    return row


@dataclass
class _Cell:
    latenesses: list[float] = field(default_factory=list)
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    first_token_s: list[float] = field(default_factory=list)


def run_stream(exp: StreamExperiment, progress: Callable[[dict], None] | None = None) -> dict:
    """Every (loss, transport) cell's token lateness; the JSON-ready record."""
    netns.require_lab()
    if "kcptun" in exp.vias and (reason := kcptun_unavailable_reason()) is not None:
        raise LabError(f"--via kcptun: {reason}")
    rows, emulator = [], {}
    for loss in exp.losses:
        path = EmulatedPath(exp.path_config(loss))
        with path, _source(path, exp) as source, contextlib.ExitStack() as stack:
            tunnels = {
                via: stack.enter_context(
                    open_tunnel(via, path, source.address, exp.rtt_s, exp.rate_bytes_per_s)
                )
                for via in exp.vias
            }
            cells = {via: _Cell() for via in exp.vias}
            for via, tunnel in tunnels.items():  # a session up and measured, as a user's is
                warm = functools.partial(_one, path, tunnel, exp)
                retry_until(warm, WARMUP_TIMEOUT_S, f"{via} warm-up")
            for run in range(exp.streams):
                for via, tunnel in tunnels.items():
                    _stream_into(cells[via], path, tunnel, exp)
                    if progress is not None:
                        progress({"loss": loss, "via": via, "run": run})
            for via, cell in cells.items():
                row = {"loss": loss, "via": via, **lateness_summary(cell.latenesses, cell.failed)}
                if cell.first_token_s:
                    row["first_token_s_median"] = sorted(cell.first_token_s)[
                        len(cell.first_token_s) // 2
                    ]
                row["errors"] = cell.errors[:5]
                row["source_late_emits"] = source.late_emits
                row.update(tunnel_record(tunnels[via]))
                rows.append(row)
        emulator[f"{loss:g}"] = {k: vars(v) for k, v in (path.stats or {}).items()}
    return {
        "experiment": "token-stream-via",
        "parameters": {
            "vias": list(exp.vias),
            "losses": list(exp.losses),
            "loss_direction": "each way",
            "tokens": exp.tokens,
            "streams": exp.streams,
            "tokens_per_s": exp.tokens_per_s,
            "token_text_bytes": len(exp.token_text.encode()),
            "rtt_s": exp.rtt_s,
            "rate_bytes_per_s": exp.rate_bytes_per_s,
            "cc_direct": exp.cc,
            "mtu_bytes": exp.mtu_bytes,
            "seed": exp.seed,
            "lateness": "arrival − (emission + RTT/2), per token",
        },
        "kernel": os.uname().release,
        "rows": rows,
        "emulator": emulator,
    }


@contextlib.contextmanager
def _source(path: EmulatedPath, exp: StreamExperiment) -> Iterator[TokenSource]:
    listener = path.socket("server")
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    set_congestion(listener, exp.cc)
    listener.bind((path.server_addr, 0))
    listener.listen(16)
    source = TokenSource(listener, exp.tokens, exp.tokens_per_s, exp.token_text)
    try:
        yield source
    finally:
        source.close()


def _one(path: EmulatedPath, tunnel, exp: StreamExperiment):  # type: ignore[no-untyped-def]
    sock = path.socket("client")
    if tunnel.via == "direct":
        set_congestion(sock, exp.cc)
    with sock:
        started = time.monotonic()
        timeout_s = max(10.0, 20 * exp.rtt_s)
        tokens = read_stream(sock, (tunnel.host, tunnel.port), timeout_s)
    if len(tokens) != exp.tokens or [t[0] for t in tokens] != list(range(exp.tokens)):
        raise LabError(f"{len(tokens)} tokens arrived, not {exp.tokens} in order")
    return started, tokens


def _stream_into(cell: _Cell, path: EmulatedPath, tunnel, exp: StreamExperiment) -> None:  # type: ignore[no-untyped-def]
    try:
        started, tokens = _one(path, tunnel, exp)
    except (OSError, LabError) as exc:
        tunnel.check_alive()
        cell.failed += 1
        cell.errors.append(f"{type(exc).__name__}: {exc}")
        return
    one_way = exp.rtt_s / 2
    cell.latenesses.extend(arrived - (emitted + one_way) for _, emitted, arrived in tokens)
    cell.first_token_s.append(tokens[0][2] - started)
