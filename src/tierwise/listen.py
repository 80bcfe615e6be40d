"""A listening TCP socket for a server, with every failure as one line.

The model server and the route gateway bind before they hand the socket to uvicorn,
so a port out of range, an unknown host or an address in use is one
:class:`~tierwise.errors.ScenarioError` (exit 2) instead of a hang or a log line.
"""

from __future__ import annotations

import socket

from tierwise.errors import ScenarioError, shown

__all__ = ["listen_socket"]

BACKLOG = 2048  # uvicorn's default


def listen_socket(host: str, port: int, source: str = "--port") -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening; port 0 takes any free port."""
    if not 0 <= port <= 65_535:
        raise ScenarioError(f"a TCP port lies in 0..65535, got {shown(port)}", source=source)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise ScenarioError(f"cannot resolve host {shown(host)}: {exc}", source=source) from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise ScenarioError(
            f"cannot listen on {shown(host)}:{port}: {exc.strerror or exc}", source=source
        ) from None
    return sock
