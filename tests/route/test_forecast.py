"""Forecasters beside EWMA and Kalman: Holt, ARIMA(1,1,1), the mean since the last change
point, the Page–Hinkley detector, and Adaptive choosing among all five."""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tierwise.route.estimate import CHOICE_WARMUP, FILTERS, Adaptive, Ewma
from tierwise.route.forecast import Arima, Holt, Level, PageHinkley


def _one_step_errors(f, xs: list[float]) -> list[float]:
    out = []
    for x in xs:
        guess = f.value if isinstance(f, Adaptive) else f.mean
        if guess is not None:
            out.append(abs(x - guess) / x)
        f.update(x)
    return out


def test_holt_follows_a_ramp_that_ewma_lags() -> None:
    """On a noiseless ramp Holt's prediction becomes exact; the EWMA lags by the closed
    form slope·(1 − α)/α."""
    xs = [10.0 + 0.5 * i for i in range(200)]
    holt, ewma = Holt(), Ewma(alpha=0.25)
    _one_step_errors(holt, xs)
    _one_step_errors(ewma, xs)
    assert holt.mean == np.float64(holt.mean) and abs(holt.mean - (10.0 + 0.5 * 200)) < 1e-6
    assert ewma.mean is not None
    assert math.isclose(10.0 + 0.5 * 200 - ewma.mean, 0.5 * (1 - 0.25) / 0.25 + 0.5, rel_tol=1e-3)


def test_arima_recovers_an_ar_process_of_differences() -> None:
    """Hannan–Rissanen over a long window recovers φ of d_t = 0.6 d_{t−1} + e_t (θ = 0),
    and its one-step forecasts beat a random walk's."""
    rng = np.random.default_rng(3)
    d = np.zeros(3000)
    for t in range(1, len(d)):
        d[t] = 0.6 * d[t - 1] + rng.normal(0, 1)
    xs = list(1000 + np.cumsum(d))
    arima = Arima(window=2000, refit_every=500)
    errs = _one_step_errors(arima, xs)
    assert arima.fits >= 4
    assert abs(arima.phi - 0.6) < 0.08 and abs(arima.theta) < 0.1
    walk = [abs(b - a) / b for a, b in itertools.pairwise(xs)]
    assert np.mean(errs[-1000:]) < 0.9 * np.mean(walk[-1000:])


def test_page_hinkley_flags_a_shift_not_an_outlier_or_noise() -> None:
    """A doubled level (residual +1) is flagged at its third sample; one wild sample and
    2000 samples of 5 % noise raise no alarm."""
    ph = PageHinkley()
    assert [ph.update(1.0, 2.0) for _ in range(3)] == [False, False, True]
    assert ph.level() == 2.0
    ph.restart()
    assert not ph.update(19.0, 20.0)
    rng = np.random.default_rng(1)
    assert not any(ph.update(r, 1.0 + r) for r in rng.normal(0, 0.05, 2000))


def test_adaptive_restarts_every_filter_after_a_step_and_picks_holt_on_a_ramp() -> None:
    """A level that drops 5× restarts all four filters at the new level (one shift); on
    a ramp the chosen forecaster is the trend-following one and beats the EWMA."""
    rng = np.random.default_rng(2)
    a = Adaptive(1.0)
    for x in [1.0 * (1 + rng.normal(0, 0.02)) for _ in range(50)]:
        a.update(x)
    for x in [0.2 * (1 + rng.normal(0, 0.02)) for _ in range(5)]:
        a.update(x)
    assert a.shifts == 1
    for f in (a.ewma, a.kalman, a.holt, a.arima, a.level):
        assert abs(f.mean - 0.2) < 0.02
    ramp = [1.02**i * (1 + rng.normal(0, 0.01)) for i in range(150)]
    chosen, ewma = Adaptive(1.0), Ewma()
    err_chosen = np.mean(_one_step_errors(chosen, ramp)[20:])
    err_ewma = np.mean(_one_step_errors(ewma, ramp)[20:])
    assert chosen.chosen in ("holt", "arima") and err_chosen < 0.6 * err_ewma


@settings(max_examples=100)
@given(st.lists(st.floats(1e-3, 1e6, allow_nan=False, allow_infinity=False), min_size=1,
                max_size=120))  # fmt: skip
def test_adaptive_stays_finite(xs: list[float]) -> None:
    """Whatever positive samples arrive, the estimate and its spread stay finite, the
    choice is one of the filters, and a censoring bound is obeyed."""
    a = Adaptive(1.0)
    for x in xs:
        a.update(x)
        assert math.isfinite(a.value) and math.isfinite(a.sd) and a.sd >= 0
        assert a.chosen in FILTERS
    a.at_most(min(xs) / 2)
    assert a.value <= min(xs) / 2 + 1e-9


def test_level_has_the_running_means_error_on_a_flat_level() -> None:
    """On white noise the mean since the change point forecasts with error variance
    σ²(1 + 1/span) against the EWMA's σ²(1 + α/(2 − α)): √(1.031/1.143) = 0.95 of its MAPE."""
    rng = np.random.default_rng(5)
    xs = list(1.0 + rng.normal(0, 0.02, 20_000))
    level = np.mean(_one_step_errors(Level(), xs)[100:])
    ewma = np.mean(_one_step_errors(Ewma(alpha=0.25), xs)[100:])
    assert 0.92 < level / ewma < 0.98


def test_level_bets_on_a_step_once_steps_have_been_seen() -> None:
    """The first far-off sample is not bet on (one step in two, by the prior, and a rise
    costs more to bet wrong); once a step has been confirmed, the next far-off sample is
    the forecast at once, and the sample after it confirms it."""
    f = Level()
    for x in [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0]:
        f.update(x)
    f.update(2.0)
    assert f.pending == 2.0 and not f.betting and f.mean < 1.1
    f.update(2.02)
    assert f.stepped and f.n == 2 and math.isclose(f.mean, 2.01)
    for x in [2.0, 1.98, 2.01, 2.0]:
        f.update(x)
    f.update(3.0)
    assert f.betting and f.mean == 3.0
    f.update(3.03)
    assert f.stepped and math.isclose(f.mean, 3.015)


def test_level_keeps_its_level_through_lone_outliers() -> None:
    """Far-off samples that each fall back at once are outliers: dropped from the mean,
    and after two of them the forecast no longer moves to one (even a fall, the cheap
    bet)."""
    f = Level()
    for x in [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0]:
        f.update(x)
    for spike in (5.0, 0.3, 4.0):
        f.update(spike)
        assert not f.betting or spike < 1
        f.update(1.0)
        assert abs(f.mean - 1.0) < 0.02
    f.update(0.5)
    assert not f.betting and f.outliers > f.steps


def test_adaptive_follows_a_step_from_its_first_sample_once_it_knows_steps() -> None:
    """On a series of level shifts the ensemble forecasts the new level from a shift's
    second sample on (its level filter's bet), where the EWMA's guard waits for two."""
    rng = np.random.default_rng(4)
    a, ewma = Adaptive(1.0), Ewma()
    levels = [1.0, 2.0, 1.0, 2.5, 1.2, 2.4]
    xs = [lv * (1 + rng.normal(0, 0.02)) for lv in levels for _ in range(30)]
    err_a = np.mean(_one_step_errors(a, xs)[5:])
    err_e = np.mean(_one_step_errors(ewma, xs)[5:])
    assert err_a < 0.8 * err_e
    a.update(4.8)  # a far-off sample: bet on as the new level
    assert a.chosen == "level" and a.value == 4.8


@settings(max_examples=100)
@given(st.lists(st.floats(1e-3, 1e6, allow_nan=False, allow_infinity=False), min_size=1,
                max_size=120))  # fmt: skip
def test_level_forecasts_its_segment_or_the_pending_sample(xs: list[float]) -> None:
    """The forecast is the segment's mean or the far-off sample awaiting its verdict,
    never anything else; the spread is finite; a step's counts stay positive."""
    f = Level()
    for x in xs:
        f.update(x)
        assert f.mean in (f.mean_old, f.pending) and math.isfinite(f.sd) and f.sd >= 0
        assert f.steps > 0 and f.outliers > 0


def test_adaptive_keeps_the_ewma_until_the_scores_rest_on_some_samples() -> None:
    """On a ramp Holt's score is the lowest within a few samples, but the choice stays
    the EWMA's until CHOICE_WARMUP samples have been scored; then it moves."""
    a = Adaptive(1.0)
    chosen = []
    for i in range(30):
        a.update(1.0 * 1.03**i)
        chosen.append(a.chosen)
    assert chosen[: CHOICE_WARMUP - 1] == ["ewma"] * (CHOICE_WARMUP - 1)
    assert min(a.errors, key=a.errors.get) != "ewma" and chosen[-1] != "ewma"
