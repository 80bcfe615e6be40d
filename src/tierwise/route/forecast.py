"""Forecasters for trends and level shifts, beside the EWMA and Kalman filter of
:mod:`tierwise.route.estimate` (reference 2's live loop: ARIMA(1,1,1) over a sliding
window, re-estimated online).

* :class:`Holt` — Holt's linear trend: level ``ℓ`` and slope ``b``, the next sample
  predicted as ``ℓ + b`` (a queue building up, a server warming, a link degrading).
* :class:`Arima` — ARIMA(1,1,1): the differences ``d_t = z_t − z_{t−1}`` follow
  ``d_t = c + φ d_{t−1} + θ e_{t−1} + e_t``; refitted every ``refit_every`` samples over
  the last ``window`` by Hannan–Rissanen's two regressions (a long AR for the
  innovations, then least squares of ``d_t`` on ``d_{t−1}`` and ``e_{t−1}``), a closed
  form (two normal-equation solves, a few dozen µs a refit on a quiet core, run on
  the learning path after the answer is sent). statsmodels' exact-likelihood ARIMA is
  more accurate on periodic and heavy-tailed traces and equal on steps and ramps, at
  about 0.3 s per sample on this machine (``benchmarks/route_forecast.py`` measures
  both): far too much for the gateway's loop.
* :class:`Level` — the mean since the last change point (less noisy than an EWMA
  between steps), which bets that a far-off sample is a new level when the trace's
  far-off samples have mostly been steps, and learns which from the next sample.
* :class:`PageHinkley` — the Page–Hinkley test (Page 1954; Hinkley 1971) on the
  relative residuals of the forecast in use: an alarm when their cumulative sum beyond
  ``delta`` exceeds ``threshold`` either way. ``Adaptive`` then restarts every filter
  at the new level (flat) and scores them afresh.

All predict the next sample (``mean``) with a spread (``sd``); a sample more than
``CLIP_K`` spreads off moves them by at most that much (Huber's clipping), so a lone
outlier — a stall, a GC pause — does not drag the level or the slope; a lasting
shift is the detector's to catch.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Arima", "Holt", "Level", "PageHinkley"]

CLIP_K = 3.0  # spreads at which a sample's pull is clipped
REL_FLOOR = 0.02  # the spread is never taken below 2 % of the level


def _clipped(err: float, sd: float, level: float) -> float:
    bound = CLIP_K * max(sd, REL_FLOOR * abs(level), 1e-12)
    return min(max(err, -bound), bound)


@dataclass
class Holt:
    """Holt's linear trend with smoothing ``alpha`` (level) and ``beta`` (slope)."""

    alpha: float = 0.4
    beta: float = 0.15
    level: float | None = None
    trend: float = 0.0
    var: float = 0.0
    n: int = 0

    @property
    def mean(self) -> float | None:
        """The next sample's prediction, ``ℓ + b`` (None before the first sample)."""
        return None if self.level is None else self.level + self.trend

    @property
    def sd(self) -> float:
        return math.sqrt(self.var)

    def update(self, z: float) -> None:
        """Take one sample."""
        if self.level is None:
            self.level, self.n = z, 1
            return
        pred = self.level + self.trend
        err = z - pred
        self.var = (1 - self.alpha) * (self.var + self.alpha * err * err)
        err = _clipped(err, self.sd, pred) if self.n >= 3 else err
        level = pred + self.alpha * err
        self.trend += self.beta * (level - self.level - self.trend)
        self.level = level
        self.n += 1

    def reset(self, level: float) -> None:
        """A level shift: start again from ``level``, flat."""
        self.level, self.trend = level, 0.0


@dataclass
class Arima:
    """ARIMA(1,1,1) refitted by Hannan–Rissanen every ``refit_every`` samples over the last
    ``window`` (a random walk, ``φ = θ = c = 0``, until the first fit)."""

    window: int = 64
    refit_every: int = 16
    ar_order: int = 4  # the long AR of the first regression
    xs: deque[float] = field(default_factory=deque)
    phi: float = 0.0
    theta: float = 0.0
    c: float = 0.0
    e_last: float = 0.0
    d_hat: float = 0.0  # the predicted next difference
    var: float = 0.0
    n: int = 0
    since_fit: int = 0
    fits: int = 0

    @property
    def mean(self) -> float | None:
        return self.xs[-1] + self.d_hat if self.xs else None

    @property
    def sd(self) -> float:
        return math.sqrt(self.var)

    def update(self, z: float) -> None:
        """Take one sample; refit when due (a few dozen µs, on the learning path)."""
        if self.xs:
            pred = self.xs[-1] + self.d_hat
            err = z - pred
            self.var = 0.75 * (self.var + 0.25 * err * err)
            e = _clipped(err, self.sd, pred) if self.n >= 3 else err
            z = pred + e  # a clipped sample: a lone outlier is not the new level
            d = z - self.xs[-1]
            self.e_last = e
        else:
            d = 0.0
        self.xs.append(z)
        if len(self.xs) > self.window:
            self.xs.popleft()
        self.n += 1
        self.since_fit += 1
        if self.since_fit >= self.refit_every and len(self.xs) >= 4 * self.ar_order + 8:
            self.fit()
        self.d_hat = self.c + self.phi * d + self.theta * self.e_last

    def fit(self) -> None:
        """Hannan–Rissanen over the window's differences; φ and θ kept inside (−0.95, 0.95).

        Both regressions by their normal equations (``XᵀX β = Xᵀy``, 5×5 then 3×3): the
        SVD of a least-squares solver costs several times more on so few rows."""
        self.since_fit = 0
        d = np.diff(np.asarray(self.xs, dtype=float))
        p = self.ar_order
        if len(d) < 2 * p + 4 or not np.any(d):
            return
        rows = len(d) - p
        x = np.ones((rows, p + 1))
        for k in range(p):
            x[:, k + 1] = d[p - k - 1 : len(d) - k - 1]
        ar = _solve(x, d[p:])
        if ar is None:
            return
        e = d[p:] - x @ ar
        x2 = np.ones((rows - 1, 3))
        x2[:, 1], x2[:, 2] = d[p:-1], e[:-1]
        beta = _solve(x2, d[p + 1 :])
        if beta is not None and np.isfinite(beta).all():
            self.c = float(beta[0])
            self.phi = float(min(max(beta[1], -0.95), 0.95))
            self.theta = float(min(max(beta[2], -0.95), 0.95))
            self.fits += 1

    def reset(self, level: float) -> None:
        """A level shift: the window starts again at ``level`` (the fitted φ and θ are
        kept until the next fit, the drift is not)."""
        self.xs.clear()
        self.xs.append(level)
        self.c = self.d_hat = self.e_last = 0.0


def _solve(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """Least squares by the normal equations, lightly regularised (None if singular)."""
    xtx = x.T @ x
    xtx.flat[:: len(xtx) + 1] += 1e-12 * (np.trace(xtx) + 1.0)
    try:
        return np.linalg.solve(xtx, x.T @ y)
    except np.linalg.LinAlgError:
        return None


@dataclass
class PageHinkley:
    """Two-sided Page–Hinkley test on the relative one-step residuals ``r = (z − ẑ)/ẑ`` of
    the forecast in use: ``m⁺ ← max(0, m⁺ + r − δ)`` and ``m⁻ ← max(0, m⁻ − r − δ)``
    (the running form of ``m_t − min m``, residuals having mean zero while the forecast
    holds); an alarm when either exceeds ``threshold``.

    On the residuals, not the samples: a ramp that Holt follows leaves small residuals
    and raises no alarm; a level the forecasts have not reached leaves residuals of one
    sign. Each residual is clipped at ``clip`` so that one wild sample cannot raise an
    alarm alone: with the defaults a level that doubled is flagged at its third sample
    if no filter has caught it by then, and 5 % noise practically never.
    """

    delta: float = 0.05
    threshold: float = 1.2
    clip: float = 0.5
    up: float = 0.0
    down: float = 0.0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=3))

    def update(self, r: float, z: float) -> bool:
        """Take one residual ``r`` and its sample ``z``; True on an alarm (the test then
        restarts, and :meth:`level` is the new level)."""
        self.recent.append(z)
        dev = min(max(r, -self.clip), self.clip)
        self.up = max(0.0, self.up + dev - self.delta)
        self.down = max(0.0, self.down - dev - self.delta)
        if self.up > self.threshold or self.down > self.threshold:
            self.up = self.down = 0.0
            return True
        return False

    def level(self) -> float:
        """The new level after an alarm: the median of the last three samples."""
        xs = sorted(self.recent)
        return xs[len(xs) // 2]

    def restart(self) -> None:
        self.up = self.down = 0.0
        self.recent.clear()


@dataclass
class Level:
    """The mean since the last change point, and a step judged on its first sample.

    Between change points the best forecast of a flat level under white noise is the
    mean of every sample since the change (error variance ``σ²(1 + 1/n)``; an EWMA of
    weight ``α`` keeps ``σ²(1 + α/(2 − α))``, 14 % more at α 0.25). After ``span``
    samples the mean becomes an EWMA of weight ``1/span`` so that a slow drift is
    still followed. The relative noise variance ``rel_var`` is learned across segments
    (a server's noise does not change with its level).

    A sample more than ``k`` spreads off is either a lone outlier or the first of a
    new level; the next sample tells which (nearer the old level: an outlier, dropped;
    nearer the new sample: a step, the new segment starts with both). Until then the
    forecast is the cheaper bet in expected relative error: the new sample ``z`` if
    ``p·old > (1 − p)·z``, else the old level, where ``p`` is the share of such samples
    that turned out to be steps (a Beta(1, 1) count, both counts decaying by ``decay``
    per verdict so that the trace's recent character rules). A trace of steps is then
    followed from a step's second sample, a heavy-tailed one keeps its level.
    """

    span: int = 32
    k: float = 4.0
    decay: float = 0.9
    mean_old: float | None = None  # the current segment's mean
    n: int = 0  # samples in the segment (capped at span)
    rel_var: float = 0.0  # relative residual variance, pooled over segments
    seen: int = 0  # samples taken (far-off samples are judged from the third on)
    pending: float | None = None  # a far-off sample awaiting the next one's verdict
    steps: float = 1.0
    outliers: float = 1.0
    stepped: bool = False  # the last sample confirmed a step (the segment restarted)

    @property
    def mean(self) -> float | None:
        """The next sample's forecast (None before the first sample)."""
        if self.betting:
            return self.pending
        return self.mean_old

    @property
    def betting(self) -> bool:
        """Whether the forecast is a far-off sample's new level, before its verdict."""
        return self.pending is not None and self._bet_on_step(self.pending)

    @property
    def sd(self) -> float:
        """Predictive standard deviation: the relative noise at the forecast's level."""
        if self.mean_old is None:
            return 0.0
        level = self.mean if self.mean is not None else self.mean_old
        return abs(level) * math.sqrt(self.rel_var * (1 + 1 / max(self.n, 1)))

    def _bet_on_step(self, z: float) -> bool:
        assert self.mean_old is not None
        p = self.steps / (self.steps + self.outliers)
        return p * abs(self.mean_old) > (1 - p) * abs(z)

    def _far(self, z: float) -> bool:
        assert self.mean_old is not None
        spread = abs(self.mean_old) * max(math.sqrt(self.rel_var * (1 + 1 / self.n)), REL_FLOOR)
        return self.seen >= 3 and abs(z - self.mean_old) > self.k * spread

    def update(self, z: float) -> None:
        """Take one sample."""
        if self.mean_old is None:
            self.mean_old, self.n, self.seen = z, 1, 1
            return
        self.seen += 1
        self.stepped = False
        if self.pending is not None:
            first, self.pending = self.pending, None
            if abs(z - first) < abs(z - self.mean_old):  # a step: the segment restarts
                self.steps = self.decay * self.steps + 1
                self.outliers *= self.decay
                self.mean_old, self.n, self.stepped = 0.5 * (first + z), 2, True
                return
            self.outliers = self.decay * self.outliers + 1
            self.steps *= self.decay
        if self._far(z):
            self.pending = z
            return
        self._take(z)

    def _take(self, z: float) -> None:
        assert self.mean_old is not None
        rel = (z - self.mean_old) / max(abs(self.mean_old), 1e-12)
        self.rel_var += (rel * rel / (1 + 1 / self.n) - self.rel_var) / min(self.seen, self.span)
        self.n = min(self.n + 1, self.span)
        self.mean_old += (z - self.mean_old) / self.n

    def reset(self, level: float) -> None:
        """A level shift seen by another detector: restart at ``level``."""
        self.pending, self.stepped = None, False
        self.mean_old, self.n = level, 1
        self.seen = max(self.seen, 1)
