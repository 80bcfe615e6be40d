"""Two paths: split, shared exit, replication (§12.4.3, exercise 12-6)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierwise.errors import ModelError
from tierwise.model import multipath

rates = st.floats(min_value=1e3, max_value=1e9)
sizes = st.floats(min_value=0.0, max_value=1e10)
fractions = st.floats(min_value=0.0, max_value=1.0)
probs = st.floats(min_value=0.0, max_value=1.0)


@given(sizes, rates, rates, fractions)
def test_split_time_is_minimal_at_the_rate_ratio(size, b1, b2, x):
    """No split beats x = B1/(B1 + B2), whose time is S/(B1 + B2)."""
    best = multipath.split_time_s(size, b1, b2)
    assert best == pytest.approx(size / (b1 + b2), rel=1e-12, abs=1e-15)
    assert multipath.split_time_s(size, b1, b2, x) >= best * (1 - 1e-9)


@given(sizes, rates, rates, rates)
def test_shared_exit_is_never_faster(size, b1, b2, exit_rate):
    """A shared exit bounds the split from below by S/B_exit."""
    t = multipath.shared_exit_time_s(size, b1, b2, exit_rate)
    assert t >= multipath.split_time_s(size, b1, b2)
    assert t >= size / exit_rate * (1 - 1e-12)


def test_split_on_one_path_and_broadcast():
    """x = 1 sends everything on path 1 even if path 2 is dead; arrays broadcast."""
    assert multipath.split_time_s(10.0, 5.0, 0.0, 1.0) == 2.0
    assert multipath.split_fraction(5.0, 0.0) == 1.0
    got = multipath.split_time_s(np.array([30e6, 60e6]), 2.5e6, 1.25e6)
    np.testing.assert_allclose(got, [8.0, 16.0])


@given(probs, probs, probs, probs)
def test_replication_failure_bounds_and_monotonicity(q, p1, p2, worse):
    """q ≤ p_fail ≤ 1, and a less reliable path never lowers it."""
    fail = multipath.replication_failure(q, p1, p2)
    assert q - 1e-15 <= fail <= 1 + 1e-15
    assert multipath.replication_failure(q, max(p1, worse), p2) >= fail - 1e-15


def test_replication_special_cases():
    """No shared endpoint: p1·p2; perfect access: q."""
    assert multipath.replication_failure(0.0, 0.1, 0.05) == pytest.approx(0.005)
    assert multipath.replication_failure(0.02, 0.0, 0.0) == 0.02
    assert multipath.replication_failure(1.0, 0.3, 0.3) == 1.0


def test_duplicate_bytes():
    """Extra bytes are (c − 1)·n·b; a single copy adds none."""
    assert multipath.replicated_bytes(8, 640, 3) == 15_360
    assert multipath.duplicate_bytes(8, 640, 3) == 10_240
    assert multipath.duplicate_bytes(8, 640, 1) == 0


@pytest.mark.parametrize(
    ("call", "args"),
    [
        (multipath.split_fraction, (0.0, 0.0)),
        (multipath.split_fraction, (-1.0, 1.0)),
        (multipath.split_time_s, (-1.0, 1.0, 1.0)),
        (multipath.split_time_s, (1.0, 1.0, 1.0, 1.5)),
        (multipath.shared_exit_time_s, (1.0, 1.0, 1.0, 0.0)),
        (multipath.replication_failure, (1.1, 0.1, 0.1)),
        (multipath.replication_failure, (0.1, -0.1, 0.1)),
        (multipath.replication_failure, (0.1, 0.1, np.nan)),
        (multipath.duplicate_bytes, (8, 640, 0)),
        (multipath.duplicate_bytes, (-8, 640)),
    ],
)
def test_out_of_domain_values_are_model_errors(call, args):
    """Dead paths, fractions outside [0, 1], probabilities outside [0, 1] are refused."""
    with pytest.raises(ModelError):
        call(*args)
