"""The lab's foundation: the emulator's shaping rule, its hot loop, and real paths in netns.

The shaping rule and the hot loop run everywhere (no privilege: the loop is fed
through socket pairs). The path tests need root, ``/dev/net/tun`` and ``ip``, and are
marked ``@lab`` (see conftest.py): they run wherever the host allows, CI included.
"""

from __future__ import annotations

import itertools
import os
import socket
import statistics
import subprocess
import threading
import time

import pytest

from tests.lab.conftest import lab
from tests.lab.forwardloop import forward_loop
from tierwise.errors import LabError, ModelError
from tierwise.lab import (
    Ceiling,
    Direction,
    EmulatedPath,
    GilbertElliottLoss,
    PathConfig,
    Shaper,
    cleanup_stale,
    schedule,
)
from tierwise.lab.bench import netns
from tierwise.lab.bench.service import set_buffers

MBIT = 1e6 / 8  # bytes/s per Mbit/s
HANG_S = 5.0  # a packet this late is stuck, not slow (a loaded CI host adds ms, not s)


# --- the shaping rule (pure) ---------------------------------------------------------


def test_delay_only_adds_the_one_way_delay() -> None:
    """Without a rate, each packet is released exactly delay after it arrives."""
    assert schedule([0.0, 0.001, 0.5], [100, 1500, 40], Direction(delay_s=0.05)) == [
        pytest.approx(0.05),
        pytest.approx(0.051),
        pytest.approx(0.55),
    ]


def test_rate_serialises_back_to_back_packets() -> None:
    """departure = max(now, last departure) + size/rate, then the delay."""
    d = Direction(delay_s=0.01, rate_bytes_per_s=1e6)
    got = schedule([0.0, 0.0, 0.0, 1.0], [1250, 1250, 1250, 500], d)
    assert got == pytest.approx([0.01125, 0.0125, 0.01375, 1.0105])


def test_drop_tail_counts_the_bytes_ahead() -> None:
    """A packet is dropped when the backlog plus itself exceeds queue_bytes."""
    d = Direction(rate_bytes_per_s=1250.0, queue_bytes=2500)
    got = schedule([0.0, 0.0, 0.0, 1.0], [1000, 1000, 1000, 1000], d)
    assert got[0] == pytest.approx(0.8)
    assert got[1] == pytest.approx(1.6)
    assert got[2] is None  # backlog 2000 B + 1000 B > 2500 B
    assert got[3] == pytest.approx(2.4)  # backlog (1.6 − 1.0)·1250 = 750 B fits


def test_jitter_is_bounded_seeded_and_keeps_order() -> None:
    """Uniform jitter stays within ±jitter of the delay, never reorders, and is reproducible."""
    d = Direction(delay_s=0.05, jitter_s=0.01)
    arrivals = [i * 0.001 for i in range(2000)]
    got = schedule(arrivals, [100] * 2000, d, seed=7)
    assert got == schedule(arrivals, [100] * 2000, d, seed=7)
    assert got != schedule(arrivals, [100] * 2000, d, seed=8)
    assert all(b >= a for a, b in itertools.pairwise(got))
    assert all(0.04 - 1e-12 <= r - t <= 0.06 + 0.001 for t, r in zip(arrivals, got, strict=True))


def test_bernoulli_loss_rate_within_bounds() -> None:
    """10 % Bernoulli loss over 20,000 packets lands within 4 standard deviations."""
    got = schedule([0.0] * 20_000, [100] * 20_000, Direction(loss=0.1), seed=3)
    lost = sum(r is None for r in got)
    assert abs(lost - 2000) < 4 * (20_000 * 0.1 * 0.9) ** 0.5


def test_gilbert_elliott_is_bursty_with_the_stationary_mean() -> None:
    """Mean loss matches (p_bg·loss_good + p_gb·loss_bad)/(p_gb + p_bg); bursts last ≈ 1/p_bg."""
    ge = GilbertElliottLoss(p_gb=0.01, p_bg=0.25)
    shaper = Shaper(Direction(bursty=ge), seed=1)
    lost = [shaper.admit(0.0, 100) is None for _ in range(200_000)]
    assert sum(lost) / len(lost) == pytest.approx(ge.mean_loss, rel=0.1)
    bursts = sum(1 for a, b in zip([False, *lost], lost, strict=False) if b and not a)
    assert sum(lost) / bursts == pytest.approx(1 / ge.p_bg, rel=0.1)
    assert shaper.stats.lost == sum(lost)


def test_direction_rejects_bad_values() -> None:
    """Negative delays, zero rates and impossible loss probabilities fail when built."""
    for kwargs in ({"delay_s": -1.0}, {"rate_bytes_per_s": 0.0}, {"loss": 1.5}):
        with pytest.raises(ModelError):
            Direction(**kwargs)


def test_rate_above_safe_fraction_of_ceiling_is_refused() -> None:
    """A configured rate above half the emulator's ceiling raises LabError naming it."""
    ceiling = Ceiling(packets_per_s=10_000.0, goodput_bytes_per_s=100 * MBIT)
    path = EmulatedPath(PathConfig.symmetric(rate_bytes_per_s=60 * MBIT), ceiling=ceiling)
    with pytest.raises(LabError, match=r"60\.0 Mbit/s.*ceiling \(10,000 packets/s, 100 Mbit/s\)"):
        path.up()


def _host(monkeypatch, *, root: bool = True, tun: bool = True, ip: bool = True) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0 if root else 1000)
    monkeypatch.setattr(netns, "TUN_PATH", netns.Path(__file__ if tun else "/nonexistent/tun"))
    monkeypatch.setattr(netns.shutil, "which", lambda _: "/usr/sbin/ip" if ip else None)


@pytest.mark.parametrize(
    ("missing", "fix"),
    [("root", "needs root"), ("tun", "modprobe tun"), ("ip", "apt-get install -y iproute2")],
)
def test_missing_privilege_or_feature_is_a_lab_error(monkeypatch, missing, fix) -> None:
    """Without root, /dev/net/tun or `ip`, bringing a path up raises LabError with the fix."""
    _host(monkeypatch, **{missing: False})
    with pytest.raises(LabError, match=fix):
        EmulatedPath(PathConfig()).up()


# --- the hot loop, fed through socket pairs (no privilege) ---------------------------


def test_forward_loop_delays_in_order_and_stops_on_eof() -> None:
    """The loop releases each packet after its delay, in order, both ways, and exits on EOF.

    Never early is what the loop guarantees; how late depends on the machine (it shares
    this process's GIL and a loaded CI host), so lateness is bounded only as a hang
    detector. The root tests time the real emulator process.
    """
    up, down = Shaper(Direction(delay_s=0.03)), Shaper(Direction(delay_s=0.01), stream=1)
    with forward_loop(up, down, HANG_S) as loop:
        sent = time.monotonic()
        for i in range(5):
            loop.a.send(b"up%d" % i)
        loop.b.send(b"down")
        assert loop.a.recv(100) == b"down"
        down_s = time.monotonic() - sent
        assert [loop.b.recv(100) for _ in range(5)] == [b"up%d" % i for i in range(5)]
        up_s = time.monotonic() - sent
        assert 0.01 <= down_s < HANG_S and 0.03 <= up_s < HANG_S, (down_s, up_s)
    assert (up.stats.packets, down.stats.packets) == (5, 1)


# --- real paths between namespaces (root) ---------------------------------------------


def _tun_devices() -> str:
    return netns.ip("-o", "link", "show", "type", "tun").stdout


def _assert_gone(path: EmulatedPath, emulator_pid: int) -> None:
    names = netns.list_namespaces()
    assert path.client_ns not in names and path.server_ns not in names
    devices = _tun_devices()
    assert path.client_dev not in devices and path.server_dev not in devices
    with pytest.raises(ProcessLookupError):
        os.kill(emulator_pid, 0)


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an orphan's reaper may be slow)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class _Echo:
    """A UDP echo server on a thread, its socket in the server namespace."""

    def __init__(self, path: EmulatedPath, port: int = 9000) -> None:
        self.sock = path.socket("server", socket.SOCK_DGRAM)
        self.sock.bind((path.server_addr, port))
        self.sock.settimeout(0.2)
        self.received = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(2048)
            except TimeoutError:
                continue
            self.received += 1
            if data.startswith(b"ping"):
                self.sock.sendto(data, addr)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@lab
def test_rtt_is_never_below_100ms_and_one_delay_each_way() -> None:
    """A UDP ping over a 50 ms-each-way path never returns in under 100 ms, and its median
    is nearer 100 ms than 150 ms (a delay applied twice on one side would be 150 or 200).

    The emulator's precision (±2 ms on an idle host) is a measurement of the host, not a
    guarantee: a loaded CI machine delays the pure-Python emulator and the echo thread.
    """
    with EmulatedPath(PathConfig.symmetric(rtt_s=0.1)) as path:
        emulator_pid = path._emulator.pid
        echo = _Echo(path)
        client = path.socket("client", socket.SOCK_DGRAM)
        client.settimeout(1.0)
        rtts = []
        try:
            for i in range(20):
                start = time.monotonic()
                client.sendto(b"ping%d" % i, (path.server_addr, 9000))
                assert client.recv(100) == b"ping%d" % i
                rtts.append(time.monotonic() - start)
        finally:
            client.close()
            echo.close()
    print(f"RTT median {statistics.median(rtts) * 1e3:.3f} ms, max {max(rtts) * 1e3:.3f} ms")
    assert min(rtts) >= 0.1  # the path's delay is a floor no load can lower
    assert statistics.median(rtts) < 0.125, rtts
    _assert_gone(path, emulator_pid)


@lab
def test_loss_rate_within_statistical_bounds() -> None:
    """10 % loss client → server drops 200 ± 4σ of 2,000 datagrams, as the emulator counted.

    The receiver is a plain socket with a buffer big enough for every datagram, drained
    after the last one is sent: no reader thread that could fall behind and overflow it.
    """
    n, p = 2000, 0.1
    with EmulatedPath(PathConfig(up=Direction(loss=p), seed=11)) as path:
        sink = path.socket("server", socket.SOCK_DGRAM)
        set_buffers(sink, 16 << 20)
        sink.bind((path.server_addr, 9000))
        sink.setblocking(False)
        client = path.socket("client", socket.SOCK_DGRAM)
        received = 0
        with sink, client:
            for i in range(n):
                client.sendto(b"data%d" % i, (path.server_addr, 9000))
                if i % 50 == 49:
                    time.sleep(0.002)  # stay far below the emulator's ceiling
            time.sleep(0.2)
            while True:
                try:
                    sink.recv(2048)
                except BlockingIOError:
                    break
                received += 1
    lost = n - received
    assert abs(lost - n * p) < 4 * (n * p * (1 - p)) ** 0.5
    assert path.stats is not None and path.stats["up"].lost == lost


@lab
def test_rate_limit_moves_5mb_in_no_less_than_4s() -> None:
    """A 10 Mbit/s path carries 5 MB of TCP in no less than 4 s (its capacity, headers
    aside) and in well under 6 s (half the rate would take 8).

    ≈ 4 s ± 10 % on an idle host; a loaded CI host slows the pure-Python emulator,
    never speeds it, so only the capacity side is tight.
    """
    size = 5_000_000
    with EmulatedPath(PathConfig.symmetric(rtt_s=0.002, rate_bytes_per_s=10 * MBIT)) as path:
        server = path.socket("server")
        client = path.socket("client")
        received = 0
        with server, client:
            server.bind((path.server_addr, 0))
            server.listen(1)
            client.connect(server.getsockname())
            conn, _ = server.accept()
            start = time.monotonic()
            sender = threading.Thread(target=client.sendall, args=(bytes(size),), daemon=True)
            sender.start()
            conn.settimeout(10)
            with conn:
                while received < size and (chunk := conn.recv(1 << 20)):
                    received += len(chunk)
            elapsed = time.monotonic() - start
            sender.join(2)
    assert received == size
    print(f"5 MB at 10 Mbit/s: {elapsed:.3f} s")
    assert size / (10 * MBIT) <= elapsed < 1.5 * size / (10 * MBIT)


@lab
def test_teardown_after_an_exception_leaves_nothing() -> None:
    """An exception inside the block still removes both namespaces, devices and the emulator."""
    with pytest.raises(RuntimeError, match="boom"):
        with EmulatedPath(PathConfig()) as path:
            emulator_pid = path._emulator.pid
            names = netns.list_namespaces()
            assert path.client_ns in names and path.server_ns in names
            inside = netns.ip("-n", path.client_ns, "-o", "link", "show", "type", "tun").stdout
            assert path.client_dev in inside
            raise RuntimeError("boom")
    _assert_gone(path, emulator_pid)


@lab
def test_cleanup_stale_removes_namespaces_of_dead_owners_only() -> None:
    """A tw-<pid>-* namespace whose owner is dead is swept; a live owner's is kept."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = netns.namespace_name("orphan", dead.pid)
    live = netns.namespace_name("live")  # this process: alive
    netns.create(orphan)
    netns.create(live)
    try:
        assert orphan in cleanup_stale()
        names = netns.list_namespaces()
        assert orphan not in names and live in names
    finally:
        netns.delete(orphan)
        netns.delete(live)
