"""Replay decisions logs of ``route_engine.py`` through the service fit under noise models.

Live runs on a shared machine differ by what the host did meanwhile more than by the
model, so noise models are compared on the *same* timings: each log (``route_engine.py
--log FILE``) is replayed burst by burst — every request predicted from what was learned
before its burst (its service from the site's fit, the queue as the sum of the
predictions ahead of it in the burst; the engine serves one at a time), then the burst's
answers learned in the order they ended, as the gateway learns them
(:func:`tierwise.route.learn.learn_service`'s observations). Reported per log: the median
and p90 absolute whole-request error after the first 20 requests, per model.

Then where the live error came from, per log, from the gateway's own predictions: each
request's log ratio ``ln(actual / predicted)`` split into its burst's median (the host's
speed while that burst ran: every request in it, whatever its shape, off by about the
same factor) and the rest (the model's error given the burst's speed). Printed: the
live error; the error left if each burst's factor were known (the model's shape, queue
and token counts); the error of the burst factors alone under the best constant scale
in hindsight (no predictor that does not know a burst's factor before it starts does
better on median, if the factors are independent from burst to burst); and the
correlation of consecutive bursts' factors (near zero: the last burst says nothing of
the next).

    python benchmarks/route_engine_replay.py LOG [LOG ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from _args import run

from tierwise.errors import TierwiseError
from tierwise.route.estimate import LinearFit
from tierwise.route.predict import service_features

PREFILL_PRIOR_S = 0.6e-3  # route_engine.py's priors
STEP_PRIOR_S = 16e-3
MODELS = {  # name: LinearFit settings of the service fit
    "15 % noise, no paces (now)": {"rel_noise": 0.15, "pace_alpha": 0.0},
    "5 % noise, paces 0.2 (before)": {"rel_noise": 0.05, "pace_alpha": 0.2},
    "15 % noise, paces 0.1": {"rel_noise": 0.15, "pace_alpha": 0.1},
}
BURST_GAP_S = 0.2  # requests decided closer than this are one burst


def bursts(path: Path) -> list[list[dict[str, Any]]]:
    """The log's answered requests in the order they were decided, grouped in bursts."""
    try:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise TierwiseError(f"{path}: not a readable decisions log ({exc})") from None
    ok = sorted((r for r in records if r.get("outcome") == "ok"), key=lambda r: r["ts"])
    out: list[list[dict[str, Any]]] = []
    for r in ok:
        if out and r["ts"] - out[-1][-1]["ts"] <= BURST_GAP_S:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def fit(settings: dict[str, float]) -> LinearFit:
    """The site's service fit as :func:`tierwise.route.predict.site_model` builds it."""
    p, d = PREFILL_PRIOR_S * 1e3, STEP_PRIOR_S * 1e2
    return LinearFit(theta=[0.0, p, 0.0, d, 0.0], prior_sd=[0.05, p, p, d, d],
                     groups=[0, 0, 0, 1, 1], paces=[1.0, 1.0], **settings)  # fmt: skip


def service_s(f: LinearFit, r: dict[str, Any]) -> float:
    first, rest = service_features(r["prompt_tokens"], r["output_tokens"])
    return max(f.predict(first), 0.0) + max(f.predict(rest), 0.0)


def learn(f: LinearFit, r: dict[str, Any]) -> None:
    """The observations the gateway takes from one answer (loopback: no network lead)."""
    s, n = r["stages"], r["prompt_tokens"]
    k = max(s["tokens_out"], 1)
    if r["stream"] and s["first_token_s"] is not None:
        first, rest = service_features(n, k)
        f.update(first, s["first_token_s"])
        if k >= 2 and s["last_token_s"] is not None:
            f.update(rest, s["last_token_s"] - s["first_token_s"])
    elif not r["stream"] and s["tokens_out"] > 0:
        first, rest = service_features(n, k)
        f.update([a + b for a, b in zip(first, rest, strict=True)], s["end_s"])


def replay(log: list[list[dict[str, Any]]], settings: dict[str, float]) -> list[float]:
    """Absolute relative errors of the whole-request predictions, in decision order."""
    f, errors = fit(settings), []
    for burst in log:
        queue_s = 0.0
        for r in burst:
            own_s = service_s(f, r)
            errors.append(abs(queue_s + own_s - r["actual_s"]) / r["actual_s"])
            queue_s += own_s
        for r in sorted(burst, key=lambda r: r["ts"] + r["actual_s"]):
            learn(f, r)
    return errors


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(int(q * len(values)), len(values) - 1)]


def sources(log: list[list[dict[str, Any]]]) -> dict[str, float]:
    """The live error after 20 requests split into the burst factor and the rest."""
    ratios = [
        (i, math.log(r["actual_s"] / r["predicted"][r["chosen"]]["time_s"]))
        for i, burst in enumerate(log)
        for r in burst
    ]
    by_burst = [statistics.median(v for j, v in ratios if j == i) for i in range(len(log))]
    after = ratios[20:]
    live = [abs(math.exp(-v) - 1) for _, v in after]
    known = [abs(math.exp(by_burst[i] - v) - 1) for i, v in after]
    grid = [c / 200 for c in range(-200, 201)]
    floor = min(statistics.median(abs(math.exp(c - by_burst[i]) - 1) for i, _ in after)
                for c in grid)  # fmt: skip
    lag = statistics.correlation(by_burst[:-1], by_burst[1:]) if len(log) > 2 else math.nan
    return {"live": statistics.median(live), "live_p90": pct(live, 0.9),
            "known": statistics.median(known), "known_p90": pct(known, 0.9),
            "floor": floor, "lag1": lag, "bursts": len(log)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", type=Path, help="decisions logs of route_engine.py")
    args = ap.parse_args()
    logs = [(path.name, bursts(path)) for path in args.logs]
    print("after 20 requests: median / p90 absolute error")
    print(f"{'model':32s}" + "".join(f"  {name[:20]:>20s}" for name, _ in logs))
    for model, settings in MODELS.items():
        cells = []
        for _, log in logs:
            e = replay(log, settings)[20:]
            cells.append(f"{statistics.median(e):6.1%} / {pct(e, 0.9):6.1%}" if e else "—")
        print(f"{model:32s}" + "".join(f"  {c:>20s}" for c in cells))
    print("\nwhere the live error came from, after 20 requests (median / p90):")
    for name, log in logs:
        s = sources(log)
        print(f"  {name}: live {s['live']:.1%} / {s['live_p90']:.1%}; each burst's factor "
              f"known {s['known']:.1%} / {s['known_p90']:.1%}; burst factors alone, best "
              f"constant {s['floor']:.1%}; consecutive bursts' factors correlate "
              f"{s['lag1']:+.2f} ({s['bursts']} bursts)")  # fmt: skip


if __name__ == "__main__":
    run(main)
