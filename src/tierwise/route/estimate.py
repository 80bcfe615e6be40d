"""Online estimates of a site's path and server from the timing of forwarded requests.

§12.5.3: measure, calibrate the bound by the measured step (§12.5.2's 2.83×), and
re-evaluate when conditions change. Each quantity (RTT, up- and downlink rate,
queueing, prefill and decode factors) is tracked by filters run side by side — an
EWMA and a scalar Kalman filter (random walk) here, Holt, ARIMA(1,1,1) and the mean
since the last change point from :mod:`tierwise.route.forecast` — and the one whose
one-step-ahead prediction error has been smaller is used. The EWMA and the Kalman
filter ignore a single outlier (a sample more than ``OUTLIER_K`` predictive standard
deviations off) and jump to a new level after ``STEP_RUN`` outliers in a row on the
same side (a step change: a link that dropped from 80 to 3 Mbit/s, a server slowed 3×).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from tierwise.route.forecast import Arima, Holt, Level, PageHinkley

__all__ = ["FILTERS", "Adaptive", "Ewma", "Kalman", "normal_cdf"]

# Adaptive's filters; on equal error (as after a reset) the first
FILTERS = ("level", "kalman", "ewma", "holt", "arima")

OUTLIER_K = 4.0  # predictive standard deviations
STEP_RUN = 2  # outliers in a row on one side that mean the level moved
WARMUP = 3  # samples before outliers are judged
REL_FLOOR = 0.05  # predictive spread is never taken below 5 % of the level
SCORE_CAP = 0.5  # a sample counts at most this relative error in the choice (a shift hits all)
CHOICE_WARMUP = 10  # samples before the choice leaves the EWMA (the scores need evidence)
SCORE_WEIGHT = 0.05  # weight of the latest error in the choice (a memory of ~20 samples)


def normal_cdf(z: float) -> float:
    """Φ(z) of the standard normal."""
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


@dataclass
class _Guard:
    """Outlier and step detection shared by both filters."""

    run: list[float] = field(default_factory=list)

    def judge(self, z: float, mean: float, sd: float, n: int) -> str:
        """``"use"`` the sample, ``"skip"`` it (an outlier), or ``"jump"`` to a new level."""
        spread = max(sd, REL_FLOOR * abs(mean), 1e-12)
        if n < WARMUP or abs(z - mean) <= OUTLIER_K * spread:
            self.run.clear()
            return "use"
        if self.run and (self.run[-1] > mean) != (z > mean):
            self.run.clear()
        self.run.append(z)
        return "jump" if len(self.run) >= STEP_RUN else "skip"


@dataclass
class Ewma:
    """Exponentially weighted mean and variance (``alpha`` is the weight of a new sample)."""

    alpha: float = 0.25
    mean: float | None = None
    var: float = 0.0
    n: int = 0
    guard: _Guard = field(default_factory=_Guard)

    def update(self, z: float) -> None:
        """Take one sample."""
        if self.mean is None:
            self.mean, self.n = z, 1
            return
        verdict = self.guard.judge(z, self.mean, math.sqrt(self.var), self.n)
        if verdict == "skip":
            return
        if verdict == "jump":
            run = self.guard.run
            self.mean, self.var, self.n = statistics.fmean(run), statistics.pvariance(run), 1
            run.clear()
            return
        d = z - self.mean
        self.mean += self.alpha * d
        self.var = (1 - self.alpha) * (self.var + self.alpha * d * d)
        self.n += 1

    @property
    def sd(self) -> float:
        """Predictive standard deviation of the next sample."""
        return math.sqrt(self.var)


@dataclass
class Kalman:
    """Scalar Kalman filter of a random walk; measurement noise learned from innovations.

    ``drift`` is the process noise as a share of the level per sample.
    """

    drift: float = 0.02
    mean: float | None = None
    p: float = 0.0
    r: float = 0.0
    n: int = 0
    guard: _Guard = field(default_factory=_Guard)

    def update(self, z: float) -> None:
        """Take one sample: predict, gate, correct."""
        if self.mean is None:
            self.mean, self.p, self.r, self.n = z, (0.5 * z) ** 2, (0.1 * z) ** 2, 1
            return
        p_pred = self.p + (self.drift * self.mean) ** 2
        verdict = self.guard.judge(z, self.mean, math.sqrt(p_pred + self.r), self.n)
        if verdict == "skip":
            return
        if verdict == "jump":
            self.mean, self.p, self.n = self.guard.run[-1], p_pred + self.r, 1
            self.guard.run.clear()
            return
        innov = z - self.mean
        gain = p_pred / (p_pred + self.r) if p_pred + self.r > 0 else 1.0
        self.mean += gain * innov
        self.p = (1 - gain) * p_pred
        self.r = 0.8 * self.r + 0.2 * max(innov * innov - p_pred, (0.01 * z) ** 2)
        self.n += 1

    @property
    def sd(self) -> float:
        """Predictive standard deviation of the next sample."""
        return math.sqrt(self.p + self.r)


@dataclass
class Adaptive:
    """Five forecasters side by side (:data:`FILTERS`); the one with the smallest recent
    error is used — after ``CHOICE_WARMUP`` samples (until then the EWMA: a few scores
    choose by noise), and except while the level filter bets that a far-off sample is a
    new level (:class:`~tierwise.route.forecast.Level`: its forecast is then used).

    Before any sample the ``prior`` (the config's value) is the estimate, with
    ``prior_rel_sd`` relative uncertainty. Every quantity estimated here (times, rates,
    factors, shares, sizes, counts) is at least ``floor`` (0): a trend filter (Holt,
    ARIMA) extrapolates a falling series below it, so a forecast is taken — and scored —
    at no less than ``floor``. ``value``, ``sd`` and ``chosen`` are read
    many times per request (every site's prediction) and change only with a sample,
    so they are worked out then (:meth:`_refresh`), not on each read.
    """

    prior: float
    prior_rel_sd: float = 0.5
    floor: float = 0.0  # no quantity estimated here is below this
    ewma: Ewma = field(default_factory=Ewma)
    kalman: Kalman = field(default_factory=Kalman)
    holt: Holt = field(default_factory=Holt)  # trends (tierwise.route.forecast)
    arima: Arima = field(default_factory=Arima)  # ARIMA(1,1,1) over a sliding window
    level: Level = field(default_factory=Level)  # the mean since the last change point
    detector: PageHinkley = field(default_factory=PageHinkley)  # level shifts: reset all
    errors: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FILTERS, 0.0))
    value: float = field(init=False, default=0.0)  # the chosen filter's level, or the prior
    sd: float = field(init=False, default=0.0)  # its predictive standard deviation
    chosen: str = field(init=False, default="kalman")  # one of FILTERS: smallest recent error
    shifts: int = 0  # level shifts the detector flagged
    updates: int = 0  # samples taken

    def __post_init__(self) -> None:
        self._refresh()

    def _refresh(self) -> None:
        errors = self.errors
        self.chosen = min(FILTERS, key=lambda name: errors[name])  # ties: the first listed
        if self.updates < CHOICE_WARMUP:  # a few scores are noise: the EWMA until then
            self.chosen = "ewma"
        if self.level.betting:  # a far-off sample that is more likely a step than not
            self.chosen = "level"
        f = self.filter
        if f.mean is None:
            self.value, self.sd = self.prior, abs(self.prior) * self.prior_rel_sd
        else:
            self.value, self.sd = max(f.mean, self.floor), f.sd

    def update(self, z: float) -> None:
        """Score each filter's prediction of ``z``, then feed it to all; on a level shift
        (:class:`~tierwise.route.forecast.PageHinkley`) every filter restarts at the new
        level."""
        if not math.isfinite(z):
            return
        self.updates += 1
        shifted = False
        if self.filter.mean is not None:
            residual = (z - self.value) / max(abs(self.value), 1e-12)
            shifted = self.detector.update(residual, z)
        seen = self.ewma.n
        filters = (self.level, self.kalman, self.ewma, self.holt, self.arima)
        for name, f in zip(FILTERS, filters, strict=True):
            if (mean := f.mean) is not None:
                rel = abs(z - max(mean, self.floor)) / max(abs(z), 1e-12)
                self.errors[name] = (1 - SCORE_WEIGHT) * self.errors[name] + SCORE_WEIGHT * min(
                    rel, SCORE_CAP
                )
            f.update(z)
        if shifted:
            self._reset(self.detector.level())
        elif self.ewma.n == 1 and seen > 1:  # the outlier guard saw a step: the same news
            assert self.ewma.mean is not None
            self._reset(self.ewma.mean)
        self._refresh()

    def _reset(self, level: float) -> None:
        """A level shift: every filter restarts at ``level``, and is scored afresh (their
        errors across the shift say nothing about which will follow the new level)."""
        self.shifts += 1
        self.errors = dict.fromkeys(FILTERS, 0.0)
        self.detector.restart()
        for f in (self.ewma, self.kalman):
            f.mean = level
            f.guard.run.clear()
        self.kalman.p = max(self.kalman.p, (0.1 * level) ** 2)
        self.holt.reset(level)
        self.arima.reset(level)
        if not self.level.stepped:  # else it restarted at this step already, with both samples
            self.level.reset(level)

    def at_most(self, bound: float) -> None:
        """A censored observation: the quantity is at most ``bound`` (e.g. a rate from a
        transfer that timed out). An estimate above it is inconsistent and is moved to
        it in both filters, with the spread of a fresh level."""
        for f in (self.ewma, self.kalman):
            if f.mean is None:
                f.update(bound)
            elif f.mean > bound:
                f.mean = bound
                f.guard.run.clear()
        if self.kalman.p < (0.1 * bound) ** 2:
            self.kalman.p = (0.1 * bound) ** 2
        for g in (self.holt, self.arima, self.level):
            if g.mean is None or g.mean > bound:
                g.update(bound) if g.mean is None else g.reset(bound)
        self.detector.restart()
        self._refresh()

    @property
    def filter(self) -> Ewma | Kalman | Holt | Arima | Level:
        return getattr(self, self.chosen)

    @property
    def samples(self) -> int:
        return self.ewma.n


@dataclass
class LinearFit:
    """A linear model ``y = x·θ`` learned online: a Kalman filter over ``θ`` (random walk).

    Each observation carries its own noise, a share ``rel_noise`` of the value plus
    ``abs_noise`` seconds — so a 30 ms request counts as much as a 3 s one in relative
    terms, which is how the predictions are judged. ``forget`` inflates the covariance
    before each update (a weight of about ``1/(1 − forget)`` recent samples), so a server
    that slows down is followed. An observation may cover only some features (a
    stream's time to first token has no decode term): the others are zero in ``x``.
    """

    theta: list[float]
    prior_sd: list[float]
    rel_noise: float = 0.05
    abs_noise: float = 0.002
    forget: float = 0.03
    pace_alpha: float = 0.0  # weight of a new sample in the pace (0: no pace)
    groups: list[int] | None = None  # each feature's pace (default: one for all)
    paces: list[float] = field(default_factory=lambda: [1.0])  # observed over fitted, by group
    n: int = 0
    run: int = 0  # outliers in a row
    p: list[list[float]] = field(init=False)

    def __post_init__(self) -> None:
        k = len(self.theta)
        self.p = [[(self.prior_sd[i] ** 2 if i == j else 0.0) for j in range(k)] for i in range(k)]

    def predict(self, x: list[float]) -> float:
        """``x·θ`` at the current paces."""
        return sum(pace * f for pace, f in zip(self.paces, self._by_group(x), strict=True))

    def _fitted(self, x: list[float]) -> float:
        return sum(a * b for a, b in zip(self.theta, x, strict=True))

    def _by_group(self, x: list[float]) -> list[float]:
        out = [0.0] * len(self.paces)
        for i, (a, b) in enumerate(zip(self.theta, x, strict=True)):
            out[self.groups[i] if self.groups else 0] += a * b
        return out

    def update(self, x: list[float], y: float) -> None:
        """Take one observation ``y`` of ``x·θ``.

        With ``pace_alpha``, the shape (``θ``) is learned slowly and the paces quickly:
        a server sharing its cores with others runs 1.5× slower for a few seconds and
        then faster again — the ratio of what was observed to what was predicted moves
        the pace of each group of features the observation covers (an EWMA of its
        logarithm, weighted by the group's share), and ``θ`` learns ``y`` at the pace
        it was observed at."""
        if not math.isfinite(y) or not all(math.isfinite(v) for v in x):
            return
        if self.groups and len(self.paces) <= max(self.groups):
            self.paces = [1.0] * (max(self.groups) + 1)
        if self.pace_alpha > 0 and self.n >= WARMUP and y > 0:
            parts = self._by_group(x)
            fitted, predicted = sum(parts), self.predict(x)
            if fitted > 0 and predicted > 0:
                ratio = min(max(y / predicted, 0.5), 2.0)  # one sample moves it 2^alpha at most
                for g, part in enumerate(parts):
                    share = max(part, 0.0) / max(sum(max(q, 0.0) for q in parts), 1e-12)
                    self.paces[g] *= ratio ** (self.pace_alpha * share)
                y *= fitted / predicted  # at the pace it was observed at
        k, p = len(x), self.p
        if self.n:
            scale = 1.0 + self.forget
            p = self.p = [[v * scale for v in row] for row in p]
        px = [sum(p[i][j] * x[j] for j in range(k)) for i in range(k)]
        r = (self.rel_noise * abs(y) + self.abs_noise) ** 2
        s = sum(x[i] * px[i] for i in range(k)) + r
        innov = y - self._fitted(x)
        if self.n >= WARMUP and innov * innov > OUTLIER_K**2 * s:
            self.run += 1
            if self.run < STEP_RUN:
                return  # one wild sample (a GC pause, a swapped-out server): not the model
            p = self.p = [[v * 10.0 for v in row] for row in p]  # the level moved: relearn
            px = [v * 10.0 for v in px]
            s = sum(x[i] * px[i] for i in range(k)) + r
        self.run = 0
        gain = [v / s for v in px]
        self.theta = [t + g * innov for t, g in zip(self.theta, gain, strict=True)]
        self.p = [[p[i][j] - gain[i] * px[j] for j in range(k)] for i in range(k)]
        self.n += 1
