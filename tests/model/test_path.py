"""Unit tests for the propagation floor (§12.1.4)."""

from __future__ import annotations

import numpy as np
import pytest

from tierwise.errors import ModelError
from tierwise.model import path


def test_fibre_speed_is_two_thirds_of_c():
    """The named constant is the §12.1.4 figure, 2×10^8 m/s."""
    assert path.FIBRE_SPEED_M_PER_S == 2e8


def test_rtt_is_twice_one_way():
    """RTT = 2d/v, one way = d/v."""
    assert path.propagation_one_way_s(1_000e3) == pytest.approx(5e-3)
    assert path.propagation_rtt_s(1_000e3) == pytest.approx(10e-3)
    assert path.propagation_rtt_s(3e8, speed_m_per_s=3e8) == pytest.approx(2.0)


def test_rtt_vectorises():
    """Distances broadcast over an array."""
    got = path.propagation_rtt_s(np.array([0.0, 1e6, 1e7]))
    np.testing.assert_allclose(got, [0.0, 0.01, 0.1])


def test_max_distance_inverts_rtt():
    """The farthest distance for an RTT budget has exactly that RTT."""
    assert path.propagation_rtt_s(path.max_distance_m(0.05)) == pytest.approx(0.05)


@pytest.mark.parametrize(
    "call",
    [
        lambda: path.propagation_rtt_s(-1.0),
        lambda: path.propagation_rtt_s(1e6, speed_m_per_s=0.0),
        lambda: path.propagation_one_way_s(float("inf")),
        lambda: path.max_distance_m(-0.01),
    ],
)
def test_refuses_out_of_domain(call):
    """Negative distance or RTT, and zero speed, are ModelErrors."""
    with pytest.raises(ModelError):
        call()
