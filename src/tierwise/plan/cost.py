"""Money beside time and energy: a site's cost, ``objective = "cost"`` and the Pareto front.

A site may carry three prices (plain numbers in one currency of the user's choice):

* ``cost_per_hour`` — a rented GPU, held for the whole task: ``price · T / 3600``;
* ``cost_per_token = [input, output]`` — an API's price per token: the context
  (``prefill_tokens``) is billed once, when the site takes the session over, and the
  generated tokens (``decode_tokens``) every round;
* ``egress_per_gb`` — data the site sends back: ``price · rounds · download / 10⁹``.

A site without prices costs 0 (hardware already owned: its energy is the cost).
``objective = "pareto"`` keeps the feasible options that no other feasible option
beats on time, energy and cost together; among those that meet the deadline it picks
the least ``Σ w_k · x_k / min x_k`` (each metric over its best value, weights from
``[decision] weights``, 1 each by default). The same array functions serve the
planner (one point) and the sweep (a chunk of points).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tierwise.scenario.schema import Site

__all__ = [
    "METRICS",
    "add_cost",
    "deadline_first",
    "pareto_front",
    "pick",
    "priced",
    "session_cost",
    "weighted_choice",
]

METRICS = ("time", "energy", "cost")
SECONDS_PER_HOUR = 3600.0
BYTES_PER_GB = 1e9  # decimal, as the units module's GB


def session_cost(
    site: Site, time_s: Any, input_tokens: Any, output_tokens: Any, egress_bytes: Any
) -> Any:
    """The task's cost on ``site`` (floats or arrays): rental + tokens + egress."""
    cost: Any = 0.0
    if site.cost_per_hour is not None:
        cost = cost + site.cost_per_hour * np.asarray(time_s) / SECONDS_PER_HOUR
    if site.cost_per_token is not None:
        price_in, price_out = site.cost_per_token
        cost = cost + price_in * np.asarray(input_tokens) + price_out * np.asarray(output_tokens)
    if site.egress_per_gb is not None and site.remote:
        cost = cost + site.egress_per_gb * np.asarray(egress_bytes) / BYTES_PER_GB
    return cost


def pareto_front(metrics: np.ndarray, feasible: np.ndarray) -> np.ndarray:
    """Which options no other feasible option beats: ``metrics`` (k, sites, m) → (sites, m).

    ``b`` beats ``a`` when it is at least as good on every metric and better on one.
    All pairs at once when that stays small (the planner's many sites), else per site.
    """
    n_sites, m = metrics.shape[1], metrics.shape[2]
    if n_sites * n_sites * m <= _PAIRS_AT_ONCE:
        a, b = metrics[:, :, None], metrics[:, None, :]  # (k, a, b, m)
        beats = np.all(b <= a, axis=0) & np.any(b < a, axis=0) & feasible[None, :, :]
        return feasible & ~beats.any(axis=1)
    front = feasible.copy()
    for a in range(n_sites):
        for b in range(n_sites):
            if a == b:
                continue
            no_worse = np.all(metrics[:, b] <= metrics[:, a], axis=0)
            better = np.any(metrics[:, b] < metrics[:, a], axis=0)
            front[a] &= ~(feasible[b] & no_worse & better)
    return front


_PAIRS_AT_ONCE = 4_000_000  # (a, b, point) triples compared in one array: ~100 MB of bools


def weighted_choice(metrics: np.ndarray, eligible: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Index of the eligible option with the least weighted, normalised score (−1: none).

    Each metric is divided by its least value among the eligible options, so the
    weights compare ratios, not seconds with joules; ties go to the earlier site.
    """
    masked = np.where(eligible[None], metrics, np.inf)
    best = masked.min(axis=1, keepdims=True)
    scale = np.where((best > 0) & np.isfinite(best), best, 1.0)
    ratio = np.where(weights[:, None, None] == 0, 0.0, metrics / scale)
    score = np.where(eligible, np.tensordot(weights, ratio, axes=1), np.inf)
    score = np.nan_to_num(score, nan=np.inf)
    choice = np.argmin(score, axis=0)
    return np.where(eligible.any(axis=0), choice, -1)


def priced(site: Site) -> bool:
    """Whether ``site`` carries any price."""
    return any(v is not None for v in (site.cost_per_hour, site.cost_per_token, site.egress_per_gb))


def add_cost(option: Any, costs: Any) -> None:
    """Put the option's cost in ``option.extra["cost"]`` when its site has a price."""
    if not priced(costs.site):
        return
    rounds = option.extra.get("rounds", 1)
    option.extra["cost"] = float(
        session_cost(
            costs.site,
            option.time_s,
            costs.input_tokens,
            rounds * costs.tokens_per_round,
            rounds * costs.egress_bytes_per_round,
        )
    )


def option_metrics(options: list[Any]) -> np.ndarray:
    """(3, sites, 1): time, energy (upper end; unknown = ∞) and cost (unpriced = 0)."""
    rows = [[o.time_s, o.energy_key, o.extra.get("cost", 0.0)] for o in options]
    return np.array(rows, dtype=float).T[:, :, None]


def pick(
    options: list[Any], objective: str, weights: dict[str, float] | None
) -> tuple[int | None, np.ndarray, np.ndarray]:
    """(index chosen or None, metrics, Pareto front) for ``"cost"`` or ``"pareto"``.

    The rule the planner states and its threshold searches reuse: feasible, then on
    time, then the least cost (ties: time, energy) or, on the front, the least
    weighted score with the user's ``[decision] weights``.
    """
    metrics = option_metrics(options)
    feasible = np.array([[o.feasible] for o in options], dtype=bool).reshape(-1, 1)
    ontime = feasible & np.array([[o.meets_deadline is not False] for o in options]).reshape(-1, 1)
    front = pareto_front(metrics, feasible)[:, 0]
    if not ontime.any():
        return None, metrics, front
    if objective == "cost":
        eligible = [i for i in range(len(options)) if ontime[i, 0]]
        best = min(eligible, key=lambda i: (metrics[2, i, 0], metrics[0, i, 0], metrics[1, i, 0]))
        return best, metrics, front
    eligible = deadline_first(metrics, front[:, None], ontime)
    chosen = weighted_choice(metrics, eligible, weights_of_dict(weights))[0]
    return int(chosen), metrics, front


def deadline_first(metrics: np.ndarray, front: np.ndarray, ontime: np.ndarray) -> np.ndarray:
    """The options the weighted score picks from: on the front and on time; where the whole
    front misses the deadline (a p99 or Monte Carlo verdict), the front of the on-time ones."""
    eligible = front & ontime
    return np.where(eligible.any(axis=0), eligible, pareto_front(metrics, ontime))


def weights_of_dict(weights: dict[str, float] | None) -> np.ndarray:
    """Weights in :data:`METRICS` order, 1 for each one not given."""
    given = weights or {}
    return np.array([float(given.get(k, 1.0)) for k in METRICS])
