"""Probability of meeting the deadline when the path varies (§12.5.2).

``[variability]`` gives per-site distributions: the uplink of each round, RTT
jitter added to each round, and a per-round disconnect probability with its
reconnect time and whether progress is kept. Each trial draws one value per
round; totals are computed for all trials at once with numpy:

``T = M + Σ_i (F + S/b_i + j_i) + Σ_i D_i (t_reconnect + redo_i)``

where ``redo_i`` is round i's time (progress kept) or the time of rounds
1..i (progress lost). A redone round is assumed not to fail again.

Randomness comes from one seed: each (site, stream) pair gets its own
``numpy.random.Generator`` from a ``SeedSequence`` spawn key, so adding a site
never changes another site's draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tierwise.errors import ScenarioError
from tierwise.plan.options import loop_terms
from tierwise.plan.resolve import SiteCosts
from tierwise.scenario.schema import Distribution, Scenario, SiteVariability
from tierwise.units import parse_quantity

__all__ = ["Draws", "draw", "monte_carlo", "totals", "totals_python"]

_STREAMS = {"uplink": 0, "rtt_jitter": 1, "disconnect": 2}


@dataclass(frozen=True)
class Draws:
    """One site's per-trial, per-round inputs (arrays of shape trials × rounds)."""

    round_fixed_s: float
    upload_bytes: float
    uplink: np.ndarray
    jitter_s: np.ndarray
    disconnect: np.ndarray
    reconnect_s: float
    lost: bool
    prepare_s: float


def _rng(seed: int, site_index: int, stream: str) -> np.random.Generator:
    return np.random.default_rng(
        np.random.SeedSequence(seed, spawn_key=(site_index, _STREAMS[stream]))
    )


def _q(text: str | None, kind: str, where: str, source: str) -> float:
    if text is None:
        raise ScenarioError("this distribution needs the parameter", source=source, path=where)
    try:
        return parse_quantity(text, kind)
    except ValueError as exc:
        raise ScenarioError(str(exc), source=source, path=where) from None


def sample(
    d: Distribution,
    kind: str,
    shape: tuple[int, int],
    rng: np.random.Generator,
    where: str,
    source: str,
) -> np.ndarray:
    """Draw ``shape`` values of ``kind`` (SI) from distribution ``d``."""
    q = lambda key: _q(getattr(d, key), kind, f"{where}.{key}", source)  # noqa: E731
    if d.dist == "uniform":
        return rng.uniform(q("low"), q("high"), shape)
    if d.dist == "lognormal":
        return q("median") * rng.lognormal(0.0, d.sigma or 0.0, shape)
    if d.dist == "normal":
        return rng.normal(q("mean"), q("sd"), shape)
    if d.dist == "exponential":
        return rng.exponential(q("mean"), shape)
    values = np.array([_q(v, kind, f"{where}.values", source) for v in d.values or []])
    if values.size == 0:
        raise ScenarioError("choice needs values = [...]", source=source, path=f"{where}.values")
    p = None
    if d.weights is not None:
        w = np.asarray(d.weights, dtype=float)
        if w.size != values.size or np.any(w < 0) or w.sum() <= 0:
            raise ScenarioError(
                "weights must be non-negative, one per value",
                source=source,
                path=f"{where}.weights",
            )
        p = w / w.sum()
    return rng.choice(values, size=shape, p=p)


def draw(scn: Scenario, costs: SiteCosts, index: int, source: str) -> Draws:
    """All random inputs of one site for ``scn.variability.trials`` trials."""
    var = scn.variability
    assert var is not None
    terms = loop_terms(scn.task, costs, source)
    shape = (var.trials, terms.rounds)
    sv = var.site.get(costs.site.name, SiteVariability())
    where = f"variability.site.{costs.site.name}"
    uplink = np.broadcast_to(terms.uplinks, shape)
    if sv.uplink is not None and costs.site.remote:
        uplink = sample(
            sv.uplink, "rate", shape, _rng(var.seed, index, "uplink"), f"{where}.uplink", source
        )
        if np.any(uplink <= 0):
            raise ScenarioError(
                "the uplink distribution produced rates ≤ 0; use lognormal or a positive range",
                source=source,
                path=f"{where}.uplink",
            )
    jitter = np.zeros(shape)
    if sv.rtt_jitter is not None and costs.site.remote:
        jitter = sample(
            sv.rtt_jitter,
            "time",
            shape,
            _rng(var.seed, index, "rtt_jitter"),
            f"{where}.rtt_jitter",
            source,
        )
        jitter = np.maximum(jitter, -terms.rtt_s)  # an RTT never goes below zero
    cut = np.zeros(shape, dtype=bool)
    if sv.disconnect_probability > 0 and costs.site.remote:
        cut = _rng(var.seed, index, "disconnect").random(shape) < sv.disconnect_probability
    return Draws(
        terms.fixed_round_s,
        terms.upload_bytes,
        uplink,
        jitter,
        cut,
        sv.reconnect,
        sv.progress == "lost",
        terms.prepare_s,
    )


def totals(d: Draws) -> np.ndarray:
    """Whole-task time of every trial (vectorised)."""
    rounds = d.round_fixed_s + d.upload_bytes / d.uplink + d.jitter_s
    redo = np.cumsum(rounds, axis=1) if d.lost else rounds
    extra = np.where(d.disconnect, d.reconnect_s + redo, 0.0).sum(axis=1)
    return d.prepare_s + rounds.sum(axis=1) + extra


def totals_python(d: Draws) -> list[float]:
    """The same as :func:`totals`, one trial and one round at a time (reference and benchmark)."""
    out = []
    uplink, jitter, cut = d.uplink.tolist(), d.jitter_s.tolist(), d.disconnect.tolist()
    for t in range(len(uplink)):
        total, done = d.prepare_s, 0.0
        for i in range(len(uplink[t])):
            r = d.round_fixed_s + d.upload_bytes / uplink[t][i] + jitter[t][i]
            done += r
            total += r
            if cut[t][i]:
                total += d.reconnect_s + (done if d.lost else r)
        out.append(total)
    return out


def _summary(times: np.ndarray, deadline: float | None) -> dict[str, Any]:
    p50, p99 = np.quantile(times, [0.5, 0.99])
    return {
        "p_meet": None if deadline is None else float(np.mean(times <= deadline)),
        "p50_s": float(p50),
        "p99_s": float(p99),
        "mean_s": float(times.mean()),
        "min_s": float(times.min()),
        "max_s": float(times.max()),
    }


def monte_carlo(scn: Scenario, costs: list[SiteCosts], source: str) -> dict[str, Any]:
    """P(T ≤ deadline), p50 and p99 per feasible site."""
    var = scn.variability
    assert var is not None
    if scn.task.kind != "loop":
        raise ScenarioError(
            "[variability] applies to loop tasks (per-round conditions)",
            source=source,
            path="variability",
        )
    sites = {}
    for index, c in enumerate(costs):
        if c.feasible:
            sites[c.site.name] = _summary(totals(draw(scn, c, index, source)), scn.task.deadline)
    return {"trials": var.trials, "seed": var.seed, "deadline_s": scn.task.deadline, "sites": sites}
