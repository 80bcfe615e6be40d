"""Shared air interface: airtime of 802.11a/g OFDM frame exchanges (§12.4.1).

A successful exchange without aggregation is ``access wait + data PPDU + SIFS +
MAC ACK PPDU``. Timing follows IEEE 802.11-2020 Clause 17 (OFDM PHY, 20 MHz
channels): TXTIME in §17.4.3, DIFS = aSIFSTime + 2·aSlotTime in §10.3.2.3. The
reference exchange of note 21 has no random backoff, no retries, no RTS/CTS.

Rates here are PHY rates in **bits** per second (6, 9, … 54 Mbit/s), because the
symbol arithmetic is in bits; sizes are bytes; times are seconds.
"""

from __future__ import annotations

import numpy as np

from tierwise.errors import ModelError
from tierwise.model._check import ArrayLike, nonneg, positive

__all__ = [
    "DATA_MPDU_OVERHEAD_BYTES",
    "DIFS_S",
    "MAC_ACK_BYTES",
    "OFDM_RATES_BIT_PER_S",
    "PREAMBLE_S",
    "SERVICE_BITS",
    "SIFS_S",
    "SIGNAL_S",
    "SLOT_S",
    "SYMBOL_S",
    "TAIL_BITS",
    "ack_thinning_saving_s",
    "airtime_s",
    "bits_per_symbol",
    "exchange_overhead_s",
    "exchange_s",
    "ppdu_s",
    "ppdu_symbols",
]

SLOT_S = 9e-6  # aSlotTime, OFDM 20 MHz
SIFS_S = 16e-6  # aSIFSTime, OFDM 20 MHz
DIFS_S = SIFS_S + 2 * SLOT_S  # 34 µs; the access wait of note 21 (no random backoff)
PREAMBLE_S = 16e-6  # T_PREAMBLE: short + long training fields
SIGNAL_S = 4e-6  # T_SIGNAL: one BPSK-1/2 symbol
SYMBOL_S = 4e-6  # T_SYM, 0.8 µs guard interval included
SERVICE_BITS = 16  # PPDU SERVICE field
TAIL_BITS = 6  # convolutional-code tail
MAC_ACK_BYTES = 14  # Ack frame: frame control 2 + duration 2 + RA 6 + FCS 4
MAC_HEADER_BYTES = 24  # data frame, three addresses, no QoS control
FCS_BYTES = 4
LLC_SNAP_BYTES = 8  # IEEE 802.2 LLC + SNAP (RFC 1042) before the IP packet
DATA_MPDU_OVERHEAD_BYTES = MAC_HEADER_BYTES + FCS_BYTES + LLC_SNAP_BYTES  # 36
OFDM_RATES_BIT_PER_S = (6e6, 9e6, 12e6, 18e6, 24e6, 36e6, 48e6, 54e6)  # 802.11a/g

_SYMBOL_US = 4  # N_DBPS = rate × 4 µs, computed in µs to keep 54 Mbit/s → exactly 216


def bits_per_symbol(rate_bit_per_s: ArrayLike) -> ArrayLike:
    """Data bits per OFDM symbol ``N_DBPS = rate × T_SYM`` (24 at 6 Mbit/s, 216 at 54)."""
    positive("PHY rate", rate_bit_per_s)
    if np.any(np.isinf(np.asarray(rate_bit_per_s, dtype=float))):
        raise ModelError("PHY rate must be finite")
    return np.multiply(rate_bit_per_s, _SYMBOL_US) / 1e6


def ppdu_symbols(mpdu_bytes: ArrayLike, rate_bit_per_s: ArrayLike) -> ArrayLike:
    """OFDM data symbols ``⌈(16 + 8·L + 6) / N_DBPS⌉`` for an ``L``-byte MPDU."""
    nonneg("MPDU size", mpdu_bytes)
    bits = SERVICE_BITS + 8 * np.asarray(mpdu_bytes, dtype=float) + TAIL_BITS
    quotient = bits / bits_per_symbol(rate_bit_per_s)
    return np.ceil(quotient - 1e-9 * quotient)


def ppdu_s(mpdu_bytes: ArrayLike, rate_bit_per_s: ArrayLike) -> ArrayLike:
    """PPDU duration ``TXTIME = 20 µs + 4 µs·⌈(16 + 8·L + 6)/N_DBPS⌉`` (§12.4.1).

    20 µs is the preamble (16) plus the SIGNAL symbol (4). A 1,264-byte MPDU (a
    1,228-byte IP packet) at 54 Mbit/s takes 208 µs; the 14-byte MAC ACK at
    6 Mbit/s takes 44 µs.
    """
    return PREAMBLE_S + SIGNAL_S + SYMBOL_S * ppdu_symbols(mpdu_bytes, rate_bit_per_s)


def exchange_overhead_s(ack_rate_bit_per_s: ArrayLike, access_s: ArrayLike = DIFS_S) -> ArrayLike:
    """The part of an exchange that does not shrink with the packet: access + SIFS + MAC ACK.

    ``34 + 16 + 44 = 94 µs`` with the MAC ACK at 6 Mbit/s (§12.4.1, figure 12-24).
    """
    nonneg("access wait", access_s)
    return access_s + SIFS_S + ppdu_s(MAC_ACK_BYTES, ack_rate_bit_per_s)


def exchange_s(
    ip_bytes: ArrayLike,
    data_rate_bit_per_s: ArrayLike,
    ack_rate_bit_per_s: ArrayLike,
    access_s: ArrayLike = DIFS_S,
) -> ArrayLike:
    """One successful exchange ``t_access + TXTIME(L + 36) + SIFS + TXTIME(14 B ACK)`` (§12.4.1).

    The IP packet travels in an MPDU with 36 more bytes (MAC header, FCS,
    LLC/SNAP). At 54/6 Mbit/s: 302 µs for a 1,228-byte packet, 134 µs for a
    92-byte end-to-end ACK — the data PPDU shrinks ≈ 81 %, the exchange ≈ 56 %.
    """
    nonneg("IP packet size", ip_bytes)
    data = ppdu_s(np.add(ip_bytes, DATA_MPDU_OVERHEAD_BYTES), data_rate_bit_per_s)
    return data + exchange_overhead_s(ack_rate_bit_per_s, access_s)


def airtime_s(
    data_exchanges: ArrayLike,
    ack_exchanges: ArrayLike,
    data_exchange_s: ArrayLike,
    ack_exchange_s: ArrayLike,
) -> ArrayLike:
    """Air time of a transfer ``n_d·t_d + n_a·t_a`` (§12.4.1).

    30,800 data and 30,800 end-to-end ACK exchanges at 302 and 134 µs ≈ 13.4 s.
    """
    for name, value in (
        ("data exchanges", data_exchanges),
        ("ACK exchanges", ack_exchanges),
        ("data exchange time", data_exchange_s),
        ("ACK exchange time", ack_exchange_s),
    ):
        nonneg(name, value)
    return np.multiply(data_exchanges, data_exchange_s) + np.multiply(ack_exchanges, ack_exchange_s)


def ack_thinning_saving_s(
    ack_exchanges: ArrayLike, every: int, ack_exchange_s: ArrayLike
) -> ArrayLike:
    """Air time freed by one end-to-end ACK per ``every`` packets: ``(n − ⌈n/every⌉)·t_a``.

    Exercise 12-5(a): halving 30,800 ACKs frees 15,400 × 134 µs ≈ 2.1 s. Only the
    air time: the later feedback may stall the window (§12.3.2), which this omits.
    """
    nonneg("ACK exchanges", ack_exchanges)
    nonneg("ACK exchange time", ack_exchange_s)
    if isinstance(every, bool) or not isinstance(every, int | np.integer) or every < 1:
        raise ModelError(f"packets per ACK must be an integer ≥ 1, got {every!r}")
    kept = np.ceil(np.divide(ack_exchanges, every))
    return np.multiply(np.subtract(ack_exchanges, kept), ack_exchange_s)
