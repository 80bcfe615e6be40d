"""Forecasters against EWMA: one-step-ahead error and cost per update, per trace.

Each estimator predicts the next sample before it sees it. The estimators: the
gateway's EWMA and Kalman filter (:mod:`tierwise.route.estimate`), Holt's linear trend
and ARIMA(1,1,1) refitted by Hannan–Rissanen over a sliding window
(:mod:`tierwise.route.forecast`), ``chosen`` — ``Adaptive``, the gateway's estimate:
all four side by side, the one with the smallest recent error used, reset by the
Page–Hinkley detector on a level shift — and, for cost and error on the first
``--statsmodels-samples`` samples of each trace, statsmodels' exact-likelihood
ARIMA(1,1,1) refitted over the same window at the same pace.

Traces: synthetic (``--samples`` each, 2 % multiplicative noise unless said):
``step`` (level ×2, ×0.4, ×1.5 at each quarter), ``ramp`` (+1.5 %/sample for a
quarter, flat, −1.5 %/sample, flat), ``periodic`` (±30 % over 40 samples), ``heavy
tail`` (Student-t, 2 degrees of freedom, 3 % scale), ``noisy level`` (5 % noise: the
EWMA's home ground); and recorded: the decisions log of a ``tierwise lab route
--loopback`` run (``--lab-requests`` requests under the predictive strategy; its
world changes cloud uplink, edge down, device 3× slower), per site and stage — the
decode step (server decode / tokens) and the time to headers less the server's part
(network up) — and any decisions logs given with ``--log``.

Goal (issue 33): on ``step`` and ``ramp`` the chosen forecaster's MAPE ≤ 0.7× EWMA's;
on no trace worse than EWMA by more than 5 %.

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
from tierwise.route.forecast import Arima, Holt

WARMUP = 5  # samples before errors count (every estimator is still at its first sample)
ESTIMATORS: dict[str, Callable[[], object]] = {
    "ewma": Ewma,
    "kalman": Kalman,
    "holt": Holt,
    "arima": Arima,
    "chosen": lambda: Adaptive(1.0),
}


def synthetic(kind: str, n: int, rng: np.random.Generator) -> list[float]:
    """One synthetic trace of ``n`` samples."""
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
    else:  # noisy level
        level, noise = np.ones(n), 1 + rng.normal(0, 0.05, n)
    return list(level * noise)


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


def traces(args: argparse.Namespace) -> dict[str, list[float]]:
    rng = np.random.default_rng(args.seed)
    kinds = ("step", "ramp", "periodic", "heavy tail", "noisy level")
    out = {kind: synthetic(kind, args.samples, rng) for kind in kinds}
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
    return out


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
    names = list(ESTIMATORS)
    n_sm = args.statsmodels_samples
    print(f"{'trace':28s}" + "".join(f"{n:>13s}" for n in names) + "   chosen/ewma")
    for trace, xs in traces(args).items():
        row = {n: score(make, xs) for n, make in ESTIMATORS.items()}
        if n_sm:  # on the first n_sm samples: the closed form and statsmodels side by side
            row[f"arima@{n_sm}"] = score(Arima, xs[:n_sm])
            row[f"statsmodels@{n_sm}"] = statsmodels_score(xs[:n_sm])
        results[trace] = row
        base = row["ewma"]["mape"]
        ratio = f"{row['chosen']['mape'] / base:5.2f}" if base > 0 else "  —  "
        cells = "".join(f"{row[n]['mape'] * 100:6.2f}/{row[n]['p90'] * 100:5.1f}" for n in names)
        print(f"{trace[:28]:28s}{cells}   {ratio}")
    print("cells: MAPE % / p90 %")
    if n_sm:
        print(f"\nARIMA(1,1,1) on the first {n_sm} samples: Hannan–Rissanen against statsmodels")
        for trace, row in results.items():
            hr, sm = row[f"arima@{n_sm}"], row[f"statsmodels@{n_sm}"]
            print(f"{trace[:28]:28s} {hr['mape'] * 100:6.2f}/{hr['p90'] * 100:5.1f}"
                  f"  {sm['mape'] * 100:6.2f}/{sm['p90'] * 100:5.1f}")  # fmt: skip
    print("\nµs per update (median over traces):")
    for n in next(iter(results.values())):
        us = np.median([r[n]["us_per_update"] for r in results.values()])
        print(f"  {n:16s} {us:9.1f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    run(main)
