"""The emulator's timing rules that need no namespaces: a packet's delay counts from
when the loop read it (never from an earlier clock reading), the loop sleeps rather
than polls between releases, and the process asks for fine timer slack and priority."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from tierwise.lab.emulator import SPIN_S, Direction, Shaper, forward

HANG_S = 10.0
_STAMP = struct.Struct("!d")


class _SlowFirstAdmit(Shaper):
    """Stalls on its first packet (as a preempted loop would) while the test writes a
    second one; records every packet's admit time."""

    def __init__(self, direction: Direction, written: threading.Event, go: threading.Event):
        super().__init__(direction)
        self.written, self.go, self.admitted = written, go, []

    def admit(self, now: float, size: int) -> float | None:
        self.admitted.append(now)
        if len(self.admitted) == 1:
            self.go.set()
            assert self.written.wait(HANG_S)
        return super().admit(now, size)


def test_a_packet_read_late_in_a_batch_is_delayed_from_its_own_read() -> None:
    """A packet that arrives while the loop is busy with an earlier one of the same batch
    still gets its full delay after it arrived: the old loop timed a whole batch from one
    clock reading taken before it, so such a packet left early."""
    a_out, a_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    b_out, b_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stop_r, stop_w = os.pipe()
    for s in (a_in, b_in):
        s.setblocking(False)
    b_out.settimeout(HANG_S)
    written, go = threading.Event(), threading.Event()
    delay = 0.05
    up = _SlowFirstAdmit(Direction(delay_s=delay), written, go)
    loop = threading.Thread(
        target=forward, args=(a_in.fileno(), b_in.fileno(), up, Shaper(Direction()), stop_r)
    )
    loop.start()
    try:
        a_out.send(_STAMP.pack(time.monotonic()))
        assert go.wait(HANG_S)
        time.sleep(0.02)  # the loop is inside the first packet's admit
        a_out.send(_STAMP.pack(time.monotonic()))
        written.set()
        for _ in range(2):
            sent = _STAMP.unpack(b_out.recv(100))[0]
            assert time.monotonic() - sent >= delay, "released before its delay had passed"
    finally:
        os.close(stop_w)
        loop.join(HANG_S)
        os.close(stop_r)
        for s in (a_out, a_in, b_out, b_in):
            s.close()
    assert not loop.is_alive()
    assert up.admitted[1] - up.admitted[0] >= 0.02


def test_the_loop_sleeps_between_releases_instead_of_polling() -> None:
    """Packets 0.25 ms apart on the release heap for 0.5 s, as on a busy path: the old loop
    polled for the last 0.3 ms before each release, so all the time; this one sleeps."""
    assert SPIN_S == 0.0
    a_out, a_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # the far side is a byte stream with room for all 2 MB: a reader that falls behind
    # on a loaded host cannot make the loop drop a packet (a datagram queue holds ~10)
    b_out, b_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    b_in.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
    b_out.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    stop_r, stop_w = os.pipe()
    for s in (a_in, b_in):
        s.setblocking(False)
    b_out.settimeout(HANG_S)
    # 1,000 B at 4 MB/s: each packet leaves 0.25 ms after the one before it
    up = Shaper(Direction(delay_s=0.01, rate_bytes_per_s=4e6, queue_bytes=10**7))
    cpu: list[float] = []

    def timed_forward() -> None:
        cpu.append(time.thread_time())
        forward(a_in.fileno(), b_in.fileno(), up, Shaper(Direction()), stop_r)
        cpu.append(time.thread_time())

    loop = threading.Thread(target=timed_forward)
    a_out.settimeout(HANG_S)
    wall0 = time.monotonic()
    loop.start()
    try:
        for _ in range(2000):  # queued within a few ms; the loop holds them for 0.5 s
            a_out.send(bytes(1000))
        received = 0
        while received < 2000 * 1000:
            chunk = b_out.recv(1 << 20)
            assert chunk, "the loop closed its side"
            received += len(chunk)
        wall = time.monotonic() - wall0
    finally:
        os.close(stop_w)
        loop.join(HANG_S)
        os.close(stop_r)
        for s in (a_out, a_in, b_out, b_in):
            s.close()
    assert not loop.is_alive()
    assert up.stats.write_errors == 0
    assert wall >= 0.5
    busy = cpu[1] - cpu[0]
    assert busy < 0.5 * wall, f"the loop was on the CPU {busy:.3f} s of {wall:.3f} s"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and nice are Linux's")
def test_the_emulator_process_asks_for_fine_slack_and_priority() -> None:
    """What ``main`` calls before forwarding, checked in a fresh process through /proc."""
    code = (
        "import os; from tierwise.lab.emulator import fine_timer_slack, raise_priority;"
        "print(fine_timer_slack(), raise_priority(-5), os.getpriority(os.PRIO_PROCESS, 0),"
        " open('/proc/self/timerslack_ns').read().strip())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    slack_ok, nice_ok, nice, slack_ns = out.stdout.split()
    assert slack_ok == "True" and slack_ns == "1"
    if os.geteuid() == 0:
        assert nice_ok == "True" and nice == "-5"
    else:
        assert nice_ok == "False"
