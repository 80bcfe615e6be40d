"""Inverse questions: the loss a repair budget covers, the exit rate that binds a split."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import calc_json

from tierwise.errors import ModelError
from tierwise.model import inverse
from tierwise.model import loss as m

MBIT = 125_000.0


def test_chapter_repair_budgets_cover_their_loss() -> None:
    """§12.3.3: 63 repair symbols were sized for 14 %, 20 for 3.6 %; each covers a little more."""
    p63 = inverse.fec_max_loss(245, 63, 0.999)
    p20 = inverse.fec_max_loss(245, 20, 0.999)
    assert 0.14 <= p63 < 0.145 and m.fec_repair_symbols(245, p63, 0.999) <= 63
    assert 0.036 <= p20 < 0.038 and m.fec_repair_symbols(245, p20, 0.999) <= 20
    assert m.fec_success(245, 63, p63 + 1e-4) < 0.999


def test_fixed_ratio_at_lower_loss_is_waste() -> None:
    """Ex. 12-10(d): 25.7 % redundancy at 3.6 % loss is over three times the 20 symbols needed."""
    got = calc_json("fec-max-loss", "--repair", "63")
    assert got["overhead"] == pytest.approx(0.257, abs=0.0005)
    assert got["max_loss"] > 3 * 0.036


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 300), st.integers(0, 80), st.sampled_from([0.9, 0.99, 0.999]))
def test_max_loss_inverts_repair_symbols(k: int, r: int, target: float) -> None:
    """At the returned loss, r repair symbols suffice; a little above, they do not."""
    p = inverse.fec_max_loss(k, r, target)
    assert m.fec_success(k, r, p) >= target
    if p + 1e-5 < 1:
        assert m.fec_success(k, r, p + 1e-5) < target + 1e-9 or p > 0.999


def test_exit_threshold_is_sum_of_paths() -> None:
    """Ex. 12-6(b): 20 + 10 Mbit/s → the exit binds below 30 Mbit/s; 24 Mbit/s does."""
    rate = inverse.exit_bottleneck_rate_bytes_per_s(30e6, 20 * MBIT, 10 * MBIT)
    assert rate / MBIT == pytest.approx(30)
    uneven = inverse.exit_bottleneck_rate_bytes_per_s(30e6, 20 * MBIT, 10 * MBIT, 0.5)
    assert uneven / MBIT == pytest.approx(20)
    assert calc_json("split-exit-threshold")["exit_threshold_rate_bytes_per_s"] / MBIT == (
        pytest.approx(30)
    )


def test_bad_counts_refused() -> None:
    """Negative symbol counts are a ModelError."""
    with pytest.raises(ModelError):
        inverse.fec_max_loss(245, -1, 0.999)
