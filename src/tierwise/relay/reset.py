"""Breaking a TCP connection so that its application cannot mistake the break for an end.

``transport.abort()`` on a socket with nothing unread sends a FIN, which the far
application reads as a clean end of data. When a relay stream is reset or its
session is lost, the TCP side must see an error instead: ``SO_LINGER`` with a
zero timeout makes the close an RST.
"""

from __future__ import annotations

import socket
import struct
from typing import Protocol

__all__ = ["abort_with_rst"]

_LINGER_RST = struct.pack("ii", 1, 0)


class _Abortable(Protocol):
    writer: object

    def abort(self) -> None: ...


def abort_with_rst(pipe: _Abortable) -> None:
    """Abort ``pipe``'s TCP connection with an RST (then whatever ``pipe.abort`` does)."""
    sock = pipe.writer.get_extra_info("socket")  # type: ignore[attr-defined]
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
        except OSError:
            pass
    pipe.abort()
