"""Forecasters against EWMA: one-step-ahead error and cost per update, per trace.

Each estimator predicts the next sample before it sees it. The estimators: a plain
(textbook, unguarded) EWMA of the same weight, the gateway's EWMA (with its outlier
guard) and Kalman filter (:mod:`tierwise.route.estimate`), Holt's linear trend,
ARIMA(1,1,1) refitted by Hannan–Rissanen over a sliding window and the mean since the
last change point with its one-sample step bet (:mod:`tierwise.route.forecast`),
``chosen`` — ``Adaptive``, the gateway's estimate: all five side by side, the one with
the smallest recent error used, reset by the Page–Hinkley detector on a level shift —
and, on synthetic traces, ``known level``: a forecaster told the true level of every
past sample (the noise and each step's first sample are all it pays; no forecaster
that does not know when the level will move does better on a step trace). For cost and
error on the first
``--statsmodels-samples`` samples of each trace, statsmodels' exact-likelihood
ARIMA(1,1,1) refitted over the same window at the same pace.

Traces: synthetic (``--samples`` each, 2 % multiplicative noise unless said):
``step`` (level ×2, ×0.4, ×1.5 at each quarter), ``ramp`` (+1.5 %/sample for a
quarter, flat, −1.5 %/sample, flat), ``periodic`` (±30 % over 40 samples), ``heavy
tail`` (Student-t, 2 degrees of freedom, 3 % scale), ``noisy level`` (5 % noise: the
EWMA's home ground), ``frequent shifts`` (the level ×1.3–2.5 up or down every 20–40
samples: a server whose load changes every few dozen requests); and recorded: the
decisions log of a ``tierwise lab route --loopback`` run (``--lab-requests`` requests
under the predictive strategy; its world changes cloud uplink, edge down, device 3×
slower), per site and stage — the decode step (server decode / tokens) and the time to
headers less the server's part (network up) — and any decisions logs given with
``--log``.

Goal (issue 33): on ``step`` and ``ramp`` the chosen forecaster's MAPE ≤ 0.7× EWMA's;
on no trace worse than EWMA by more than 5 % (printed against both EWMAs).

    python benchmarks/route_forecast.py [--samples 600] [--seed 1] [--lab-requests 120]
                                        [--save-log lab.jsonl] [--log route-decisions.jsonl ...]
                                        [--statsmodels-samples 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _args import positive_int, run

from tierwise.route.estimate import Adaptive, Ewma, Kalman
from tierwise.route.forecast import Arima, Holt, Level

WARMUP = 5  # samples before errors count (every estimator is still at its first sample)
KINDS = ("step", "ramp", "periodic", "heavy tail", "noisy level", "frequent shifts")


class PlainEwma:
    """The textbook EWMA, ``m ← m + α(z − m)``, no outlier guard: the common peer."""

    def __init__(self, alpha: float = 0.25) -> None:
        self.alpha, self.mean = alpha, None

    def update(self, z: float) -> None:
        self.mean = z if self.mean is None else self.mean + self.alpha * (z - self.mean)


class KnownLevel:
    """Told the true level of each sample once it has been seen: it predicts the last
    one (a bound for forecasters that do not know when the level moves)."""

    def __init__(self, levels: list[float]) -> None:
        self.levels, self.at, self.mean = levels, 0, None

    def update(self, z: float) -> None:
        self.mean = self.levels[self.at]
        self.at += 1


ESTIMATORS: dict[str, Callable[[], object]] = {
    "plain ewma": PlainEwma,
    "ewma": Ewma,
    "kalman": Kalman,
    "holt": Holt,
    "arima": Arima,
    "level": Level,
    "chosen": lambda: Adaptive(1.0),
}


def synthetic(kind: str, n: int, rng: np.random.Generator) -> list[float]:
    """One synthetic trace of ``n`` samples."""
    level, noise = synthetic_parts(kind, n, rng)
    return list(level * noise)


def synthetic_parts(kind: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One synthetic trace's true level and multiplicative noise."""
    i = np.arange(n)
    noise = 1 + rng.normal(0, 0.02, n)
    q = n // 4
    if kind == "step":
        level = np.select([i < q, i < 2 * q, i < 3 * q], [1.0, 2.0, 0.8], 1.2)
    elif kind == "ramp":
        steps = np.select([i < q, i < 2 * q, i < 3 * q], [0.0, 1.0, 0.0], -1.0)
        level = 1.015 ** np.cumsum(steps)
    elif kind == "periodic":
        level = 1 + 0.3 * np.sin(2 * np.pi * i / 40)
    elif kind == "heavy tail":
        level, noise = np.ones(n), np.clip(1 + 0.03 * rng.standard_t(2, n), 0.2, None)
    elif kind == "noisy level":
        level, noise = np.ones(n), 1 + rng.normal(0, 0.05, n)
    else:  # frequent shifts
        level = shifts(n, rng)
    return level, noise


def shifts(n: int, rng: np.random.Generator) -> np.ndarray:
    """A level that moves ×1.3–2.5 (log-uniform) up or down every 20–40 samples."""
    out: list[float] = []
    level = 1.0
    while len(out) < n:
        out += [level] * int(rng.integers(20, 41))
        level *= float(np.exp(rng.uniform(np.log(1.3), np.log(2.5)) * rng.choice([-1, 1])))
    return np.asarray(out[:n])


def recorded(records: list[dict]) -> dict[str, list[float]]:
    """Per site and stage, the series a decisions log holds (requests in order)."""
    out: dict[str, list[float]] = {}
    for r in records:
        site, st = r.get("chosen"), r.get("stages") or {}
        server = st.get("server_s") or {}
        if not site or r.get("outcome") != "ok" or not server:
            continue
        if st.get("tokens_out") and server.get("decode"):
            out.setdefault(f"{site} decode step", []).append(server["decode"] / st["tokens_out"])
        up = st["headers_s"] - sum(server.get(k, 0.0) for k in ("queue", "prefill", "decode"))
        if up > 0:
            out.setdefault(f"{site} network up", []).append(up)
    # a constant series (the stand-in's decode step: Server-Timing is tokens × step) says
    # nothing about a forecaster
    return {k: v for k, v in out.items() if len(v) >= 20 and max(v) > min(v)}


def score(make: Callable[[], object], xs: list[float]) -> dict[str, float]:
    """MAPE and p90 of the relative one-step error, and µs per update."""
    f, errs, spent = make(), [], 0.0
    for k, x in enumerate(xs):
        guess = f.value if isinstance(f, Adaptive) else f.mean
        if k >= WARMUP and guess is not None:
            errs.append(abs(x - guess) / abs(x))
        t = time.perf_counter()
        f.update(x)
        spent += time.perf_counter() - t
    e = np.asarray(errs)
    return {"mape": float(e.mean()), "p90": float(np.quantile(e, 0.9)),
            "us_per_update": spent / len(xs) * 1e6}  # fmt: skip


def statsmodels_score(xs: list[float], window: int = 64, every: int = 8) -> dict[str, float]:
    """statsmodels' ARIMA(1,1,1), refitted every ``every`` samples over ``window``; between
    fits the fitted model is extended with the new samples (no refit) to forecast."""
    import warnings

    from statsmodels.tsa.arima.model import ARIMA

    errs, spent, fit, since = [], 0.0, None, []
    for k, x in enumerate(xs):
        if fit is not None and k >= WARMUP:
            t = time.perf_counter()
            guess = float(fit.append(since, refit=False).forecast(1)[0]) if since else float(
                fit.forecast(1)[0])  # fmt: skip
            spent += time.perf_counter() - t
            errs.append(abs(x - guess) / abs(x))
        since.append(x)
        if k >= 32 and (fit is None or len(since) >= every):
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit = ARIMA(np.asarray(xs[max(0, k + 1 - window) : k + 1]), order=(1, 1, 1)).fit()
            spent += time.perf_counter() - t
            since = []
    e = np.asarray(errs) if errs else np.asarray([math.nan])
    return {"mape": float(e.mean()), "p90": float(np.quantile(e, 0.9)),
            "us_per_update": spent / len(xs) * 1e6}  # fmt: skip


def traces(args: argparse.Namespace) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """The traces, and the true level of the synthetic ones."""
    rng = np.random.default_rng(args.seed)
    out, levels = {}, {}
    for kind in KINDS:
        level, noise = synthetic_parts(kind, args.samples, rng)
        out[kind], levels[kind] = list(level * noise), list(level)
    if args.lab_requests:
        from tierwise.lab.world.loopback import run_world

        runs, _ = run_world(args.lab_requests, args.seed, ["predictive"])
        if args.save_log:  # the run's decisions log, to be read again with --log
            lines = (json.dumps(r) + "\n" for r in runs["predictive"])
            args.save_log.write_text("".join(lines), encoding="utf-8")
        out.update({f"lab: {k}": v for k, v in recorded(runs["predictive"]).items()})
    for path in args.log:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        got = recorded([json.loads(line) for line in lines if line.strip()])
        out.update({f"{Path(path).name}: {k}": v for k, v in got.items()})
    return out, levels


def _cell(s: dict[str, float] | None) -> str:
    return f"{s['mape'] * 100:7.2f}/{s['p90'] * 100:5.1f}" if s else f"{'—':>13s}"


def _ratio(row: dict[str, dict[str, float]], peer: str) -> str:
    base = row[peer]["mape"]
    return f"{row['chosen']['mape'] / base:.2f}" if base > 0 else "—"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=positive_int, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lab-requests", type=int, default=120, help="0: no lab run")
    ap.add_argument("--statsmodels-samples", type=int, default=200, help="0: skip statsmodels")
    ap.add_argument("--log", action="append", default=[], help="a decisions log (repeatable)")
    ap.add_argument("--save-log", type=Path, default=None, help="keep the lab run's log here")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    results: dict[str, dict] = {}
    names = [*ESTIMATORS, "known level"]
    n_sm = args.statsmodels_samples
    head = "".join(f"{n:>13s}" for n in names)
    print(f"{'trace':24s}{head}   chosen/ewma  chosen/plain")
    series, levels = traces(args)
    for trace, xs in series.items():
        row = {n: score(make, xs) for n, make in ESTIMATORS.items()}
        if trace in levels:
            row["known level"] = score(lambda lv=levels[trace]: KnownLevel(lv), xs)
        if n_sm:  # on the first n_sm samples: the closed form and statsmodels side by side
            row[f"arima@{n_sm}"] = score(Arima, xs[:n_sm])
            row[f"statsmodels@{n_sm}"] = statsmodels_score(xs[:n_sm])
        results[trace] = row
        ratios = "".join(f"{_ratio(row, peer):>12s}  " for peer in ("ewma", "plain ewma"))
        cells = "".join(_cell(row.get(n)) for n in names)
        print(f"{trace[:24]:24s}{cells}   {ratios}")
    print("cells: MAPE % / p90 %")
    if n_sm:
        print(f"\nARIMA(1,1,1) on the first {n_sm} samples: Hannan–Rissanen against statsmodels")
        for trace, row in results.items():
            hr, sm = row[f"arima@{n_sm}"], row[f"statsmodels@{n_sm}"]
            print(f"{trace[:28]:28s} {hr['mape'] * 100:6.2f}/{hr['p90'] * 100:5.1f}"
                  f"  {sm['mape'] * 100:6.2f}/{sm['p90'] * 100:5.1f}")  # fmt: skip
    print("\nµs per update (median over traces):")
    for n in next(iter(results.values())):
        us = np.median([r[n]["us_per_update"] for r in results.values() if n in r])
        print(f"  {n:16s} {us:9.1f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    run(main)
