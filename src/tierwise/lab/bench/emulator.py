"""The user-space path emulator: a forwarder between two TUN descriptors.

This kernel has no ``netem``, so each direction is shaped here. A packet of
``size`` bytes arriving at ``now`` is, in order:

1. lost with the direction's loss process (Bernoulli or Gilbert–Elliott, the same
   seeded processes the simulator uses; like netem, a lost packet takes no queue room);
   then, if the direction is policed, dropped by its token bucket when it holds fewer
   tokens than the packet's size (the simulator's :class:`~tierwise.sim.link.Policer`:
   ``police_rate_bytes_per_s`` with ``police_burst_bytes``; no queueing first, as an
   ISP's or a cloud's rate limiter drops);
2. dropped at the tail if the bottleneck queue holds more than ``queue_bytes``: the
   backlog ahead of it is ``(last_departure − now)·rate``;
3. serialised: ``departure = max(now, last_departure) + size/rate``;
4. released at ``departure + delay (+ jitter)`` to the other descriptor. Jitter is
   uniform in ``[−jitter, +jitter]`` and never reorders a direction (a release is no
   earlier than the previous one), as queueing jitter on one path would not.

:class:`Shaper` is that rule alone, without I/O or a clock (tested directly);
:func:`forward` is the hot loop; :func:`main` runs it in a child process (started by
:class:`~tierwise.lab.bench.path.EmulatedPath`) that reads its configuration as one JSON
line on stdin, answers ``ready``, and stops — printing its counters as JSON — when its
parent writes ``stop``. A JSON line on stdin while it runs (``{"a_to_b": {...},
"b_to_a": {...}}``, either key) retunes that direction live (:meth:`Shaper.retune`):
the lab's world changes. When stdin closes without that word the parent has died
(``kill -9`` included: the kernel closes the pipe), so the emulator deletes the path's
namespaces itself and exits quietly; nothing of a killed run outlives it by more than
the ``ip`` calls.
"""

from __future__ import annotations

import heapq
import json
import os
import select
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from tierwise.errors import ModelError, SimulationError
from tierwise.sim.link import Bernoulli, GilbertElliott, Policer

__all__ = [
    "DEFAULT_POLICE_BURST_BYTES",
    "DEFAULT_QUEUE_BYTES",
    "Direction",
    "DirectionStats",
    "GilbertElliottLoss",
    "Shaper",
    "fine_timer_slack",
    "forward",
    "raise_priority",
    "schedule",
]

DEFAULT_QUEUE_BYTES = 1000 * 1500  # Linux's default txqueuelen (1000) of 1500-byte packets
# A policer's bucket when none is given: 64 full-size packets (96 kB), the order of the
# bursts that cloud egress and ISP policers allow (tc-police's burst is often set so).
DEFAULT_POLICE_BURST_BYTES = 64 * 1500
READ_BATCH = 64  # packets drained from one descriptor before the timer heap is served again
MAX_PACKET = 65536
MAX_PACKET_WIRE = 1500  # a policer's bucket must pass one full-size packet
# With the kernel's default 50 µs timer slack, waking from select was ~0.15 ms late on this
# VM, so the loop polled for the last 0.3 ms before each release. On a busy path the next
# release is always that close (34 µs apart at 333 Mbit/s), and polling held a whole core
# the transports under test needed. The emulator now asks for 1 ns of slack instead
# (:func:`fine_timer_slack`: median ~30 µs late, never early) and sleeps until each release.
SPIN_S = 0.0
EMULATOR_NICE = -10  # see raise_priority

_PR_SET_TIMERSLACK = 29  # prctl(2)
_LOSS_STREAM, _JITTER_STREAM = 0, 1  # named random streams per direction
STOP = "stop"  # what the parent writes on stdin to stop the emulator
ORPHANED = "orphaned"  # stdin closed without STOP: the parent is gone


@dataclass(frozen=True)
class GilbertElliottLoss:
    """Bursty loss: per-packet good→bad ``p_gb`` and bad→good ``p_bg`` moves."""

    p_gb: float
    p_bg: float
    loss_good: float = 0.0
    loss_bad: float = 1.0

    @property
    def mean_loss(self) -> float:
        return (self.p_bg * self.loss_good + self.p_gb * self.loss_bad) / (self.p_gb + self.p_bg)


@dataclass(frozen=True)
class Direction:
    """How one direction of the path treats packets (SI units; rate None = unlimited)."""

    delay_s: float = 0.0
    rate_bytes_per_s: float | None = None
    queue_bytes: int = DEFAULT_QUEUE_BYTES
    loss: float = 0.0  # Bernoulli probability; ignored when ``bursty`` is set
    bursty: GilbertElliottLoss | None = None
    jitter_s: float = 0.0
    police_rate_bytes_per_s: float | None = None  # a token-bucket policer; None: none
    police_burst_bytes: int = DEFAULT_POLICE_BURST_BYTES

    def __post_init__(self) -> None:
        if self.delay_s < 0 or self.jitter_s < 0:
            raise ModelError("delay_s and jitter_s must be ≥ 0")
        if self.police_rate_bytes_per_s is not None and not self.police_rate_bytes_per_s > 0:
            raise ModelError(
                f"police_rate_bytes_per_s must be > 0, got {self.police_rate_bytes_per_s}"
            )
        if self.police_burst_bytes < MAX_PACKET_WIRE:
            raise ModelError(
                f"police_burst_bytes must hold one packet (≥ {MAX_PACKET_WIRE} B), "
                f"got {self.police_burst_bytes}"
            )
        if self.rate_bytes_per_s is not None and self.rate_bytes_per_s <= 0:
            raise ModelError(f"rate_bytes_per_s must be > 0, got {self.rate_bytes_per_s}")
        if self.queue_bytes <= 0:
            raise ModelError(f"queue_bytes must be > 0, got {self.queue_bytes}")
        try:
            self._loss_process(np.random.default_rng(0))
        except SimulationError as exc:
            raise ModelError(str(exc)) from exc

    def _loss_process(self, rng: np.random.Generator) -> Bernoulli | GilbertElliott | None:
        if self.bursty is not None:
            b = self.bursty
            return GilbertElliott(b.p_gb, b.p_bg, b.loss_good, b.loss_bad, rng)
        return Bernoulli(self.loss, rng) if self.loss > 0 else None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Direction:
        bursty = data.get("bursty")
        return cls(**{**data, "bursty": GilbertElliottLoss(**bursty) if bursty else None})


@dataclass
class DirectionStats:
    packets: int = 0
    bytes: int = 0
    lost: int = 0  # by the loss process
    dropped: int = 0  # at the tail of the full queue
    policed: int = 0  # by the policer (its bucket short of the packet's size)
    write_errors: int = 0


@dataclass
class Shaper:
    """One direction's rule: :meth:`admit` returns a packet's release time, or None if dropped."""

    direction: Direction
    seed: int = 0
    stream: int = 0  # which direction, so the two draw independent numbers
    stats: DirectionStats = field(default_factory=DirectionStats)
    last_departure_s: float = float("-inf")
    last_release_s: float = float("-inf")

    def __post_init__(self) -> None:
        d = self.direction
        self._loss = d._loss_process(np.random.default_rng([self.seed, self.stream, _LOSS_STREAM]))
        self._jitter = np.random.default_rng([self.seed, self.stream, _JITTER_STREAM])
        self._jitters: list[float] = []
        self._policer = _policer(d)

    def admit(self, now: float, size: int) -> float | None:
        """Release time of a ``size``-byte packet arriving at ``now`` (None: lost or dropped)."""
        d, stats = self.direction, self.stats
        stats.packets += 1
        stats.bytes += size
        if self._loss is not None and self._loss.lost():
            stats.lost += 1
            return None
        if self._policer is not None and not self._policer.admit(now, size):
            stats.policed += 1
            return None
        rate = d.rate_bytes_per_s
        if rate is None:
            release = now + d.delay_s
        else:
            start = self.last_departure_s if self.last_departure_s > now else now
            if (start - now) * rate + size > d.queue_bytes:
                stats.dropped += 1
                return None
            self.last_departure_s = start + size / rate
            release = self.last_departure_s + d.delay_s
        if d.jitter_s:
            release = max(release + self._next_jitter(), self.last_release_s)
            self.last_release_s = release
        return release

    def retune(self, direction: Direction) -> None:
        """Apply ``direction`` from now on; packets already scheduled keep their times.

        The queue carries over: a packet arriving behind a backlog still waits for it,
        and the backlog drains at the rate it was admitted at.
        """
        self.direction = direction
        self._loss = direction._loss_process(
            np.random.default_rng([self.seed, self.stream, _LOSS_STREAM])
        )
        self._jitters = []
        self._policer = _policer(direction)  # a new policer starts with a full bucket

    def _next_jitter(self) -> float:
        if not self._jitters:
            span = self.direction.jitter_s
            self._jitters = self._jitter.uniform(-span, span, 4096).tolist()
        return self._jitters.pop()


def _policer(d: Direction) -> Policer | None:
    if d.police_rate_bytes_per_s is None:
        return None
    return Policer(d.police_rate_bytes_per_s, d.police_burst_bytes)


def schedule(
    arrivals_s: list[float], sizes: list[int], direction: Direction, seed: int = 0
) -> list[float | None]:
    """Release times of packets arriving at ``arrivals_s`` (nondecreasing) with ``sizes``."""
    shaper = Shaper(direction, seed)
    return [shaper.admit(t, n) for t, n in zip(arrivals_s, sizes, strict=True)]


def fine_timer_slack() -> bool:
    """Ask Linux for 1 ns of timer slack for this process (default 50 µs), so a sleeping
    ``select`` wakes close to its deadline; False where that is not available."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def raise_priority(nice: int = EMULATOR_NICE) -> bool:
    """Run this process at ``nice`` (as root): the path is the instrument, so the programs
    under test must not delay its releases; it sleeps between them, so it takes only what
    it needs. False where not permitted."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except (OSError, AttributeError):
        return False
    return True


def forward(
    fd_a: int,
    fd_b: int,
    a_to_b: Shaper,
    b_to_a: Shaper,
    stop_fd: int,
    spin_s: float = SPIN_S,
) -> str:
    """Shuttle packets between two non-blocking TUN descriptors until ``stop_fd`` says
    :data:`STOP` (returned) or hits EOF (:data:`ORPHANED` returned).

    ``select`` rather than ``epoll``: its timeout has microsecond resolution, epoll's
    only millisecond, which would add up to 1 ms per direction to every delay. A packet
    is never released before its time; the last ``spin_s`` before a release is spent
    polling (0 by default: see :data:`SPIN_S`), trading CPU for timing.
    """
    clock, read, write = time.monotonic, os.read, os.write
    push, pop = heapq.heappush, heapq.heappop
    route = {fd_a: (a_to_b.admit, fd_b, a_to_b.stats), fd_b: (b_to_a.admit, fd_a, b_to_a.stats)}
    watched = [fd_a, fd_b, stop_fd]
    heap: list[tuple[float, int, int, bytes]] = []
    seq = 0
    control = Control({"a_to_b": a_to_b, "b_to_a": b_to_a})
    while True:
        timeout = max(0.0, heap[0][0] - clock() - spin_s) if heap else None
        ready, _, _ = select.select(watched, (), (), timeout)
        for fd in ready:
            if fd == stop_fd:
                said = control.feed(read(stop_fd, 4096))
                if said is not None:
                    return said
                continue
            admit, out, stats = route[fd]
            for _ in range(READ_BATCH):
                try:
                    packet = read(fd, MAX_PACKET)
                except BlockingIOError:
                    break
                now = clock()  # when this packet was read: never before it arrived
                release = admit(now, len(packet))
                if release is None:
                    continue
                if release <= now and (not heap or heap[0][0] > release):
                    try:
                        write(out, packet)
                    except OSError:
                        stats.write_errors += 1
                else:
                    seq += 1
                    push(heap, (release, seq, out, packet))
        now = clock()
        while heap and heap[0][0] <= now:
            _, _, out, packet = pop(heap)
            try:
                write(out, packet)
            except OSError:
                route[fd_a if out == fd_b else fd_b][2].write_errors += 1


class Control:
    """The parent's lines on stdin: ``stop``, or a JSON object retuning directions."""

    def __init__(self, shapers: dict[str, Shaper]) -> None:
        self.shapers = shapers
        self.partial = b""

    def feed(self, data: bytes) -> str | None:
        """Act on the complete lines in ``data``; :data:`STOP`/:data:`ORPHANED` to end."""
        if not data:
            return STOP if self.partial.strip() == STOP.encode() else ORPHANED
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            if line.strip() == STOP.encode():
                return STOP
            if line.strip().startswith(b"{"):
                for key, change in json.loads(line).items():
                    self.shapers[key].retune(Direction.from_dict(change))
        return None


def main(argv: list[str]) -> int:
    """Child entry: ``main([FD_A, FD_B])`` with the JSON configuration on stdin.

    Orphaned (stdin closed without ``stop``), it deletes the namespaces its
    configuration names and says nothing: nobody is left to read it.
    """
    fd_a, fd_b = int(argv[0]), int(argv[1])
    line = sys.stdin.readline()
    if not line:  # the parent died before configuring us
        return 0
    config = json.loads(line)
    seed = int(config["seed"])
    a_to_b = Shaper(Direction.from_dict(config["a_to_b"]), seed, stream=0)
    b_to_a = Shaper(Direction.from_dict(config["b_to_a"]), seed, stream=1)
    for fd in (fd_a, fd_b):
        os.set_blocking(fd, False)
    fine_timer_slack()
    raise_priority()
    _say("ready")
    how = forward(fd_a, fd_b, a_to_b, b_to_a, sys.stdin.fileno())
    if how == ORPHANED:
        os.close(fd_a)  # the TUN devices go first, then their namespaces
        os.close(fd_b)
        _remove_namespaces(config.get("namespaces", []))
        return 0
    _say(json.dumps({"a_to_b": asdict(a_to_b.stats), "b_to_a": asdict(b_to_a.stats)}))
    return 0


def _remove_namespaces(names: list[str]) -> None:
    from tierwise.errors import LabError
    from tierwise.lab.bench import netns

    for name in names:
        try:
            netns.delete(name)
        except LabError:
            pass  # best effort: `tierwise lab down` sweeps what is left


def _say(line: str) -> None:
    """Write a line to the parent; if it is gone, point stdout at /dev/null and go on.

    Redirecting keeps the interpreter's final flush from printing a BrokenPipeError.
    """
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
