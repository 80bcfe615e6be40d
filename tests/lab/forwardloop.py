"""The emulator's forward loop on a thread between socket pairs (no root, no namespaces),
for the tests of its timing rules."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tierwise.lab.bench.emulator import Shaper, forward


@dataclass
class Loop:
    """The test's ends: it sends on ``a`` and reads what the loop released on ``b``."""

    a: socket.socket
    b: socket.socket
    cpu_s: list[float] = field(default_factory=list)  # the loop thread's CPU at start, end

    @property
    def busy_s(self) -> float:
        return self.cpu_s[1] - self.cpu_s[0]


@contextmanager
def forward_loop(
    up: Shaper, down: Shaper, hang_s: float, far: int = socket.SOCK_SEQPACKET
) -> Iterator[Loop]:
    """Run :func:`forward` with ``up`` (a → b) and ``down`` (b → a) until the block ends,
    then stop it (EOF on its stop pipe) and check it ended within ``hang_s``. ``far`` is
    the b side's socket type: a byte stream holds far more than a datagram queue (~10)."""
    a_out, a_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    b_out, b_in = socket.socketpair(socket.AF_UNIX, far)
    if far == socket.SOCK_STREAM:
        b_in.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
        b_out.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    stop_r, stop_w = os.pipe()
    for s in (a_in, b_in):
        s.setblocking(False)
    for s in (a_out, b_out):
        s.settimeout(hang_s)
    ends = Loop(a_out, b_out)

    def run() -> None:
        ends.cpu_s.append(time.thread_time())
        forward(a_in.fileno(), b_in.fileno(), up, down, stop_r)
        ends.cpu_s.append(time.thread_time())

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield ends
    finally:
        os.close(stop_w)
        thread.join(hang_s)
        os.close(stop_r)
        for s in (a_out, a_in, b_out, b_in):
            s.close()
    assert not thread.is_alive()
