"""A path between two namespaces through the user-space emulator.

::

    tw-<pid>-<n>-cli                 this process                  tw-<pid>-<n>-srv
    tw<pid>c<n> 10.77.<n>.1/30 ─fd─► emulator child ◄─fd─ tw<pid>s<n> 10.77.<n>.2/30

Each TUN device is created from the root namespace (``TUNSETIFF`` on
``/dev/net/tun``) and then moved into its namespace with ``ip link set … netns``;
the open descriptor keeps working after the move. The descriptors go to the
emulator child, and this process closes its copies, so the devices vanish as soon
as the child exits — however this process ends. The child also knows the two
namespaces: if this process dies without telling it ``stop`` (``kill -9``), it
deletes them before it exits.

A :class:`EmulatedPath` is a context manager: leaving the block (also by an exception)
stops the emulator and deletes both namespaces. Several paths may share one client
namespace (``client_ns=``, made with :func:`tierwise.lab.bench.netns.owned`): a client and
N servers, each server behind its own emulated path and subnet ``10.77.<index>.0/30``;
such a path leaves the shared namespace alone. :meth:`EmulatedPath.retune` changes a running
path's directions (a world change mid-run).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType

from tierwise.errors import LabError
from tierwise.lab.bench import netns
from tierwise.lab.bench.emulator import STOP, Direction, DirectionStats

__all__ = ["SAFE_FRACTION", "Ceiling", "EmulatedPath", "PathConfig", "measure_ceiling", "open_tun"]

TUNSETIFF = 0x400454CA  # _IOW('T', 202, int), <linux/if_tun.h>
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
MTU_BYTES = 1500  # Ethernet's, the default of both TUN devices
MTU_RANGE_BYTES = (1280, 65_535)  # IPv6's minimum link MTU to the largest IPv4 packet
SAFE_FRACTION = 0.5  # a configured rate may use at most this share of the measured ceiling
READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
_EMULATOR_MAIN = (
    "import sys; from tierwise.lab.bench.emulator import main; sys.exit(main(sys.argv[1:]))"
)


def open_tun(name: str) -> int:
    """Create TUN device ``name`` (IP packets, no packet-info header); return its fd."""
    fd = os.open(netns.TUN_PATH, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    except OSError as exc:
        os.close(fd)
        raise LabError(
            f"cannot create TUN device {name}: {exc} (needs root and /dev/net/tun)"
        ) from exc
    return fd


@dataclass(frozen=True)
class PathConfig:
    """Both directions of a path: ``up`` is client→server, ``down`` server→client."""

    up: Direction = field(default_factory=Direction)
    down: Direction = field(default_factory=Direction)
    seed: int = 0
    mtu_bytes: int = MTU_BYTES  # of both TUN devices (9000: a jumbo-frame path)

    def __post_init__(self) -> None:
        low, high = MTU_RANGE_BYTES
        if not low <= self.mtu_bytes <= high:
            raise LabError(f"the path MTU must lie in [{low}, {high}] bytes, got {self.mtu_bytes}")

    @classmethod
    def symmetric(
        cls,
        *,
        rtt_s: float = 0.0,
        rate_bytes_per_s: float | None = None,
        loss: float = 0.0,
        seed: int = 0,
        **kwargs: object,
    ) -> PathConfig:
        """Half the RTT each way, the same rate and loss in both directions."""
        d = Direction(delay_s=rtt_s / 2, rate_bytes_per_s=rate_bytes_per_s, loss=loss, **kwargs)
        return cls(up=d, down=d, seed=seed)


@dataclass(frozen=True)
class Ceiling:
    """What the emulator forwarded flat out, with no delay, rate limit or loss."""

    packets_per_s: float  # both directions, data and ACKs
    goodput_bytes_per_s: float  # TCP payload delivered client → server

    def __str__(self) -> str:
        return f"{self.packets_per_s:,.0f} packets/s, {self.goodput_bytes_per_s * 8e-6:,.0f} Mbit/s"


class EmulatedPath:
    """Two namespaces joined through the emulator; ``with EmulatedPath(cfg) as p:`` brings it up."""

    def __init__(
        self,
        config: PathConfig,
        *,
        index: int = 0,
        ceiling: Ceiling | None = None,
        client_ns: str | None = None,
    ):
        self.config = config
        self.index = index
        self._ceiling = ceiling
        pid = os.getpid()
        self._shared_client = client_ns is not None
        self.client_ns = client_ns or netns.namespace_name(f"{index}-cli", pid)
        self.server_ns = netns.namespace_name(f"{index}-srv", pid)
        self.client_dev = f"{netns.PREFIX}{pid}c{index}"
        self.server_dev = f"{netns.PREFIX}{pid}s{index}"
        self.client_addr = f"10.77.{index}.1"
        self.server_addr = f"10.77.{index}.2"
        self.stats: dict[str, DirectionStats] | None = None
        self._emulator: subprocess.Popen[bytes] | None = None
        self._namespaces: list[str] = []

    def __enter__(self) -> EmulatedPath:
        self.up()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()

    def up(self) -> None:
        """Check the host, sweep orphans, create namespaces and devices, start the emulator."""
        self._check_rates()  # first: with a given ceiling it needs no privilege
        netns.require_lab()
        netns.cleanup_stale()
        try:
            fds = self._make_devices()
            self._start_emulator(fds)
        except BaseException:
            self.down()
            raise

    def down(self) -> None:
        """Stop the emulator (its counters land in :attr:`stats`) and delete the namespaces.

        A second Ctrl-C or SIGTERM arriving meanwhile waits until the teardown is done.
        """
        with _signals_deferred():
            self._down()

    def _down(self) -> None:
        errors = []
        if self._emulator is not None:
            try:
                self.stats = self._stop_emulator()
            except Exception as exc:
                errors.append(exc)
            self._emulator = None
        for name in reversed(self._namespaces):
            try:
                netns.delete(name)
            except Exception as exc:
                errors.append(exc)
        self._namespaces.clear()
        if errors:
            raise LabError(f"tearing down the path failed: {errors}") from errors[0]

    def retune(self, up: Direction | None = None, down: Direction | None = None) -> None:
        """Change the running path: ``up`` (client→server) and/or ``down`` from now on."""
        proc = self._emulator
        if proc is None or proc.stdin is None:
            raise LabError("the path is not up")
        self._check_rates(up, down)
        change = {
            key: d.to_dict() for key, d in (("a_to_b", up), ("b_to_a", down)) if d is not None
        }
        try:
            proc.stdin.write(json.dumps(change).encode() + b"\n")
            proc.stdin.flush()
        except OSError as exc:
            raise LabError(f"the emulator of path {self.index} is gone: {exc}") from exc
        self.config = PathConfig(
            up=up or self.config.up,
            down=down or self.config.down,
            seed=self.config.seed,
            mtu_bytes=self.config.mtu_bytes,
        )

    def socket(self, side: str, kind: int = socket.SOCK_STREAM) -> socket.socket:
        """An IPv4 socket in the ``"client"`` or ``"server"`` namespace."""
        name = {"client": self.client_ns, "server": self.server_ns}[side]
        with netns.entered(name):
            return socket.socket(socket.AF_INET, kind)

    def _check_rates(self, *directions: Direction | None) -> None:
        given = [d for d in directions if d is not None] or [self.config.up, self.config.down]
        rates = [d.rate_bytes_per_s for d in given]
        limit = max((r for r in rates if r is not None), default=None)
        if limit is None:
            return
        ceiling = self._ceiling or measure_ceiling(mtu_bytes=self.config.mtu_bytes)
        if limit > SAFE_FRACTION * ceiling.goodput_bytes_per_s:
            raise LabError(
                f"configured rate {limit * 8e-6:,.1f} Mbit/s exceeds {SAFE_FRACTION:.0%} of the "
                f"emulator's measured ceiling ({ceiling}); lower the rate"
            )

    def _make_devices(self) -> list[int]:
        fds = []
        try:
            for ns, dev, addr in (
                (self.client_ns, self.client_dev, self.client_addr),
                (self.server_ns, self.server_dev, self.server_addr),
            ):
                if not (self._shared_client and ns == self.client_ns):
                    self._namespaces.append(ns)  # first: an interrupt mid-create deletes it
                    netns.create(ns)
                fds.append(open_tun(dev))
                netns.ip("link", "set", "dev", dev, "netns", ns)
                netns.ip("-n", ns, "link", "set", "dev", dev, "mtu", str(self.config.mtu_bytes))
                # no IPv6 link-local address, so no router solicitations cross the path
                netns.ip("-n", ns, "link", "set", "dev", dev, "addrgenmode", "none")
                netns.ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
                netns.ip("-n", ns, "link", "set", "dev", dev, "up")
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def _start_emulator(self, fds: list[int]) -> None:
        config = {
            "seed": self.config.seed,
            "a_to_b": self.config.up.to_dict(),
            "b_to_a": self.config.down.to_dict(),
            "namespaces": list(self._namespaces),  # it deletes them if we die first
        }
        try:
            self._emulator = subprocess.Popen(
                [sys.executable, "-c", _EMULATOR_MAIN, *map(str, fds)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=fds,
                start_new_session=True,  # Ctrl-C reaches us, and we stop the child in order
            )
        finally:
            for fd in fds:  # the child holds the devices now
                os.close(fd)
        assert self._emulator.stdin is not None and self._emulator.stdout is not None
        self._emulator.stdin.write(json.dumps(config).encode() + b"\n")
        self._emulator.stdin.flush()
        line = _readline_within(self._emulator, READY_TIMEOUT_S)
        if line.strip() != b"ready":
            raise LabError(f"the emulator did not start (said {line!r}); see its stderr")

    def _stop_emulator(self) -> dict[str, DirectionStats]:
        proc = self._emulator
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        with contextlib.suppress(OSError):  # it may have died already
            proc.stdin.write(STOP.encode() + b"\n")
            proc.stdin.flush()
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise LabError("the emulator did not stop within 5 s and was killed") from None
        counters = json.loads(proc.stdout.read() or b"{}")
        proc.stdout.close()
        return {
            "up": DirectionStats(**counters.get("a_to_b", {})),
            "down": DirectionStats(**counters.get("b_to_a", {})),
        }


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Note SIGINT and SIGTERM during the block and deliver them once it ends.

    Handlers, not the signal mask: Python runs its handlers on the main thread whichever
    thread the kernel picked, so masking the main thread alone would not hold them.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if caught:
            signal.raise_signal(caught[0])  # now the usual handler acts on it


def _readline_within(proc: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    result: list[bytes] = []
    reader = threading.Thread(target=lambda: result.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return result[0] if result else b""


def _bulk(path: EmulatedPath, duration_s: float) -> int:
    """Bytes a TCP bulk sender moves client → server in ``duration_s``.

    Interrupted (Ctrl-C, SIGTERM), the receiving socket is shut down so its reader
    thread wakes and ends instead of waiting for a FIN the stopped path never brings.
    """
    server = path.socket("server")
    client = path.socket("client")
    received = 0
    with server, client:
        server.bind((path.server_addr, 0))
        server.listen(1)
        client.connect(server.getsockname())
        conn, _ = server.accept()
        stop = time.monotonic() + duration_s

        def sink() -> None:
            nonlocal received
            buf = bytearray(1 << 20)
            with contextlib.suppress(OSError):
                while n := conn.recv_into(buf):
                    received += n

        reader = threading.Thread(target=sink, daemon=True)
        reader.start()
        with conn:
            try:
                chunk = bytes(1 << 20)
                while time.monotonic() < stop:
                    client.sendall(chunk)
                client.shutdown(socket.SHUT_WR)
                reader.join(duration_s + 10)
            finally:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)  # wakes the reader if it still waits
                reader.join(5)
    return received


@functools.cache
def measure_ceiling(duration_s: float = 1.0, mtu_bytes: int = MTU_BYTES) -> Ceiling:
    """Flat-out TCP through a path with nothing emulated (cached per process), at the MTU
    given: the emulator's cost is per packet, so a jumbo path's ceiling in bytes is higher."""
    with EmulatedPath(PathConfig(mtu_bytes=mtu_bytes), index=99) as path:
        start = time.monotonic()
        delivered = _bulk(path, duration_s)
        elapsed = time.monotonic() - start
    assert path.stats is not None
    packets = path.stats["up"].packets + path.stats["down"].packets
    return Ceiling(packets_per_s=packets / elapsed, goodput_bytes_per_s=delivered / elapsed)
