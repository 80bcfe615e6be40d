"""Path physics for a site's transfers: handshakes, windows, loss recovery (§12.3).

A transfer of ``S`` bytes at rate ``B`` over round trip ``R`` costs, beyond its
serialisation ``S/B``:

* **handshake** — ``h·R`` with ``h`` round trips by protocol, once per session
  (``connection = "reused"``) or every round (``"new-per-round"``); none when the
  scenario leaves ``connection`` out (the connection is already open, §12.1);
* **window wait** — the slow-start stall from ``initial_window`` segments, which
  restarts every round when the connection is new or idle restart is on (the
  Linux default, since the agent's rounds idle longer than an RTO);
* **recovery** — with random loss ``p`` over ``n = ⌈S/MSS⌉`` packets, idealised
  selective retransmission needs ``K`` rounds, ``P(K ≤ k) = (1 − p^k)^n``, each
  extra round one ``R``; or FEC sends ``r`` repair symbols (``r`` the smallest
  reaching ``fec_target``), costing ``r·MSS/B``, and a failed block is topped up
  round by round like a retransmission.

Extra rounds are random; a task's total is the sum over its transfers, whose
distribution is the convolution of each transfer's, so the mean and any quantile
of the whole task come out exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from tierwise.errors import ModelError
from tierwise.model import loss as lossm
from tierwise.model import transport
from tierwise.scenario.schema import Site

__all__ = ["Extras", "TransferCost", "combine", "has_physics", "transfer_cost"]

_TAIL = 1e-15


@dataclass(frozen=True)
class TransferCost:
    """Costs of one transfer beyond ``S/B``; ``extra_rounds`` is a pmf over extra RTTs."""

    window_wait_s: float
    fec_send_s: float
    extra_rounds: np.ndarray
    final_window_bytes: float | None


@dataclass
class Extras:
    """Accumulated path costs of a whole task on one site.

    ``extra_rounds[j]`` is the probability of ``extra_offset + j`` extra RTTs: the
    negligible head and tail are cut, so a task of many lossy transfers keeps an
    array about as wide as its spread (√transfers), not as its mean.
    """

    rtt_s: float
    handshake_s: float = 0.0
    window_wait_s: float = 0.0
    fec_send_s: float = 0.0
    extra_rounds: np.ndarray = field(default_factory=lambda: np.array([1.0]))
    extra_offset: int = 0

    def add(self, cost: TransferCost, times: int = 1) -> None:
        """Add ``times`` independent transfers of this cost (O(log times) convolutions)."""
        self.window_wait_s += times * cost.window_wait_s
        self.fec_send_s += times * cost.fec_send_s
        pmf, offset = _power(cost.extra_rounds, times)
        self.extra_rounds, shift = combine(self.extra_rounds, pmf, with_offset=True)
        self.extra_offset += offset + shift

    @property
    def recovery_mean_s(self) -> float:
        """Mean loss-recovery time: FEC send time plus expected extra RTTs."""
        k = self.extra_offset + np.arange(self.extra_rounds.size)
        return self.fec_send_s + self.rtt_s * float(k @ self.extra_rounds)

    def recovery_quantile_s(self, q: float) -> float:
        """The ``q`` quantile of loss-recovery time."""
        cdf = np.cumsum(self.extra_rounds)
        k = int(np.searchsorted(cdf, q - 1e-12))
        return self.fec_send_s + self.rtt_s * (self.extra_offset + min(k, cdf.size - 1))

    @property
    def fixed_s(self) -> float:
        return self.handshake_s + self.window_wait_s


# a pmf wider than this (extra rounds between its first and last non-negligible value)
# would make each convolution slow; reached only by ~10^8 lossy transfers
MAX_PMF_WIDTH = 100_000
_FFT_ABOVE = 1_000_000  # direct convolution up to this many multiply-adds


def _power(pmf: np.ndarray, times: int) -> tuple[np.ndarray, int]:
    """pmf (and offset) of the sum of ``times`` independent draws, by repeated squaring."""
    if times < 0:
        raise ModelError(f"a count of transfers must be ≥ 0, got {times}")
    result, offset = np.array([1.0]), 0
    base, base_offset = pmf, 0
    while times:
        if times & 1:
            result, shift = combine(result, base, with_offset=True)
            offset += base_offset + shift
        times >>= 1
        if times:
            base, shift = combine(base, base, with_offset=True)
            base_offset = 2 * base_offset + shift
    return result, offset


def combine(a: np.ndarray, b: np.ndarray, *, with_offset: bool = False):
    """pmf of the sum of two independent extra-round counts, its negligible tail cut.

    With ``with_offset`` the negligible head is cut too and ``(pmf, first index)`` is
    returned.
    """
    if a.size + b.size > MAX_PMF_WIDTH:
        raise ModelError(
            "the loss-recovery distribution of this many lossy transfers is too wide to "
            f"compute exactly (over {MAX_PMF_WIDTH:,} possible extra round trips); "
            "use fewer rounds or chunks"
        )
    out = _convolve(a, b)
    keep = np.nonzero(out > _TAIL)[0]
    first = int(keep[0]) if (keep.size and with_offset) else 0
    out = out[first : keep[-1] + 1] if keep.size else out[:1]
    out = out / out.sum()
    return (out, first) if with_offset else out


def _convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if b.size == 1:
        return a * b[0]
    if a.size == 1:
        return b * a[0]
    if a.size * b.size <= _FFT_ABOVE:
        return np.convolve(a, b)
    size = a.size + b.size - 1
    out = np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(b, size), size)
    return np.clip(out, 0.0, None)  # rounding leaves ~1e-17 noise, below the cut


def has_physics(site: Site) -> bool:
    """Whether the site's path models anything beyond rate and RTT."""
    return (
        site.connection is not None
        or site.initial_window is not None
        or site.loss > 0
        or (site.loss_down or 0) > 0
    )


def handshake_s(site: Site, rounds: int) -> float:
    """Handshake time over a task of ``rounds`` rounds (§12.3.1)."""
    if site.connection is None:
        return 0.0
    return float(transport.connection_setup_s(site.handshake, site.rtt, rounds, site.connection))


def restarts_window(site: Site) -> bool:
    """Each round starts from the initial window (new connection or idle restart)."""
    return site.connection == "new-per-round" or site.idle_restart


@lru_cache(maxsize=4096)
def _recovery(n: int, loss: float, how: str, target: float) -> tuple[int, np.ndarray]:
    """Repair symbols and the pmf of extra rounds for ``n`` packets (cached: thresholds and
    the choice scan evaluate the same transfers many times)."""
    if how == "fec":
        r = lossm.fec_repair_symbols(n, loss, target)
        return r, _extra(lossm.fec_rounds_pmf(n, r, loss))
    if how == "retransmit":
        return 0, _extra(lossm.rounds_pmf(n, loss))
    return 0, np.array([1.0])


def _extra(rounds_pmf: np.ndarray) -> np.ndarray:
    """pmf of extra rounds ``K − 1`` from a pmf of rounds ``K ≥ 1`` (index = rounds)."""
    tail = rounds_pmf[1:]
    return tail / tail.sum()


def syn_capped(site: Site) -> bool:
    """A new TCP connection's first flight is held to the SYN-ACK's unscaled window.

    QUIC's first flight is bounded by transport parameters instead (not modelled).
    """
    return site.connection is not None and str(site.handshake).startswith("tcp")


def transfer_cost(
    site: Site,
    size: float,
    rate: float,
    loss: float,
    start_window: float | None,
    first_flight: float | None = None,
) -> TransferCost:
    """Window wait and loss recovery of one transfer (§12.3.2, §12.3.3).

    ``first_flight`` caps the first round (a new TCP connection's upload:
    :data:`~tierwise.model.transport.SYN_WINDOW_BYTES`).
    """
    if size <= 0:
        return TransferCost(0.0, 0.0, np.array([1.0]), start_window)
    n = math.ceil(size / site.mss)
    r, pmf = _recovery(n, loss, site.recovery if loss > 0 else "none", site.fec_target)
    fec_send = r * site.mss / rate
    sent = size + r * site.mss
    wait, window = 0.0, start_window
    if site.initial_window is not None and math.isfinite(rate):
        send, window = transport.slow_start_send_s(
            sent, rate, site.rtt, site.initial_window, site.mss, start_window, first_flight
        )
        wait = max(0.0, send - sent / rate)
    return TransferCost(wait, fec_send, pmf, window)
