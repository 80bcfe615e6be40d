"""Breaking a TCP connection so that its application cannot mistake the break for an end.

``transport.abort()`` on a socket with nothing unread sends a FIN, which the far
application reads as a clean end of data. When a relay stream is reset or its
session is lost, the TCP side must see an error instead: ``SO_LINGER`` with a
zero timeout makes the close an RST.

The same holds when the relay process itself dies: the kernel closes a dead
process's sockets, and one with nothing unread would send a FIN after part of the
data. A :class:`~tierwise.relay.pipe.Pipe` therefore keeps its socket
:func:`lingering zero <linger_zero>` from the start and turns it back to an orderly
close only when the stream's end has been handed to the kernel.
"""

from __future__ import annotations

import socket
import struct
from typing import Protocol

__all__ = ["abort_with_rst", "linger_zero"]

_LINGER_RST = struct.pack("ii", 1, 0)
_LINGER_OFF = struct.pack("ii", 0, 0)


class _Abortable(Protocol):
    writer: object

    def abort(self) -> None: ...


def abort_with_rst(pipe: _Abortable) -> None:
    """Abort ``pipe``'s TCP connection with an RST (then whatever ``pipe.abort`` does)."""
    linger_zero(pipe.writer.get_extra_info("socket"), True)  # type: ignore[attr-defined]
    pipe.abort()


def linger_zero(sock: socket.socket | None, on: bool) -> None:
    """Make ``sock``'s close an RST (``on``) or an orderly FIN again (not ``on``)."""
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST if on else _LINGER_OFF)
        except OSError:
            pass  # closed already: nothing left to close either way
