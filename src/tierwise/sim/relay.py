"""The relay's own connection objects over a simulated path, packet by packet (§12.3.5).

:class:`Net` joins a client and a gateway :class:`~tierwise.proto.relay.RelayConnection`
— the objects ``tierwise relay`` deploys, exchanging real sealed datagrams — through
one :class:`OneWayPath` per direction: propagation delay, a bottleneck rate with a
tail-drop queue, an optional token-bucket policer ahead of it, and optional loss
(Bernoulli or Gilbert–Elliott), reordering, duplication and blackouts. Time is
synthetic: the loop jumps to the next arrival or timer, so a 200 ms path costs no
wall time. The tests and
``benchmarks/relay_sim.py`` use it; it is small on purpose and shares nothing
with the TCP simulator's engine.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tierwise.proto.relay import (
    RelayConfig,
    RelayConnection,
    StreamDataReceived,
    StreamReset,
)
from tierwise.sim.link import GilbertElliott, Policer

__all__ = [
    "BatchedDownload",
    "Net",
    "OneWayPath",
    "all_done",
    "batched_download",
    "payload",
    "request_response",
]

KEY = bytes(range(32))  # a fixed test key: simulations are not secrets
CLIENT, GATEWAY = ("10.0.0.1", 4000), ("10.0.0.2", 7443)


@dataclass
class OneWayPath:
    """One direction: delay, rate, queue and impairments."""

    delay_s: float = 0.1
    rate_bytes_per_s: float = 333e6 / 8
    queue_s: float = 0.2
    loss: float = 0.0
    burst: tuple[float, float, float] | None = (
        None  # Gilbert–Elliott p(good→bad), p(bad→good), loss in bad
    )
    reorder: float = 0.0  # probability a datagram takes an extra 0–20 ms
    duplicate: float = 0.0
    blackouts: list[tuple[float, float]] = field(default_factory=list)
    # the link's MTU in bytes on the wire (IP and UDP headers included): a larger datagram
    # is dropped, as a router with Don't Fragment set drops it; None: no limit
    mtu_bytes: int | None = None
    # a token bucket ahead of the queue (sim/link.py's Policer): drops above this rate
    # without queueing; None: no policer
    police_rate_bytes_per_s: float | None = None
    police_burst_bytes: float = 64 * 1500
    policed: int = 0  # of the dropped: by the policer
    free_at: float = 0.0
    bad: bool = False
    sent: int = 0
    dropped: int = 0
    oversize: int = 0  # of the dropped: larger than mtu_bytes
    _bursts: GilbertElliott | None = field(default=None, init=False, repr=False)
    _policer: Policer | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.police_rate_bytes_per_s is not None:
            self._policer = Policer(self.police_rate_bytes_per_s, self.police_burst_bytes)

    def arrivals(self, size: int, now: float, rng: np.random.Generator) -> list[float]:
        """When this datagram (and any duplicate) arrives; empty if dropped."""
        self.sent += 1
        if self.mtu_bytes is not None and size > self.mtu_bytes:
            self.dropped += 1
            self.oversize += 1
            return []
        if self._policer is not None and not self._policer.admit(now, size):
            self.dropped += 1
            self.policed += 1
            return []
        start = max(now, self.free_at)
        if start - now > self.queue_s:
            self.dropped += 1
            return []
        self.free_at = start + size / self.rate_bytes_per_s
        if self._lost(rng) or any(a <= now < b for a, b in self.blackouts):
            self.dropped += 1
            return []
        at = self.free_at + self.delay_s
        if self.reorder and rng.random() < self.reorder:
            at += rng.random() * 0.02
        times = [at]
        if self.duplicate and rng.random() < self.duplicate:
            times.append(at + rng.random() * 0.01)
        return times

    def _lost(self, rng: np.random.Generator) -> bool:
        if self.burst is not None:
            if self._bursts is None or self._bursts.rng is not rng:  # on this run's stream
                to_bad, to_good, bad_loss = self.burst
                self._bursts = GilbertElliott(to_bad, to_good, 0.0, bad_loss, rng)
                self._bursts.bad = self.bad  # a path may start in the bad state
            lost = self._bursts.lost()
            self.bad = self._bursts.bad
            return lost
        return bool(self.loss) and rng.random() < self.loss


_PAYLOAD_PERIOD = 32 * 251  # the digest repeats every 32 bytes, the counter every 251


def payload(tag: str, size: int) -> bytes:
    """Deterministic bytes of any size (a SHA-256 stream keyed by ``tag``): byte ``i`` is
    the digest's byte ``i % 32`` XOR ``i % 251``.

    One period of that pattern is built and repeated: 100 MB takes tens of milliseconds
    (the sequence computed byte by byte in int64 took 1-4 s and 1.6 GB)."""
    seed = hashlib.sha256(tag.encode()).digest()
    counter = (np.arange(_PAYLOAD_PERIOD) % 251).astype(np.uint8)
    period = (np.frombuffer(seed * (_PAYLOAD_PERIOD // 32), dtype=np.uint8) ^ counter).tobytes()
    return (period * (size // _PAYLOAD_PERIOD + 1))[:size]


class Net:
    """A client and a gateway over an uplink and a downlink path."""

    def __init__(
        self,
        up: OneWayPath | None = None,
        down: OneWayPath | None = None,
        *,
        seed: int = 1,
        client_key: bytes = KEY,
        gateway_key: bytes = KEY,
        config: RelayConfig | None = None,
        seal_cost_s: float = 0.0,
    ) -> None:
        """``seal_cost_s``: CPU seconds per datagram an end spends before the datagrams of
        one ``datagrams_to_send`` call leave together, as a process seals them all and
        then sends them in one system call; the end sends nothing more until then (0: the
        datagrams leave at the call's time, the plain simulator)."""
        self.up, self.down = up or OneWayPath(), down or OneWayPath()
        self.seal_cost_s = seal_cost_s
        self._sealing = {"up": 0.0, "down": 0.0}  # when each end's last call's datagrams left
        self.rng = np.random.default_rng(seed)
        self.client = RelayConnection(client_key, is_client=True, config=config)
        self.gateway = RelayConnection(gateway_key, is_client=False, config=config)
        self.now = 0.0
        self._heap: list[tuple[float, int, str, bytes]] = []
        self._seq = 0
        self.received: dict[str, dict[int, bytearray]] = {"client": {}, "gateway": {}}
        self.finished: dict[str, set[int]] = {"client": set(), "gateway": set()}
        self.resets: dict[str, list[StreamReset]] = {"client": [], "gateway": []}
        self.on_gateway_stream: Callable[[int, bytes], None] | None = None
        self.tap: Callable[[str, bytes], bytes | None] | None = None
        self.client.connect(GATEWAY, 0.0)

    def _flush(self) -> None:
        for name, conn, path in (("up", self.client, self.up), ("down", self.gateway, self.down)):
            if self._sealing[name] > self.now:
                continue
            out = conn.datagrams_to_send(self.now)
            leave = self.now + self.seal_cost_s * len(out)
            if self.seal_cost_s and out:
                self._sealing[name] = leave
            for datagram, _addr in out:
                if self.tap is not None:
                    datagram = self.tap(name, datagram)
                    if datagram is None:
                        continue
                for at in path.arrivals(len(datagram) + 28, leave, self.rng):
                    self._seq += 1
                    heapq.heappush(self._heap, (at, self._seq, name, datagram))

    def inject(self, name: str, datagram: bytes, at: float) -> None:
        """Deliver a crafted datagram (``name``: "up" to the gateway, "down" to the client)."""
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, name, datagram))

    def run(self, until: float, stop: Callable[[], bool] | None = None) -> None:
        """Advance synthetic time to ``until`` or until ``stop()`` holds."""
        while self.now <= until:
            self._flush()
            self._drain_events()
            if stop is not None and stop():
                return
            times = [  # an end still sealing sends nothing before it is done
                max(t, self._sealing[name])
                for name, t in (("up", self.client.get_timer()), ("down", self.gateway.get_timer()))
                if t is not None
            ]
            nxt = min([*times, self._heap[0][0] if self._heap else until + 1])
            self.now = max(self.now, nxt)
            if self.now > until:
                return
            if self._heap and self._heap[0][0] <= self.now:
                _, _, name, datagram = heapq.heappop(self._heap)
                conn, src = (self.gateway, CLIENT) if name == "up" else (self.client, GATEWAY)
                conn.receive_datagram(datagram, src, self.now)
            for conn in (self.client, self.gateway):
                timer = conn.get_timer()
                if timer is not None and timer <= self.now:
                    conn.handle_timer(self.now)

    def _drain_events(self) -> None:
        for name, conn in (("client", self.client), ("gateway", self.gateway)):
            while (event := conn.next_event()) is not None:
                if isinstance(event, StreamDataReceived):
                    buf = self.received[name].setdefault(event.stream_id, bytearray())
                    buf += event.data
                    if event.end_stream:
                        self.finished[name].add(event.stream_id)
                        if name == "gateway" and self.on_gateway_stream is not None:
                            self.on_gateway_stream(event.stream_id, bytes(buf))
                elif isinstance(event, StreamReset):
                    self.resets[name].append(event)


def request_response(
    net: Net, sizes: list[tuple[int, int]], priority: int = 0
) -> dict[int, tuple[bytes, bytes]]:
    """Open one stream per ``(up, down)`` size pair; the gateway answers each finished request."""
    expected: dict[int, tuple[bytes, bytes]] = {}
    for i, (up, down) in enumerate(sizes):
        sid = net.client.open_stream(priority)
        expected[sid] = (payload(f"up{i}", up), payload(f"down{i}", down))
        net.client.send(sid, expected[sid][0], end_stream=True)

    def answer(sid: int, data: bytes) -> None:
        net.gateway.send(sid, expected[sid][1], end_stream=True)

    net.on_gateway_stream = answer
    return expected


def all_done(net: Net, expected: dict[int, tuple[bytes, bytes]]) -> Callable[[], bool]:
    return lambda: set(expected) <= net.finished["client"]


READ_BATCH = 64  # datagrams per read (relay/batchudp.py)
WAKE_S = 100e-6  # from a datagram's arrival to the reader's wake-up


@dataclass
class BatchedDownload:
    """What :func:`batched_download` measured (seconds from the gateway's first send)."""

    seconds: float
    received: int
    complete: bool
    startup_end: tuple[float, float] | None  # (seconds, the gateway's estimate in bytes/s)
    wakes: int


def batched_download(
    net: Net,
    sid: int,
    data: bytes,
    *,
    cost_s: float | None,
    bound_s: float = 60.0,
    stall: tuple[int, float] | None = None,
) -> BatchedDownload:
    """The gateway sends ``data`` on stream ``sid`` to a client that reads as the real one.

    The real relay client wakes, reads up to :data:`READ_BATCH` datagrams the socket holds
    (each with its kernel arrival time), spends ``cost_s`` CPU per datagram on them and
    only then sends its ACKs; ``cost_s=None`` hands each datagram over at its arrival
    instead (the plain simulator's reader). ``stall = (n, seconds)``: every ``n``-th
    wake-up comes that much late (a reader the host's scheduler left waiting for a core).
    Runs on ``net``'s paths and clock until the stream ends or ``bound_s`` has passed.
    """
    client, gateway, up, down = net.client, net.gateway, net.up, net.down
    start = t = net.now
    gateway.send(sid, data, end_stream=True)
    heap: list[tuple[float, int, str, bytes]] = []
    socket: list[tuple[float, bytes]] = []  # the client's receive buffer
    seq = wakes = got = 0
    done = False
    wake: float | None = None
    busy_until = t
    ended: tuple[float, float] | None = None

    def push(at: float, kind: str, datagram: bytes = b"") -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (at, seq, kind, datagram))

    def gateway_sends(now: float) -> None:
        nonlocal ended
        for datagram, _ in gateway.datagrams_to_send(now):
            for at in down.arrivals(len(datagram) + 28, now, net.rng):
                push(at, "down", datagram)
        if ended is None and not gateway.rate.startup:
            ended = (now - start, gateway.rate.btl_bw_bytes_per_s)

    def client_sends(now: float) -> None:
        nonlocal got, done
        for datagram, _ in client.datagrams_to_send(now):
            for at in up.arrivals(len(datagram) + 28, now, net.rng):
                push(at, "up", datagram)
        while (event := client.next_event()) is not None:
            if isinstance(event, StreamDataReceived) and event.stream_id == sid:
                got += len(event.data)
                done = done or event.end_stream

    gateway_sends(t)
    while not done and t < start + bound_s:
        times = [heap[0][0]] if heap else []
        if (timer := gateway.get_timer()) is not None:
            times.append(timer)
        if (timer := client.get_timer()) is not None:
            times.append(max(timer, busy_until))
        if wake is not None:
            times.append(wake)
        t = max(t, min(times))
        if heap and heap[0][0] <= t:
            at, _, kind, datagram = heapq.heappop(heap)
            if kind == "up":
                gateway.receive_datagram(datagram, CLIENT, at)
                gateway_sends(t)
            elif kind == "acks":  # the batch is processed: its ACKs leave
                client_sends(t)
                if socket and wake is None:
                    wake = t
            elif cost_s is None:
                client.receive_datagram(datagram, GATEWAY, at)
                client_sends(t)
            else:
                socket.append((at, datagram))
                if wake is None:
                    wakes += 1
                    late = stall[1] if stall is not None and wakes % stall[0] == 0 else 0.0
                    wake = max(at + WAKE_S + late, busy_until)
        if wake is not None and wake <= t:
            batch, socket[:] = socket[:READ_BATCH], socket[READ_BATCH:]
            for at, datagram in batch:  # each with its kernel arrival time
                client.receive_datagram(datagram, GATEWAY, at)
            busy_until, wake = t + (cost_s or 0.0) * len(batch), None
            push(busy_until, "acks")
        if (timer := gateway.get_timer()) is not None and timer <= t:
            gateway.handle_timer(t)
            gateway_sends(t)
        if (timer := client.get_timer()) is not None and timer <= t and busy_until <= t:
            client.handle_timer(t)
            client_sends(t)
    net.now = t
    return BatchedDownload(t - start, got, done, ended, wakes)
