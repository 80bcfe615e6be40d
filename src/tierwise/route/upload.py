"""Watch a large upload's real progress and drop it when another site would finish sooner.

The gateway cannot learn a collapsed uplink from a site it no longer uses, so the first
large request after the collapse still goes there. Waiting for its patience (3× the
prediction) before hedging cost seconds in the lab (§12.5.3: re-evaluate when
conditions change). What the kernel has *delivered* tells sooner: ``TCP_INFO``'s
``tcpi_bytes_acked`` counts the bytes the far end acknowledged, whatever the send
buffer swallowed. Sampled every 50 ms, the acknowledged rate over the last two RTTs is
the path's rate once it stops growing (slow start doubles it each RTT; a plateau means
the bottleneck is found). If at that rate the rest of the upload plus the predicted
server time is longer than the next site's whole time (with a margin), finishing here
cannot be sooner: the upload is dropped (:class:`SlowUpload`), the rate becomes an
upper bound on the site's uplink, and the request fails over at once.

The body is written in pieces, never more than about three round trips' worth of
acknowledged bytes ahead of the acknowledgements (:meth:`UploadWatch.room`; at least
64 kB): on a healthy path that cap stays above slow start's window and costs nothing,
on a collapsed one it keeps the path's queue short — so a dropped upload leaves a
small backlog behind it (a few tenths of a second at 3 Mbit/s instead of the whole
congestion window the path's queue let grow), and what is in flight when it is
dropped (``tcpi_unacked``) predicts that backlog's drain.

The socket comes from a thin wrapper round httpcore's network backend
(:func:`watch_backend`): a stream's first write while a watch is current (a context
variable set per attempt) hands the watch its socket.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import contextvars
import socket
import struct
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONNECTS",
    "SlowUpload",
    "UploadWatch",
    "tcp_bytes_acked",
    "tcp_in_flight_bytes",
    "watch_backend",
]

STEP_S = 0.05  # how often the watch samples the socket
MIN_BYTES = 256 * 1024  # smaller bodies are over before a rate is measurable
MIN_S = 0.1  # the shortest window, and the margin added to the next site's time
PLATEAU = 1.3  # the rate grew less than this over one window: slow start is over
SWITCH_MARGIN = 1.25  # fail over only when the next site is clearly sooner
_TCP_INFO = getattr(socket, "TCP_INFO", 11)
_BYTES_ACKED = struct.Struct("=Q")
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST
_BYTES_ACKED_OFFSET = 120  # struct tcp_info.tcpi_bytes_acked (Linux ≥ 4.1)
PIECE_BYTES = 32 * 1024  # the body goes to the socket in pieces this large
MIN_AHEAD_BYTES = 64 * 1024  # the least written-but-unacknowledged allowance
AHEAD_RTTS = 3  # the allowance: the bytes acknowledged over the last RTT, times this
ROOM_POLL_S = 0.01  # how often a held-back write looks at the acknowledgements again

CURRENT: contextvars.ContextVar[UploadWatch | None] = contextvars.ContextVar(
    "tierwise_upload_watch", default=None
)
CONNECTS: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "tierwise_connects", default=None
)  # an attempt's list: a new connection's TCP connect time (s) is appended to it


def tcp_in_flight_bytes(sock: Any) -> int:
    """Bytes sent but not yet acknowledged (``tcpi_unacked`` segments × ``tcpi_snd_mss``)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 256)
        (mss,) = struct.unpack_from("=I", info, 16)  # tcpi_snd_mss
        (unacked,) = struct.unpack_from("=I", info, 24)  # tcpi_unacked (after tcpi_rcv_mss)
    except (OSError, AttributeError, struct.error):
        return 0
    return mss * unacked


def tcp_bytes_acked(sock: Any) -> int | None:
    """Bytes the peer has acknowledged on this TCP socket so far (None: not available)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 256)
    except (OSError, AttributeError):
        return None
    if len(info) < _BYTES_ACKED_OFFSET + 8:
        return None
    return _BYTES_ACKED.unpack_from(info, _BYTES_ACKED_OFFSET)[0]


class SlowUpload(Exception):
    """An upload whose progress says another site would finish the request sooner."""

    def __init__(self, rate_bytes_per_s: float, drain_s: float = 0.0) -> None:
        super().__init__(f"upload at {rate_bytes_per_s * 8e-6:.2f} Mbit/s")
        self.rate_bytes_per_s = rate_bytes_per_s
        self.drain_s = drain_s  # how long the dropped bytes in flight still queue on the path


@dataclass
class UploadWatch:
    """One attempt's upload: its size, the prediction's parts and the samples taken."""

    size_bytes: int
    rtt_s: float
    rest_s: float  # predicted time after the upload (server, download)
    switch_s: float  # the next site's whole predicted time
    sock: Any = None
    base_acked: int = 0
    started: float = 0.0
    times: list[float] = field(default_factory=list)
    acked: list[int] = field(default_factory=list)
    uploaded: bool = False
    rate_bytes_per_s: float = 0.0
    written: int = 0  # bytes handed to the socket since :meth:`attach`

    def attach(self, sock: Any) -> None:
        """The connection's socket, before the request's first byte is written."""
        base = tcp_bytes_acked(sock)
        if base is not None:
            self.sock, self.base_acked = sock, base

    async def run(self, send: Awaitable[Any]) -> Any:
        """Await ``send``, sampling the socket; :class:`SlowUpload` if it is dropped."""
        token = CURRENT.set(self)
        try:
            task = asyncio.ensure_future(send)  # copies the context: the backend sees us
        finally:
            CURRENT.reset(token)
        self.started = time.perf_counter()
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=STEP_S)
                if done:
                    return task.result()
                if self.sample(time.perf_counter() - self.started):
                    drain_s = tcp_in_flight_bytes(self.sock) / max(self.rate_bytes_per_s, 1.0)
                    self.abort()
                    raise SlowUpload(self.rate_bytes_per_s, drain_s)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def room(self) -> None:
        """Wait until the bytes written but not yet acknowledged are under the allowance:
        ``AHEAD_RTTS`` × what was acknowledged over the last round trip (≥ 64 kB)."""
        while self.sock is not None and not self.uploaded:
            acked = tcp_bytes_acked(self.sock)
            if acked is None:
                return
            acked -= self.base_acked
            t = time.perf_counter() - self.started
            _, before = self._sample_at(t - max(self.rtt_s, STEP_S))
            ahead = max(MIN_AHEAD_BYTES, AHEAD_RTTS * (acked - before))
            if self.written - acked < ahead:
                return
            await asyncio.sleep(ROOM_POLL_S)

    def abort(self) -> None:
        """Make the connection's close a reset: the kernel drops what it still holds of
        the body instead of pushing it up the slow path ahead of the next request."""
        with contextlib.suppress(OSError, AttributeError):
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)

    def sample(self, elapsed_s: float) -> bool:
        """Record the acknowledged bytes now; whether to drop the upload."""
        if self.sock is None or self.uploaded:
            return False
        now = tcp_bytes_acked(self.sock)
        if now is None:
            return False
        self.times.append(elapsed_s)
        self.acked.append(now - self.base_acked)
        if self.acked[-1] >= self.size_bytes:
            self.uploaded = True
            return False
        return self.verdict()

    def verdict(self) -> bool:
        """Drop when the rate has stopped growing and, at it, another site is sooner."""
        if self.size_bytes < MIN_BYTES or not self.times:
            return False
        window = max(2 * self.rtt_s, MIN_S)
        t, now = self.times[-1], self.acked[-1]
        if t < 2 * window:
            return False
        t_mid, mid = self._sample_at(t - window)
        t_old, old = self._sample_at(t_mid - window)
        if t_mid <= t_old:
            return False
        recent, before = (now - mid) / (t - t_mid), (mid - old) / (t_mid - t_old)
        if recent <= 0 or recent > PLATEAU * before:
            return False  # a stall is the patience's business; a growing rate is slow start
        self.rate_bytes_per_s = recent
        remaining_s = (self.size_bytes - now) / recent + self.rest_s
        return remaining_s > SWITCH_MARGIN * self.switch_s + MIN_S

    def _sample_at(self, t: float) -> tuple[float, int]:
        """The last sample taken at or before ``t`` (the send itself: 0 s, 0 bytes)."""
        i = bisect.bisect_right(self.times, t) - 1
        return (self.times[i], self.acked[i]) if i >= 0 else (0.0, 0)


def watch_backend(inner: Any) -> Any:
    """httpcore's network backend ``inner``, with streams that hand a current watch
    their socket on the first write of a request."""
    import httpcore

    from tierwise.route.coalesce import HeldHead

    class Stream(httpcore.AsyncNetworkStream):
        def __init__(self, stream: Any) -> None:
            self.stream = stream
            self.head = HeldHead()  # a small request's head and body go in one write

        async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            if held := self.head.release():
                await self.stream.write(held, timeout)
            return await self.stream.read(max_bytes, timeout)

        async def write(self, buffer: bytes, timeout: float | None = None) -> None:
            watch = CURRENT.get()
            if watch is not None and watch.sock is None:
                watch.attach(self.stream.get_extra_info("socket"))
            if watch is None or watch.sock is None:
                for data in self.head.take(buffer):
                    await self.stream.write(data, timeout)
                return
            if held := self.head.release():
                await self.stream.write(held, timeout)
            for start in range(0, len(buffer), PIECE_BYTES):  # paced by acknowledgements
                await watch.room()
                piece = buffer[start : start + PIECE_BYTES]
                await self.stream.write(piece, timeout)
                watch.written += len(piece)

        async def aclose(self) -> None:
            await self.stream.aclose()

        async def start_tls(self, *args: Any, **kwargs: Any) -> Any:
            return Stream(await self.stream.start_tls(*args, **kwargs))

        def get_extra_info(self, info: str) -> Any:
            return self.stream.get_extra_info(info)

    class Backend(httpcore.AsyncNetworkBackend):
        async def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            stream = await inner.connect_tcp(*args, **kwargs)
            if (connects := CONNECTS.get()) is not None:
                connects.append(time.perf_counter() - started)
            with contextlib.suppress(OSError, AttributeError):  # asyncio sets it; be sure
                sock = stream.get_extra_info("socket")
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return Stream(stream)

        async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
            return Stream(await inner.connect_unix_socket(*args, **kwargs))

        async def sleep(self, seconds: float) -> None:
            await inner.sleep(seconds)

    return Backend()
