"""Unit and property tests for 802.11a/g OFDM exchange airtime (§12.4.1)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierwise.errors import ModelError
from tierwise.model import wireless as w

US = 1e-6

ofdm_rates = st.sampled_from(w.OFDM_RATES_BIT_PER_S)
ip_sizes = st.integers(min_value=0, max_value=2304)


def test_bits_per_symbol_of_every_ofdm_rate():
    """N_DBPS = 24, 36, 48, 72, 96, 144, 192, 216 for 6 … 54 Mbit/s."""
    np.testing.assert_array_equal(
        w.bits_per_symbol(np.array(w.OFDM_RATES_BIT_PER_S)), [24, 36, 48, 72, 96, 144, 192, 216]
    )


@pytest.mark.parametrize(
    ("mpdu", "rate", "expected_us"),
    [
        (14, 6e6, 44),  # MAC ACK at the lowest rate
        (14, 24e6, 28),  # MAC ACK at 24 Mbit/s: two symbols
        (1536, 54e6, 248),  # a 1,500-byte IP packet: 57 symbols
        (0, 54e6, 24),  # SERVICE + tail still need one symbol
    ],
)
def test_ppdu_durations(mpdu, rate, expected_us):
    """TXTIME = 20 µs + 4 µs per symbol."""
    assert w.ppdu_s(mpdu, rate) == pytest.approx(expected_us * US)


@given(ip_sizes, ofdm_rates)
def test_symbols_match_integer_arithmetic(size, rate):
    """The float ceiling equals the exact integer ⌈(22 + 8·L)/N_DBPS⌉ at every OFDM rate."""
    n_dbps = int(rate) * 4 // 1_000_000
    assert w.ppdu_symbols(size, rate) == -(-(22 + 8 * size) // n_dbps)


def test_exchange_components_add_up():
    """Exchange = DIFS + data PPDU + SIFS + MAC ACK PPDU."""
    data = w.ppdu_s(1228 + w.DATA_MPDU_OVERHEAD_BYTES, 54e6)
    ack = w.ppdu_s(w.MAC_ACK_BYTES, 6e6)
    assert w.exchange_s(1228, 54e6, 6e6) == pytest.approx(w.DIFS_S + data + w.SIFS_S + ack)


def test_exchange_with_backoff_access():
    """A longer access wait (DIFS + mean backoff) adds one for one."""
    backoff = 7.5 * w.SLOT_S  # mean of CWmin = 15 slots
    base = w.exchange_s(1228, 54e6, 6e6)
    assert w.exchange_s(1228, 54e6, 6e6, w.DIFS_S + backoff) == pytest.approx(base + backoff)


def test_airtime_broadcasts():
    """Exchange counts may be arrays."""
    got = w.airtime_s(np.array([1, 2]), np.array([1, 1]), 302 * US, 134 * US)
    np.testing.assert_allclose(got, [436 * US, 738 * US])


def test_thinning_every_one_frees_nothing():
    """One ACK per packet is the baseline: nothing freed."""
    assert w.ack_thinning_saving_s(30_800, 1, 134 * US) == 0


def test_thinning_rounds_up_the_kept_acks():
    """Three ACKs thinned to one per two keep two, freeing one."""
    assert w.ack_thinning_saving_s(3, 2, 134 * US) == pytest.approx(134 * US)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: w.ppdu_s(-1, 54e6), "MPDU size"),
        (lambda: w.ppdu_s(100, 0.0), "PHY rate"),
        (lambda: w.ppdu_s(100, float("inf")), "finite"),
        (lambda: w.exchange_s(-5, 54e6, 6e6), "IP packet size"),
        (lambda: w.exchange_s(100, 54e6, 6e6, -1e-6), "access wait"),
        (lambda: w.airtime_s(-1, 0, 302 * US, 134 * US), "data exchanges"),
        (lambda: w.ack_thinning_saving_s(100, 0, 134 * US), "packets per ACK"),
    ],
)
def test_refuses_out_of_domain(call, match):
    """Negative sizes or times, zero or infinite rates, zero packets per ACK."""
    with pytest.raises(ModelError, match=match):
        call()


@given(ip_sizes, ip_sizes, ofdm_rates)
def test_larger_packet_never_shorter_exchange(a, b, rate):
    """Exchange time never falls as the packet grows."""
    small, large = sorted((a, b))
    assert w.exchange_s(small, rate, 6e6) <= w.exchange_s(large, rate, 6e6)


@given(ip_sizes, ofdm_rates, ofdm_rates)
def test_faster_rate_never_longer_exchange(size, r1, r2):
    """A higher data rate never lengthens the exchange, which never drops below the fixed part."""
    slow, fast = sorted((r1, r2))
    assert w.exchange_s(size, fast, 6e6) <= w.exchange_s(size, slow, 6e6)
    assert w.exchange_s(size, fast, 6e6) > w.exchange_overhead_s(6e6)


@given(st.integers(0, 100_000), st.integers(1, 16))
def test_thinning_saving_bounded(acks, every):
    """Thinning frees between 0 and all of the ACK air time."""
    saved = w.ack_thinning_saving_s(acks, every, 134 * US)
    assert 0 <= saved <= acks * 134 * US + 1e-12
