"""EWMA against Kalman: one-step-ahead prediction error on synthetic measurement series.

The series stand for what the gateway measures per request: a noisy level (RTT with
5 % jitter), a step (an uplink that drops 80 → 3 Mbit/s), a slow drift (a server
heating up, +1 % a request) and a level with rare outliers (stalls, 20× every 25th
sample). Each filter predicts the next sample before seeing it; the table gives the
median relative error, and what ``Adaptive`` (which uses whichever has done better
recently) achieves.

    python benchmarks/route_estimators.py [--samples 400] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import statistics

from _args import positive_int, run

from tierwise.route.estimate import Adaptive, Ewma, Kalman


def series(kind: str, n: int, rng: random.Random) -> list[float]:
    noise = [1 + rng.gauss(0, 0.05) for _ in range(n)]
    if kind == "noisy level":
        return [0.05 * x for x in noise]
    if kind == "step ÷27":
        return [(10e6 if i < n // 2 else 0.375e6) * x for i, x in enumerate(noise)]
    if kind == "drift +1 %/sample":
        return [0.02 * 1.01**i * x for i, x in enumerate(noise)]
    return [0.1 * (20 if i % 25 == 24 else 1) * x for i, x in enumerate(noise)]


def errors(make, xs: list[float]) -> list[float]:
    f, out = make(), []
    for x in xs:
        guess = f.value if isinstance(f, Adaptive) else f.mean
        if guess is not None and (not isinstance(f, Adaptive) or f.samples):
            out.append(abs(x - guess) / x)
        f.update(x)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=positive_int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(f"{'series':20s} {'EWMA':>8s} {'Kalman':>8s} {'Adaptive':>9s}  (median |error|)")
    kinds = ("noisy level", "step ÷27", "drift +1 %/sample", "outliers 20× 1 in 25")
    for kind in kinds:
        xs = series(kind, args.samples, random.Random(args.seed))
        row = [
            statistics.median(errors(m, xs)) * 100 for m in (Ewma, Kalman, lambda: Adaptive(1.0))
        ]
        print(f"{kind:20s} {row[0]:7.2f}% {row[1]:7.2f}% {row[2]:8.2f}%")


if __name__ == "__main__":
    run(main)
