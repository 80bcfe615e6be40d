"""The model service of the lab: ``POST /infer`` reads the upload, waits, answers (§12.3.5).

The standard library's :class:`http.server.ThreadingHTTPServer`, not uvicorn: it is
no extra dependency, and the lab only needs what it does exactly — HTTP/1.1
keep-alive, a body read to its ``Content-Length``, and a response of a known byte
count. Its overhead (well under a millisecond per request) is noise beside the
round trips being measured.

The listening socket is created inside the server namespace (:func:`netns.entered`);
a socket keeps its namespace for life, so accepted connections and the serving
threads need no namespace of their own.
"""

from __future__ import annotations

import hashlib
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tierwise.errors import LabError
from tierwise.lab.bench import netns

__all__ = ["INFER_PATH", "ModelService", "ServiceConfig", "set_buffers", "set_congestion"]

INFER_PATH = "/infer"
READ_CHUNK_BYTES = 1 << 20
SO_RCVBUFFORCE = 33  # <asm-generic/socket.h>; root may exceed net.core.rmem_max
SO_SNDBUFFORCE = 32


@dataclass(frozen=True)
class ServiceConfig:
    """What one request costs the service: ``processing_s`` of waiting, ``response_bytes`` back."""

    processing_s: float = 0.0
    response_bytes: int = 1000
    buffer_bytes: int | None = (
        None  # SO_RCVBUF/SO_SNDBUF on the listener (inherited); None = autotuning
    )
    congestion: str | None = (
        None  # TCP_CONGESTION on the listener (inherited); None = namespace default
    )
    digest: bool = False  # the response begins with the upload's SHA-256 (byte-exact proof)

    def __post_init__(self) -> None:
        if self.processing_s < 0 or self.response_bytes < 0:
            raise LabError("processing time and response size must be ≥ 0")


def set_congestion(sock: socket.socket, name: str) -> None:
    """Use congestion control ``name`` on ``sock`` (root may pick one the host restricts)."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
    except OSError as exc:
        raise LabError(
            f"cannot use congestion control {name!r}: {exc} (is its module loaded?)"
        ) from exc


def set_buffers(sock: socket.socket, size_bytes: int) -> None:
    """Pin both socket buffers to ``size_bytes`` (the ``FORCE`` options: root ignores the caps).

    Setting them turns off the kernel's autotuning for that socket; before ``listen``
    or ``connect`` they also fix the window scale the handshake negotiates.
    """
    sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, size_bytes)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size_bytes)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless the client says close
    disable_nagle_algorithm = True  # a response's tail must not wait for an ACK
    server: _Server

    def do_POST(self) -> None:
        if self.path != INFER_PATH:
            self.send_error(404)
            return
        remaining = int(self.headers.get("Content-Length", "0"))
        config = self.server.config
        sha = hashlib.sha256()
        while remaining > 0:
            chunk = self.rfile.read(min(remaining, READ_CHUNK_BYTES))
            if not chunk:
                return  # the client went away mid-upload
            remaining -= len(chunk)
            if config.digest:
                sha.update(chunk)
        cc = self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
        self.server.congestion_seen.add(cc.rstrip(b"\0").decode())
        time.sleep(config.processing_s)
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {config.response_bytes}\r\n\r\n"
        ).encode()
        body = bytearray(config.response_bytes)
        if config.digest:
            digest = sha.digest()[: len(body)]
            body[: len(digest)] = digest
        self.wfile.write(head + body)  # one write: one flight
        self.server.requests += 1

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    config: ServiceConfig
    requests: int = 0
    congestion_seen: set[str]
    resets: int = 0  # connections the peer reset (a relay's --forward check, an aborted run)

    def handle_error(self, request: object, client_address: object) -> None:
        """A peer that resets its connection is normal traffic, not an error to print: the
        standard library would write its traceback to the user's terminal. Others still are."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            self.resets += 1
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class ModelService:
    """``with ModelService(ns, addr, config) as svc:`` serves ``http://addr:svc.port/infer``.

    ``port=0`` lets the kernel choose. The server thread stops, and the listening
    socket closes, when the block ends.
    """

    def __init__(self, namespace: str, address: str, config: ServiceConfig, port: int = 0):
        self.namespace = namespace
        self.address = address
        self.config = config
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "the service is not running"
        return self._server.server_address[1]

    @property
    def requests(self) -> int:
        return self._server.requests if self._server is not None else 0

    @property
    def congestion_seen(self) -> set[str]:
        """Congestion controls the accepted connections used (read with ``TCP_CONGESTION``)."""
        return set(self._server.congestion_seen) if self._server is not None else set()

    def start(self) -> None:
        with netns.entered(self.namespace):
            server = _Server((self.address, self._port), _Handler, bind_and_activate=False)
        server.config = self.config
        server.congestion_seen = set()
        try:
            server.server_bind()
            if self.config.buffer_bytes is not None:
                set_buffers(server.socket, self.config.buffer_bytes)
            if self.config.congestion is not None:
                set_congestion(server.socket, self.config.congestion)
            server.server_activate()
        except OSError as exc:
            server.server_close()
            raise LabError(f"the model service cannot listen on {self.address}: {exc}") from exc
        except BaseException:
            server.server_close()
            raise
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="model-service")
        self._thread.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        assert self._thread is not None
        self._thread.join()
        self._server = None

    def __enter__(self) -> ModelService:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
