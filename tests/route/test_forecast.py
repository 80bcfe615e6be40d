"""Forecasters beside EWMA and Kalman: Holt, ARIMA(1,1,1), the Page–Hinkley detector,
and Adaptive choosing among all four."""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tierwise.route.estimate import FILTERS, Adaptive, Ewma
from tierwise.route.forecast import Arima, Holt, PageHinkley


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
    for f in (a.ewma, a.kalman, a.holt, a.arima):
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
