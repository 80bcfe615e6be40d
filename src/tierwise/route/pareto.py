"""Quality-aware choice: ``objective = "pareto"`` over time, energy, cost and quality.

Sites may serve different models — the device a 0.6B, the edge an 8B q4, the cloud an
8B BF16 — so they are not interchangeable: each ``[[site]]`` has a ``quality`` score in
(0, 1] (and ``task_quality`` per task type, chosen by the ``x-tierwise-task`` header).
Per request, from the live predictions, the options that no other feasible option
beats on all four of (expected time, energy, cost, 1/quality) together form the front;
among those that meet the deadline the least ``Σ w_k · x_k / min x_k`` wins — the
planner's own rule (:mod:`tierwise.plan.cost`: :func:`pareto_front`,
:func:`deadline_first`, :func:`weighted_choice`) with quality as a fourth metric
(``1/quality`` over its least value is ``best quality / quality``). The weights come
from ``[decision] weights`` (1 each by default) and a request's
``x-tierwise-weights: time=1, quality=3`` header overrides them. A deadline still
rules out what cannot meet it; an infeasible site is never on the front. With every
site's quality equal (or a quality weight of 0) the choice is the planner's
``objective = "pareto"`` choice on the same options — except where a metric is unknown
at every site (no site's energy known): the planner's score is then ∞ for all and the
first site wins; here that metric counts as equal and the others decide.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tierwise.errors import ScenarioError
from tierwise.plan.cost import deadline_first, pareto_front, session_cost, weighted_choice

__all__ = [
    "METRICS",
    "TASK_HEADER",
    "WEIGHTS_HEADER",
    "choose_pareto",
    "parse_task",
    "parse_weights",
]

METRICS = ("time", "energy", "cost", "quality")
WEIGHTS_HEADER = "x-tierwise-weights"
TASK_HEADER = "x-tierwise-task"
MAX_WEIGHT = 1e6  # as the planner's [decision] weights
MAX_TASK_CHARS = 64  # a task type is a short name (it goes into every decisions record)


def parse_task(value: str | None) -> str | None:
    """The ``x-tierwise-task`` header: a short name (letters, digits, ``-_.``) or None."""
    if value is None or not value.strip():
        return None
    task = value.strip()
    if len(task) > MAX_TASK_CHARS or not all(c.isalnum() or c in "-_." for c in task):
        raise ScenarioError(
            f"expected a task name of at most {MAX_TASK_CHARS} letters, digits, '-', '_' "
            f"or '.', got {task[:40]!r}",
            source=TASK_HEADER,
        )
    return task


def parse_weights(value: str | None) -> dict[str, float]:
    """``time=1, quality=3`` → ``{"time": 1.0, "quality": 3.0}``; anything else is a
    :class:`ScenarioError` naming the header, the item and what was expected."""
    out: dict[str, float] = {}
    for item in (value or "").split(","):
        if not item.strip():
            continue
        name, sep, number = (p.strip() for p in item.partition("="))
        if not sep or name not in METRICS:
            raise ScenarioError(
                f"expected metric=weight with metric one of {', '.join(METRICS)}, "
                f"got {item.strip()[:40]!r}",
                source=WEIGHTS_HEADER,
            )
        try:
            weight = float(number)
        except ValueError:
            weight = -1.0
        if not 0 <= weight <= MAX_WEIGHT:
            raise ScenarioError(
                f"{name}: expected a weight from 0 to {MAX_WEIGHT:g}, got {number[:20]!r}",
                source=WEIGHTS_HEADER,
            )
        out[name] = weight
    if out and not any({**dict.fromkeys(METRICS, 1.0), **out}.values()):
        raise ScenarioError("at least one weight must be above 0", source=WEIGHTS_HEADER)
    return out


def quality_of(site: Any, task: str | None) -> float:
    """The site's quality for ``task`` (its ``task_quality`` entry, else ``quality``)."""
    if task is not None and site.task_quality and task in site.task_quality:
        return site.task_quality[task]
    return site.quality


def request_cost(model: Any, req: Any, time_s: float) -> float:
    """The request's cost at the site (its prices; 0 for a site without any)."""
    n_out = req.output_tokens
    down = model.answer_bytes(n_out, req.stream)
    return float(session_cost(model.site, time_s, req.prompt_tokens, n_out, down))


def choose_pareto(
    preds: list[Any],
    models: dict[str, Any],
    req: Any,
    weights: dict[str, float],
    task: str | None = None,
) -> tuple[str | None, str, dict[str, Any]]:
    """(choice, reason, what the decisions log keeps: metrics, front, weights).

    ``preds`` carry each option's ``meets_deadline`` already judged (as :func:`pick`
    judges it: the expected time or the probability); the time metric is the expected
    time (a failed attempt's retry included)."""
    rows = []
    for p in preds:
        o, m = p.option, models[p.site]
        q = quality_of(m.site, task)
        rows.append([p.expected_s, o.energy_key, request_cost(m, req, p.expected_s), 1.0 / q])
    metrics = np.array(rows, dtype=float).T[:, :, None]  # (4, sites, 1)
    unknown = ~np.isfinite(metrics).any(axis=1, keepdims=True)  # e.g. no site's energy known
    metrics = np.where(unknown, 1.0, metrics)  # says nothing between them: equal, not ∞
    feasible = np.array([[p.option.feasible] for p in preds], dtype=bool)
    ontime = feasible & np.array([[p.option.meets_deadline is not False] for p in preds])
    front = pareto_front(metrics, feasible)
    w = np.array([float(weights.get(k, 1.0)) for k in METRICS])
    names = [p.site for p in preds]
    log = {
        "front": [n for n, on in zip(names, front[:, 0], strict=True) if on],
        "weights": dict(zip(METRICS, w.tolist(), strict=True)),
        "metrics": {
            n: dict(zip(METRICS, metrics[:, i, 0].tolist(), strict=True))
            for i, n in enumerate(names)
        },
        "task": task,
    }
    if not ontime.any():
        return None, "pareto: no feasible site meets the deadline", log
    best = int(weighted_choice(metrics, deadline_first(metrics, front, ontime), w)[0])
    site = names[best]
    reason = f"pareto: {site} has the best weighted score on the front ({', '.join(log['front'])})"
    return site, reason, log
