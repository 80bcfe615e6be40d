"""A shared wireless medium: data and ACKs of both directions take turns on the air (§12.4.1).

Every frame — a data segment one way, an end-to-end ACK the other — costs one
802.11 frame exchange, and the medium carries one exchange at a time::

    exchange = access wait (DIFS [+ backoff]) + PPDU(IP + 36 B) at the data rate
               + SIFS + PPDU(14 B MAC ACK) at the ACK rate

(:func:`tierwise.model.wireless.exchange_s`: 302 µs for a 1,228-byte packet and
134 µs for a 92-byte ACK at 54/6 Mbit/s). Exchanges are served first come, first
served across all ports, which is the reference model of note 21 (no random
backoff, no collisions, no retries, no aggregation); a seeded uniform backoff
of ``0..cw_slots`` slots can be switched on. The receiving MAC passes a frame up
when its data PPDU ends; the medium stays busy through SIFS and the MAC ACK.

A :class:`MediumPort` has the ``put(packet, wire_bytes, deliver)`` interface of
:class:`tierwise.sim.link.Link`, so a :class:`~tierwise.sim.transport.TransferEnd`
can use one port for its data and another for its ACKs. A port may add wired
propagation before the air (a server's ACK reaching the access point) or after
it (the uplink from the access point to the server).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tierwise.errors import SimulationError
from tierwise.model import wireless as air
from tierwise.proto.tcp import Receiver, Sender
from tierwise.sim.engine import Simulator
from tierwise.sim.link import LinkStats
from tierwise.sim.transport import TransferEnd
from tierwise.sim.workloads import TcpSpec

__all__ = [
    "MediumPort",
    "WirelessMedium",
    "WirelessResult",
    "run_wireless_transfer",
]

DATA_RATE_BIT_PER_S = 54e6  # 802.11a/g OFDM top rate, the reference exchange of note 21
ACK_RATE_BIT_PER_S = 6e6  # basic rate for control frames in note 21
_BLOCK = 4096


class WirelessMedium:
    """One channel shared by every port; ``busy_s`` is the air time used so far."""

    def __init__(
        self,
        sim: Simulator,
        data_rate_bit_per_s: float = DATA_RATE_BIT_PER_S,
        ack_rate_bit_per_s: float = ACK_RATE_BIT_PER_S,
        *,
        access_s: float = air.DIFS_S,
        cw_slots: int = 0,
        mac_overhead_bytes: int = air.DATA_MPDU_OVERHEAD_BYTES,
        name: str = "air",
    ) -> None:
        for what, rate in (("data rate", data_rate_bit_per_s), ("ACK rate", ack_rate_bit_per_s)):
            if not rate > 0 or not math.isfinite(rate):
                raise SimulationError(f"{name}: {what} must be a finite value > 0, got {rate}")
        if access_s < 0 or mac_overhead_bytes < 0:
            raise SimulationError(f"{name}: access wait and MAC overhead must be ≥ 0")
        if isinstance(cw_slots, bool) or not isinstance(cw_slots, int) or cw_slots < 0:
            raise SimulationError(f"{name}: cw_slots must be an integer ≥ 0, got {cw_slots!r}")
        self.sim, self.name = sim, name
        self.data_rate, self.ack_rate = data_rate_bit_per_s, ack_rate_bit_per_s
        self.access_s, self.cw_slots, self.mac_overhead = access_s, cw_slots, mac_overhead_bytes
        self.tail_s = air.SIFS_S + float(air.ppdu_s(air.MAC_ACK_BYTES, ack_rate_bit_per_s))
        self.free_at = 0.0
        self.busy_s = 0.0
        self.exchanges = 0
        self._ppdu: dict[int, float] = {}
        self._rng = sim.rng(f"{name}-backoff") if cw_slots else None
        self._slots = np.empty(0, dtype=np.int64)
        self._i = 0

    def port(self, name: str, *, wired_before_s: float = 0.0, wired_after_s: float = 0.0):
        """A sending side of the medium (one per direction), with optional wired legs."""
        return MediumPort(self, name, wired_before_s, wired_after_s)

    def data_ppdu_s(self, ip_bytes: int) -> float:
        """Air time of the data PPDU carrying an ``ip_bytes`` packet (cached per size)."""
        t = self._ppdu.get(ip_bytes)
        if t is None:
            t = float(air.ppdu_s(ip_bytes + self.mac_overhead, self.data_rate))
            self._ppdu[ip_bytes] = t
        return t

    def exchange_s(self, ip_bytes: int) -> float:
        """One exchange without backoff (equals :func:`tierwise.model.wireless.exchange_s`)."""
        return self.access_s + self.data_ppdu_s(ip_bytes) + self.tail_s

    def transmit(self, ip_bytes: int) -> float:
        """Book the next exchange for an ``ip_bytes`` packet; return when its data PPDU ends."""
        start = max(self.sim.now, self.free_at)
        data_end = start + self.access_s + self._backoff_s() + self.data_ppdu_s(ip_bytes)
        self.free_at = data_end + self.tail_s
        self.busy_s += self.free_at - start
        self.exchanges += 1
        return data_end

    def _backoff_s(self) -> float:
        if self._rng is None:
            return 0.0
        if self._i >= self._slots.size:
            self._slots, self._i = self._rng.integers(0, self.cw_slots + 1, _BLOCK), 0
        self._i += 1
        return float(self._slots[self._i - 1]) * air.SLOT_S


class MediumPort:
    """One direction onto the medium, with the ``put`` interface of a Link."""

    def __init__(
        self, medium: WirelessMedium, name: str, wired_before_s: float, wired_after_s: float
    ) -> None:
        if wired_before_s < 0 or wired_after_s < 0:
            raise SimulationError(f"{name}: wired propagation must be ≥ 0")
        self.medium, self.name = medium, name
        self.before_s, self.after_s = wired_before_s, wired_after_s
        self.stats = LinkStats()

    def put(self, packet: Any, wire_bytes: int, deliver: Callable[[Any], None]) -> bool:
        """Send ``packet`` (``wire_bytes`` of IP packet) across the air; never dropped."""
        self.stats.packets += 1
        self.stats.bytes += wire_bytes
        if self.before_s > 0:
            self.medium.sim.schedule(self.before_s, self._on_air, packet, wire_bytes, deliver)
        else:
            self._on_air(packet, wire_bytes, deliver)
        return True

    def _on_air(self, packet: Any, wire_bytes: int, deliver: Callable[[Any], None]) -> None:
        data_end = self.medium.transmit(wire_bytes)
        self.medium.sim.at(data_end + self.after_s, deliver, packet)


@dataclass
class WirelessResult:
    """One transfer across the medium: completion, air time and exchanges per direction."""

    time_s: float
    busy_s: float
    data_exchanges: int
    ack_exchanges: int
    events: int
    closed_form_airtime_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "time_s": self.time_s,
            "airtime_s": self.busy_s,
            "closed_form_airtime_s": self.closed_form_airtime_s,
            "data_exchanges": self.data_exchanges,
            "ack_exchanges": self.ack_exchanges,
            "events": self.events,
            **self.extra,
        }


def run_wireless_transfer(
    size_bytes: int,
    tcp: TcpSpec,
    *,
    data_rate_bit_per_s: float = DATA_RATE_BIT_PER_S,
    ack_rate_bit_per_s: float = ACK_RATE_BIT_PER_S,
    wired_one_way_s: float = 0.0,
    cw_slots: int = 0,
    seed: int = 0,
    until: float = 3600.0,
) -> WirelessResult:
    """Send ``size_bytes`` from a wireless client to a wired server; ACKs share the air.

    The data cross the air and then ``wired_one_way_s`` of wire; the server's ACKs
    cross the wire first and then the air. Time runs from the first byte sent until
    the server holds the last one (the connection is open). The closed form is
    ``n_d·t_d + n_a·t_a`` (:func:`tierwise.model.wireless.airtime_s`) with the
    exchange counts the run produced; without backoff it equals ``busy_s``.
    """
    if size_bytes <= 0:
        raise SimulationError(f"transfer size must be > 0, got {size_bytes}")
    sim = Simulator(seed)
    medium = WirelessMedium(sim, data_rate_bit_per_s, ack_rate_bit_per_s, cw_slots=cw_slots)
    up = medium.port("up", wired_after_s=wired_one_way_s)
    down = medium.port("down", wired_before_s=wired_one_way_s)
    sender = Sender(mss=tcp.mss, header=tcp.header, initial_window=tcp.initial_window, cc=tcp.cc)
    receiver = Receiver(ack_every=tcp.ack_every, ack_delay=tcp.ack_delay, ack_wire=tcp.ack_bytes)
    done: list[float] = []

    def got(n: int) -> None:
        if n >= size_bytes and not done:
            done.append(sim.now)

    end = TransferEnd(sim, sender, receiver, up, down, "client", on_delivered=got)
    sim.at(0.0, end.write, size_bytes)
    sim.run(until=until)
    if not done:
        raise SimulationError(f"the transfer did not finish within {until} s of simulated time")
    n_data, n_ack = up.stats.packets, down.stats.packets
    rates = (data_rate_bit_per_s, ack_rate_bit_per_s)
    data_s = float(np.sum(air.exchange_s(_wire_sizes(size_bytes, tcp), *rates)))
    closed = data_s + n_ack * float(air.exchange_s(tcp.ack_bytes, *rates))  # Σ t_d + n_a·t_a
    return WirelessResult(
        done[0],
        medium.busy_s,
        n_data,
        n_ack,
        sim.events,
        closed,
        {"retransmissions": sender.stats.retransmissions, "acks": receiver.acks_sent},
    )


def _wire_sizes(size_bytes: int, tcp: TcpSpec) -> np.ndarray:
    """IP packet sizes of a loss-free transfer: full segments and a short last one."""
    full, last = divmod(size_bytes, tcp.mss)
    return np.array([tcp.mss + tcp.header] * full + ([last + tcp.header] if last else []))
