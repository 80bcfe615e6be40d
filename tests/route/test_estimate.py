"""The online estimators: converge, follow a step, ignore one outlier, pick the better filter."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierwise.route.estimate import Adaptive, Ewma, Kalman, normal_cdf

FILTERS = [Ewma, Kalman, lambda: Adaptive(prior=1.0)]


def _value(f) -> float:
    return f.value if isinstance(f, Adaptive) else f.mean


@pytest.mark.parametrize("make", FILTERS, ids=["ewma", "kalman", "adaptive"])
def test_converges_on_a_noisy_series(make) -> None:
    """A level of 50 ms with 5 % noise is estimated within 5 % after 60 samples."""
    rng = random.Random(1)
    f = make()
    for _ in range(60):
        f.update(0.05 * (1 + rng.gauss(0, 0.05)))
    assert _value(f) == pytest.approx(0.05, rel=0.05)


@pytest.mark.parametrize("make", FILTERS, ids=["ewma", "kalman", "adaptive"])
def test_tracks_a_step_within_three_samples(make) -> None:
    """An uplink that drops 80 → 3 Mbit/s is followed within three samples."""
    rng = random.Random(2)
    f = make()
    for _ in range(30):
        f.update(10e6 * (1 + rng.gauss(0, 0.03)))
    for _ in range(3):
        f.update(0.375e6 * (1 + rng.gauss(0, 0.03)))
    assert _value(f) == pytest.approx(0.375e6, rel=0.15)


@pytest.mark.parametrize("make", FILTERS, ids=["ewma", "kalman", "adaptive"])
def test_ignores_one_outlier(make) -> None:
    """One sample 20× the level (a stalled request) does not move the estimate."""
    rng = random.Random(3)
    f = make()
    for _ in range(30):
        f.update(0.1 * (1 + rng.gauss(0, 0.03)))
    before = _value(f)
    f.update(2.0)
    assert _value(f) == pytest.approx(before, rel=1e-9)
    f.update(0.1)
    assert _value(f) == pytest.approx(0.1, rel=0.05)


def test_adaptive_starts_at_the_prior_with_its_spread() -> None:
    """Before any sample the config's prior is the estimate, ±50 %."""
    a = Adaptive(prior=0.02)
    assert a.value == 0.02 and a.sd == pytest.approx(0.01) and a.samples == 0


def test_adaptive_uses_the_filter_with_smaller_error() -> None:
    """On a drifting series the filter that predicted better is the one chosen."""
    a = Adaptive(prior=1.0)
    for i in range(50):
        a.update(1.0 + 0.02 * i)
    best = min(a.errors, key=a.errors.get)
    assert a.chosen == best


@given(st.floats(min_value=1e-6, max_value=1e9), st.integers(min_value=1, max_value=30))
def test_constant_series_is_exact(level: float, n: int) -> None:
    """A constant series is estimated exactly by every filter."""
    for make in FILTERS:
        f = make()
        for _ in range(n):
            f.update(level)
        assert _value(f) == pytest.approx(level, rel=1e-9)


def test_normal_cdf() -> None:
    """Φ(0) = ½, Φ(1.96) ≈ 0.975."""
    assert normal_cdf(0.0) == 0.5
    assert normal_cdf(1.96) == pytest.approx(0.975, abs=1e-3)


def test_censored_bound_pulls_the_estimate_down() -> None:
    """A timed-out transfer's rate bound moves an estimate above it down to it, not up."""
    a = Adaptive(prior=10e6)
    for _ in range(10):
        a.update(10e6)
    a.at_most(0.6e6)
    assert a.value == pytest.approx(0.6e6)
    a.at_most(5e6)
    assert a.value == pytest.approx(0.6e6)
    fresh = Adaptive(prior=10e6)
    fresh.at_most(1e6)
    assert fresh.value == pytest.approx(1e6)


def test_a_bimodal_series_is_not_forecast_below_zero() -> None:
    """Bytes per output token of llama.cpp answering streams (~240 B of SSE a token) and
    whole answers (~0 B): ARIMA's forecast took this estimate to −8.7 B a token at the
    29th sample, and a 71-token answer's size to −780 B, which the planner refused — a
    500 for the client's request. The series as the gateway learned it."""
    series = [236.3, 0.0, 0.59, 0.0, 0.0, 0.0, 0.0, 258.67, 308.0, 0.0, 1.34, 0.0, 235.68,
              0.0, 0.0, 234.5, 236.64, 1.31, 0.0, 0.0, 0.0, 236.03, 0.0, 0.0, 0.0, 0.0,
              248.8, 246.33, 0.0]  # fmt: skip
    a = Adaptive(8.0)
    for z in series:
        a.update(z)
        assert a.value >= 0.0


@given(st.lists(st.floats(min_value=0.0, max_value=1e6), min_size=1, max_size=60))
def test_nonnegative_samples_give_a_nonnegative_estimate(samples: list[float]) -> None:
    """Whatever the series of non-negative samples, the estimate is finite and ≥ 0
    (every quantity the router tracks is)."""
    a = Adaptive(1.0)
    for z in samples:
        a.update(z)
        assert math.isfinite(a.value) and a.value >= 0.0
