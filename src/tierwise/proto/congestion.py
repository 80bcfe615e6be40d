"""Congestion controllers: an ABC with keyword-only hooks and a registry by name.

Windows are in bytes. A controller sees every acknowledgement (``on_ack``), the
start of each loss episode (``on_congestion``, at most once per recovery) and
retransmission timeouts (``on_rto``); it exposes ``cwnd`` and, for paced
controllers, ``pacing_rate`` (bytes/s, ``None`` = send as the window allows).

Registered: ``slowstart`` (the reference's §12.3.2 model: +1 segment per
acknowledged segment, no ssthresh), ``newreno`` (RFC 5681/6582), ``cubic``
(RFC 9438). ``make_controller`` raises :class:`LocalProtocolError` for an unknown
name, listing the known ones.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import ClassVar

from tierwise.errors import LocalProtocolError

__all__ = [
    "CONTROLLERS",
    "CongestionController",
    "Cubic",
    "NewReno",
    "SlowStartOnly",
    "make_controller",
    "register",
]

CONTROLLERS: dict[str, type[CongestionController]] = {}


def register(cls: type[CongestionController]) -> type[CongestionController]:
    CONTROLLERS[cls.name] = cls
    return cls


def make_controller(name: str, *, mss: int, initial_window: int) -> CongestionController:
    """A new controller by registry name."""
    try:
        cls = CONTROLLERS[name]
    except KeyError:
        raise LocalProtocolError(
            f"unknown congestion controller {name!r}; known: {', '.join(sorted(CONTROLLERS))}"
        ) from None
    return cls(mss=mss, initial_window=initial_window)


class CongestionController(ABC):
    """Base: slow start from ``initial_window`` segments, RTO collapses to one segment."""

    name: ClassVar[str]
    pacing_rate: float | None = None

    def __init__(self, *, mss: int, initial_window: int) -> None:
        if initial_window < 1:
            raise LocalProtocolError(f"initial window must be ≥ 1 segment, got {initial_window}")
        self.mss = mss
        self.cwnd = float(initial_window * mss)
        self.ssthresh = math.inf

    @abstractmethod
    def on_ack(
        self,
        *,
        acked: int,
        rtt: float | None,
        now: float,
        in_flight: int,
        delivery_rate: float | None,
    ) -> None:
        """``acked`` newly acknowledged bytes (cumulative or SACKed)."""

    def on_congestion(self, *, now: float, in_flight: int) -> None:
        """A new loss episode: multiplicative decrease (RFC 5681 §3.1, β = 1/2)."""
        self.ssthresh = max(in_flight / 2.0, 2.0 * self.mss)
        self.cwnd = self.ssthresh

    def on_rto(self, *, now: float, in_flight: int) -> None:
        """Retransmission timeout: one segment, slow start to half the flight."""
        self.ssthresh = max(in_flight / 2.0, 2.0 * self.mss)
        self.cwnd = float(self.mss)

    def on_recovered(self, *, now: float) -> None:  # noqa: B027 - optional hook
        """The loss episode ended (everything up to the recovery point acknowledged)."""


@register
class SlowStartOnly(CongestionController):
    """§12.3.2's model: the window grows one segment per acknowledged segment, forever."""

    name = "slowstart"

    def on_ack(self, *, acked, rtt, now, in_flight, delivery_rate) -> None:
        self.cwnd += acked

    def on_congestion(self, *, now: float, in_flight: int) -> None:
        """No reaction: this model has no ssthresh and assumes no loss."""


@register
class NewReno(CongestionController):
    """RFC 5681 slow start and congestion avoidance; RFC 6582 recovery via the sender."""

    name = "newreno"

    def on_ack(self, *, acked, rtt, now, in_flight, delivery_rate) -> None:
        if self.cwnd < self.ssthresh:
            self.cwnd += acked
        else:
            self.cwnd += self.mss * acked / self.cwnd


@register
class Cubic(CongestionController):
    """RFC 9438 CUBIC: ``W(t) = C(t − K)³ + W_max`` in segments, C = 0.4, β = 0.7.

    With the Reno-friendly estimate ``W_est`` (§4.3) and fast convergence (§4.7);
    slow start is standard (no HyStart).
    """

    name = "cubic"
    C = 0.4  # RFC 9438 §5
    BETA = 0.7  # RFC 9438 §4.6

    def __init__(self, *, mss: int, initial_window: int) -> None:
        super().__init__(mss=mss, initial_window=initial_window)
        self.w_max = 0.0
        self.epoch: float | None = None
        self.k = 0.0
        self.w_est = 0.0

    def on_ack(self, *, acked, rtt, now, in_flight, delivery_rate) -> None:
        if self.cwnd < self.ssthresh:
            self.cwnd += acked
            return
        seg = self.mss
        if self.epoch is None:
            self.epoch = now
            w = self.cwnd / seg
            self.w_max = max(self.w_max, w)
            self.k = ((self.w_max - w) / self.C) ** (1 / 3) if self.w_max > w else 0.0
            self.w_est = w
        t = now - self.epoch + (rtt or 0.0)
        target = self.C * (t - self.k) ** 3 + self.w_max
        alpha = 3 * (1 - self.BETA) / (1 + self.BETA)
        self.w_est += alpha * (acked / seg) / (self.cwnd / seg)
        w = self.cwnd / seg
        if self.w_est > target:
            target = self.w_est
        if target > w:
            self.cwnd += seg * min(target - w, 0.5 * w) / w * (acked / seg)

    def on_congestion(self, *, now: float, in_flight: int) -> None:
        w = self.cwnd / self.mss
        self.w_max = w * (1 + self.BETA) / 2 if w < self.w_max else w  # fast convergence
        self.cwnd = max(self.cwnd * self.BETA, 2.0 * self.mss)
        self.ssthresh = self.cwnd
        self.epoch = None

    def on_rto(self, *, now: float, in_flight: int) -> None:
        super().on_rto(now=now, in_flight=in_flight)
        self.w_max = 0.0
        self.epoch = None
