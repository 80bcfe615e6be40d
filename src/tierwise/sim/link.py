"""Links: one direction of a path — rate, one-way propagation, drop-tail queue, loss.

A link serves packets first come, first served at a constant rate, so a packet's
departure is ``d = max(now, d_prev) + size/rate`` and its arrival ``d + prop``:
one event per packet. The backlog a drop-tail queue sees is
``(d_prev − now)·rate`` bytes (or the packets not yet departed).

A link may also be *policed* (:class:`Policer`): a token bucket of ``burst`` bytes
filled at the policed rate, checked before the queue; a packet finding fewer tokens
than its size is dropped at once — no queueing delay ever warns the sender, as an
ISP's or a cloud's rate limiter behaves (RFC 2697's single-rate marker, dropping red).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from heapq import heappush
from typing import TYPE_CHECKING, Any

from tierwise.errors import SimulationError
from tierwise.sim.engine import Simulator

if TYPE_CHECKING:  # numpy loads with the first random stream (a lossless run needs none)
    import numpy as np

__all__ = [
    "Bernoulli",
    "GilbertElliott",
    "Link",
    "LinkStats",
    "NoLoss",
    "Policer",
    "loss_process",
]

_BLOCK = 4096


class NoLoss:
    """Every packet arrives."""

    def lost(self) -> bool:
        return False


class Bernoulli:
    """Each packet is lost independently with probability ``p`` (seeded stream)."""

    def __init__(self, p: float, rng: np.random.Generator) -> None:
        if not 0.0 <= p < 1.0:
            raise SimulationError(f"loss probability must lie in [0, 1), got {p}")
        import numpy as np  # loaded already: the stream is numpy's

        self.p, self._rng = p, rng
        self._draws = np.empty(0)
        self._i = 0

    def lost(self) -> bool:
        if self._i >= self._draws.size:
            self._draws, self._i = self._rng.random(_BLOCK), 0
        self._i += 1
        return bool(self._draws[self._i - 1] < self.p)


class GilbertElliott:
    """Bursty loss: a good and a bad state with their own loss rates (Gilbert–Elliott).

    ``p_gb``/``p_bg`` are the per-packet probabilities of moving good→bad and
    bad→good; the mean loss is ``(p_bg·loss_good + p_gb·loss_bad)/(p_gb + p_bg)``.
    """

    def __init__(
        self, p_gb: float, p_bg: float, loss_good: float, loss_bad: float, rng: np.random.Generator
    ) -> None:
        for name, v in (
            ("p_gb", p_gb),
            ("p_bg", p_bg),
            ("loss_good", loss_good),
            ("loss_bad", loss_bad),
        ):
            if not 0.0 <= v <= 1.0:
                raise SimulationError(f"{name} must lie in [0, 1], got {v}")
        if p_gb + p_bg == 0 or loss_good >= 1:
            raise SimulationError("Gilbert–Elliott needs p_gb + p_bg > 0 and loss_good < 1")
        self.p_gb, self.p_bg, self.loss_good, self.loss_bad = p_gb, p_bg, loss_good, loss_bad
        self.bad = False
        self.rng = rng

    @property
    def mean_loss(self) -> float:
        return (self.p_bg * self.loss_good + self.p_gb * self.loss_bad) / (self.p_gb + self.p_bg)

    def lost(self) -> bool:
        u_move, u_loss = self.rng.random(2)
        self.bad = bool(u_move >= self.p_bg) if self.bad else bool(u_move < self.p_gb)
        return bool(u_loss < (self.loss_bad if self.bad else self.loss_good))


def loss_process(spec: Any, rng: np.random.Generator) -> NoLoss | Bernoulli | GilbertElliott:
    """A loss process from a probability (Bernoulli) or a Gilbert–Elliott dict
    (``p_gb``, ``p_bg``, optional ``loss_good``, ``loss_bad``); 0 or None is no loss."""
    if isinstance(spec, dict):
        return GilbertElliott(
            spec["p_gb"], spec["p_bg"], spec.get("loss_good", 0.0), spec.get("loss_bad", 1.0), rng
        )
    return Bernoulli(float(spec), rng) if spec else NoLoss()


class Policer:
    """A token bucket that drops above its rate without queueing (RFC 2697, red dropped).

    ``tokens = min(burst, tokens + (now − last)·rate)``; a packet of ``size`` bytes passes
    and takes ``size`` tokens if that many are there, else it is dropped. The bucket
    starts full. Times must not go backwards.
    """

    __slots__ = ("burst_bytes", "dropped", "last_s", "rate_bytes_per_s", "tokens")

    def __init__(self, rate_bytes_per_s: float, burst_bytes: float) -> None:
        if not rate_bytes_per_s > 0 or not math.isfinite(rate_bytes_per_s):
            raise SimulationError(
                f"policer rate must be a finite value > 0 bytes/s, got {rate_bytes_per_s}"
            )
        if not burst_bytes > 0 or not math.isfinite(burst_bytes):
            raise SimulationError(
                f"policer burst must be a finite value > 0 bytes, got {burst_bytes}"
            )
        self.rate_bytes_per_s, self.burst_bytes = float(rate_bytes_per_s), float(burst_bytes)
        self.tokens = self.burst_bytes
        self.last_s = -math.inf
        self.dropped = 0

    def admit(self, now: float, size: int) -> bool:
        """Whether a ``size``-byte packet arriving at ``now`` conforms (False: dropped)."""
        if now > self.last_s:
            self.tokens = min(
                self.burst_bytes, self.tokens + (now - self.last_s) * self.rate_bytes_per_s
            )
            self.last_s = now
        if size <= self.tokens:
            self.tokens -= size
            return True
        self.dropped += 1
        return False


@dataclass
class LinkStats:
    packets: int = 0
    bytes: int = 0
    lost: int = 0
    dropped: int = 0
    policed: int = 0  # dropped by the policer


class Link:
    """One direction: ``put(packet, wire_bytes, deliver)`` calls ``deliver(packet)`` on arrival."""

    def __init__(
        self,
        sim: Simulator,
        rate_bytes_per_s: float,
        propagation_s: float,
        *,
        queue_bytes: float = math.inf,
        queue_packets: float = math.inf,
        loss: Any = None,
        policer: Policer | None = None,
        name: str = "link",
    ) -> None:
        if not rate_bytes_per_s > 0 or not math.isfinite(rate_bytes_per_s):
            raise SimulationError(
                f"{name}: rate must be a finite value > 0, got {rate_bytes_per_s}"
            )
        if propagation_s < 0:
            raise SimulationError(f"{name}: propagation must be ≥ 0, got {propagation_s}")
        self.sim, self.rate, self.prop, self.name = sim, rate_bytes_per_s, propagation_s, name
        self.queue_bytes, self.queue_packets = queue_bytes, queue_packets
        self.loss = loss or NoLoss()
        self.policer = policer
        self._lossy = not isinstance(self.loss, NoLoss)
        self._bounded = queue_bytes != math.inf or queue_packets != math.inf
        self._counted = queue_packets != math.inf  # departures kept for a packet-count queue
        # Only a packet count bounds the queue: put() checks it inline (the per-packet path).
        self._count_only = self._counted and queue_bytes == math.inf
        self.free_at = 0.0
        self._departures: deque[float] = deque()
        self.stats = LinkStats()

    def backlog_bytes(self) -> float:
        return max(0.0, self.free_at - self.sim.now) * self.rate

    def put(self, packet: Any, wire_bytes: int, deliver: Callable[[Any], None]) -> bool:
        """Queue ``packet``; False if the drop-tail queue is full (the packet is dropped)."""
        sim, stats = self.sim, self.stats
        now = sim.now
        if self.policer is not None and not self.policer.admit(now, wire_bytes):
            stats.policed += 1
            return True  # dropped on the wire: the sender learns nothing here
        if self._count_only:
            d = self._departures
            if len(d) >= self.queue_packets:  # maybe full: forget what has departed
                while d and d[0] <= now:
                    d.popleft()
                if len(d) >= self.queue_packets:
                    stats.dropped += 1
                    return False
        elif self._bounded and self._full(now, wire_bytes):
            stats.dropped += 1
            return False
        free_at = self.free_at
        if free_at < now:
            free_at = now
        free_at += wire_bytes / self.rate
        self.free_at = free_at
        if self._counted:
            self._departures.append(free_at)
        stats.packets += 1
        stats.bytes += wire_bytes
        if self._lossy and self.loss.lost():
            stats.lost += 1
        else:
            # Simulator.post, inline: one heap entry per packet, numbered as post numbers it.
            sim._seq = seq = sim._seq + 1
            heappush(sim._heap, (free_at + self.prop, 0, seq, deliver, (packet,)))
        return True

    def _full(self, now: float, wire_bytes: int) -> bool:
        if self.queue_bytes != math.inf and self.backlog_bytes() + wire_bytes > self.queue_bytes:
            return True
        if self.queue_packets != math.inf:
            d = self._departures
            while d and d[0] <= now:
                d.popleft()
            return len(d) >= self.queue_packets
        return False
