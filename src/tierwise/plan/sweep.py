"""Sweep the planner over a grid of overrides: where does each site win?

The grid's keys split in two. *Vector keys* (a site's ``uplink``, ``downlink``,
``rtt``; the task's ``rounds``, ``deadline``, ``upload``, ``download``,
``client_work``) enter the closed forms of §12.1 and §12.5 as numpy arrays: a
loop takes ``T = prepare + n·(client + model + RTT + D/B_down + codec + S/B_up)``,
a request ``T = prepare + S/B_up + model + D/B_down + RTT + codec``, evaluated
over a chunk of grid points at once. Every other key (hardware, model, loss…)
changes what :func:`~tierwise.plan.resolve.resolve_site` derives, so the sweep
re-resolves the scenario once per combination of those keys and vectorises over
the rest. A scenario the closed forms here do not cover (path physics, simulated
sites, streams, chunked requests, disconnects, per-round uplinks, a Monte Carlo
deciding the choice) is planned point by point with :func:`~tierwise.plan.planner.plan`,
and the sweep says so. Both routes give the same rows (a test holds them to it).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tierwise.catalog import Catalog
from tierwise.errors import ScenarioError, first_line
from tierwise.plan import network as net
from tierwise.plan.cost import (
    deadline_first,
    pareto_front,
    session_cost,
    weighted_choice,
    weights_of_dict,
)
from tierwise.plan.grid import MAX_GRID_POINTS, Axis, Base, grid_size
from tierwise.plan.resolve import SiteCosts, resolve_site
from tierwise.scenario.schema import Scenario

__all__ = [
    "CHUNK_POINTS",
    "MAX_GRID_POINTS",
    "MAX_PLANNED_POINTS",
    "MAX_SIMULATED_SEEDS",
    "PARTS",
    "Block",
    "SweepRun",
    "is_vector_key",
    "plan_points",
    "vector_block",
    "vector_blocker",
]

# Where the time goes, as the planner's breakdown names it; the rest is "other".
PARTS = ("prepare", "client", "model", "upload", "download", "propagation")
Parts = dict[str, Any]

CHUNK_POINTS = 1 << 17  # grid points per vectorised chunk: ~10 MB of float64 per column
# Work bounds (refused with exit 2 before anything runs): a vectorised grid takes ~3 s of
# CPU per million points × 3 sites; a point planned one by one ~20 ms, a simulated seed
# ~2.5 ms (docs/benchmarks.md) — each limit is about a quarter of an hour on one core.
MAX_PLANNED_POINTS = 50_000
MAX_SIMULATED_SEEDS = 400_000  # points × the simulated sites' runs

_VECTOR_KEY = re.compile(
    r"^(site\.[^.]+\.(uplink|downlink|rtt)|task\.(rounds|deadline|upload|download|client_work))$"
)


def is_vector_key(key: str) -> bool:
    """Whether ``key`` enters the closed forms as an array (no re-resolving needed)."""
    return _VECTOR_KEY.match(key) is not None


def vector_blocker(scn: Scenario) -> str | None:
    """Why ``scn`` must be planned point by point, or None when it vectorises."""
    task = scn.task
    if task.kind == "stream":
        return "stream tasks"
    if task.kind == "request" and task.chunks is not None:
        return "chunked requests"
    if task.disconnect is not None:
        return "a disconnect ([task.disconnect])"
    if scn.variability is not None:
        return "a Monte Carlo ([variability]: its p99 and odds per point)"
    for s in scn.site:
        if s.remote and s.evaluate == "sim":
            return f'site {s.name} (evaluate = "sim")'
        if s.remote and net.has_physics(s):
            return f"site {s.name} (path physics: connection, window or loss)"
        if isinstance(s.uplink, list):
            return f"site {s.name} (per-round uplinks)"
    return None


@dataclass
class Block:
    """Every site's results over ``m`` grid points: arrays of shape (sites, m)."""

    points: np.ndarray  # global point index, shape (m,)
    time_s: np.ndarray
    time_p99_s: np.ndarray
    energy_j: np.ndarray  # upper end of a range; NaN when unknown
    energy_low_j: np.ndarray
    feasible: np.ndarray
    meets_deadline: np.ndarray  # float: 1, 0, or NaN without a deadline
    cost: np.ndarray  # 0 where the site has no price
    chosen: np.ndarray = field(init=False)
    pareto: np.ndarray = field(init=False)
    parts: dict[str, np.ndarray] = field(init=False)  # PARTS of the time, (sites, m) each

    def metrics(self) -> np.ndarray:
        """(3, sites, m): time, energy (unknown = ∞) and cost, as :mod:`plan.cost` ranks."""
        ekey = np.where(np.isnan(self.energy_j), np.inf, self.energy_j)
        return np.stack([self.time_s, ekey, self.cost])

    def choose(self, objective: str, weights: dict[str, float] | None = None) -> None:
        """The planner's rule, vectorised: feasible, then on time, then the objective."""
        metrics = self.metrics()
        self.pareto = pareto_front(metrics, self.feasible)
        eligible = self.feasible & (self.meets_deadline != 0)
        if objective == "pareto":
            pool = deadline_first(metrics, self.pareto, eligible)
            best = weighted_choice(metrics, pool, weights_of_dict(weights))
        else:
            order = {"energy": (1, 0), "time": (0, 1), "cost": (2, 0, 1)}[objective]
            best = _lexical_best([metrics[k] for k in order], eligible)
        self.chosen = best[None, :] == np.arange(self.time_s.shape[0])[:, None]


def _bound(count: int, limit: int, what: str) -> None:
    if count > limit:
        raise ScenarioError(
            f"the sweep has {count:,} {what}, over the limit of {limit:,}: vary fewer values",
            source="--vary",
        )


def _lexical_best(keys: list[np.ndarray], eligible: np.ndarray) -> np.ndarray:
    """Per point, the eligible site least by ``keys`` in order (first site wins ties); −1."""
    best = np.full(eligible.shape[1], -1)
    cols = np.arange(best.size)
    for s in range(eligible.shape[0]):
        b = np.maximum(best, 0)
        better = best < 0
        tied = np.ones_like(better)
        for k in keys:
            kb = k[b, cols]
            better |= tied & (k[s] < kb)
            tied &= k[s] == kb
        best = np.where(eligible[s] & better, s, best)
    return best


# ------------------------------------------------------------------ closed forms


class _Values:
    """A scenario's values with some keys replaced by arrays over a chunk's points."""

    def __init__(self, scn: Scenario, columns: dict[str, np.ndarray]):
        self.scn, self.columns = scn, columns

    def __call__(self, key: str, default: Any) -> Any:
        return self.columns.get(key, default)


_NEEDS = {
    "uplink": "a remote site needs an uplink to upload the task's input",
    "downlink": "a remote site needs a downlink to return the task's output",
}


def _transfer_s(v: _Values, c: SiteCosts, link: str, size: Any, source: str) -> Any:
    """``S / B`` over ``link`` (uplink or downlink) of ``c.site``; zero bytes take zero time."""
    site = c.site
    rate = v(f"site.{site.name}.{link}", getattr(site, link))
    if rate is None:
        if np.any(np.asarray(size) > 0):
            raise ScenarioError(_NEEDS[link], source=source, path=f"site.{site.name}.{link}")
        return 0.0
    return np.where(np.asarray(size) == 0, 0.0, np.divide(size, rate))


def _down_s(v: _Values, scn: Scenario, c: SiteCosts, source: str) -> Any:
    return _transfer_s(v, c, "downlink", v("task.download", scn.task.download), source)


def _up_s(v: _Values, scn: Scenario, c: SiteCosts, size: Any, source: str) -> Any:
    return _transfer_s(v, c, "uplink", size, source)


def _loop_time(v: _Values, scn: Scenario, c: SiteCosts, source: str) -> tuple[Any, Any, Parts]:
    """(time, rounds, parts) of a loop on one site, §12.5."""
    task, site = scn.task, c.site
    comp = task.compress
    n = comp.rounds if comp and comp.rounds else v("task.rounds", task.rounds)
    client = v("task.client_work", task.client_work)
    parts = {"prepare": c.prepare_s, "client": n * client, "model": n * c.model_s}
    if not site.remote:
        return c.prepare_s + n * (client + c.model_s), n, parts
    size = v("task.upload", task.upload) * (comp.ratio if comp else 1.0)
    rtt = v(f"site.{site.name}.rtt", site.rtt)
    up, down = _up_s(v, scn, c, size, source), _down_s(v, scn, c, source)
    per_round = client + c.model_s + rtt + down
    per_round = per_round + (comp.time if comp else 0.0) + up
    parts |= {"upload": n * up, "download": n * down, "propagation": n * rtt}
    return c.prepare_s + n * per_round, n, parts


def _request_time(v: _Values, scn: Scenario, c: SiteCosts, source: str) -> tuple[Any, Any, Parts]:
    """(time, 1, parts) of a request on one site, §12.1.1."""
    task, site = scn.task, c.site
    if not site.remote:
        return c.prepare_s + c.model_s, 1, {"prepare": c.prepare_s, "model": c.model_s}
    comp = task.compress
    size = v("task.upload", task.upload) * (comp.ratio if comp else 1.0)
    up = _up_s(v, scn, c, size, source)
    rtt = v(f"site.{site.name}.rtt", site.rtt)
    down = _down_s(v, scn, c, source)
    parts = {"prepare": c.prepare_s, "upload": up, "model": c.model_s, "download": down}
    parts["propagation"] = rtt
    return c.prepare_s + up + c.model_s + down + rtt + (comp.time if comp else 0.0), 1, parts


def _energy(c: SiteCosts, rounds: Any, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) energy, as the planner's ``_energy`` does: per token, else power × busy."""
    rounds = np.broadcast_to(np.asarray(rounds, dtype=float), (m,))
    busy_s = c.prepare_s + rounds * c.model_s
    tokens = rounds * c.tokens_per_round
    low = np.full(m, np.nan)
    if c.power_w is not None:
        low = c.power_w * busy_s
    high = low.copy()
    if c.energy_per_token_j is not None:
        lo, hi = c.energy_per_token_j
        low = np.where(tokens > 0, lo * tokens, low)
        high = np.where(tokens > 0, hi * tokens, high)
    return low, high


def vector_block(
    scn: Scenario,
    costs: list[SiteCosts],
    columns: dict[str, np.ndarray],
    points: np.ndarray,
    source: str = "<scenario>",
) -> Block:
    """Every site's time, energy, feasibility and deadline over ``points`` at once."""
    m = points.size
    v = _Values(scn, columns)
    timer = _loop_time if scn.task.kind == "loop" else _request_time
    deadline = v("task.deadline", scn.task.deadline)
    rows: dict[str, list[np.ndarray]] = {k: [] for k in ("t", "lo", "hi", "ok", "meet", "cost")}
    parts: dict[str, list[np.ndarray]] = {k: [] for k in PARTS}
    for c in costs:
        time_s, rounds, site_parts = timer(v, scn, c, source)
        for k in PARTS:
            parts[k].append(np.broadcast_to(np.asarray(site_parts.get(k, 0.0), float), (m,)))
        time_s = np.broadcast_to(np.asarray(time_s, dtype=float), (m,))
        low, high = _energy(c, rounds, m)
        egress = v("task.download", scn.task.download) if c.site.remote else 0.0
        tokens = np.asarray(rounds) * c.tokens_per_round
        cost = session_cost(c.site, time_s, c.input_tokens, tokens, np.asarray(rounds) * egress)
        ok = np.full(m, c.feasible)
        if c.site.battery is not None:
            ok &= ~(high > c.site.battery)
        meet = np.full(m, np.nan) if deadline is None else (time_s <= deadline + 1e-12) * 1.0
        for k, a in zip(rows, (time_s, low, high, ok, meet, cost), strict=True):
            rows[k].append(np.broadcast_to(np.asarray(a, dtype=float), (m,)))
    t = np.stack(rows["t"])
    block = Block(
        points, t, t, np.stack(rows["hi"]), np.stack(rows["lo"]), np.stack(rows["ok"]) > 0,
        np.stack(rows["meet"]), np.stack(rows["cost"]),
    )  # fmt: skip
    block.parts = {k: np.stack(a) for k, a in parts.items()}
    block.choose(scn.decision.objective, scn.decision.weights)
    return block


# ------------------------------------------------------------------ point by point


def _collected(future: Any, points: int, total: int) -> Block:
    """A Dask task's block, or one line naming the cluster when the cluster failed it.

    A scheduler that goes away, a worker killed again and again (out of memory) or a
    lost connection cancel the futures: the sweep stops with nothing written, and says
    so, instead of a traceback from ``distributed``. An error raised by the planning
    itself comes through unchanged.
    """
    from concurrent.futures import CancelledError

    from distributed import KilledWorker

    try:
        return future.result()
    except (CancelledError, KilledWorker, OSError, TimeoutError) as exc:
        raise ScenarioError(
            f"the Dask cluster failed a task of {points} point(s) of {total:,}: "
            f"{first_line(exc).rstrip('.')}; nothing was written",
            source="--scheduler",
        ) from None


def plan_points(
    base: Base, catalog: Catalog, overrides: Sequence[Sequence[str]], points: np.ndarray
) -> Block:
    """The same rows as :func:`vector_block`, planning each point with the planner itself.

    A Dask task: it needs only its arguments. The simulator's seeds depend on the run
    and round alone, so a point's result does not depend on the worker that ran it.
    """
    from tierwise.plan.planner import plan

    scns = [base.scenario(o) for o in overrides]
    plans = [plan(s, catalog, source=base.source, thresholds=False) for s in scns]
    return block_of_plans(plans, points)


def block_of_plans(plans: Sequence[Any], points: np.ndarray) -> Block:
    """A :class:`Block` from planned :class:`~tierwise.plan.planner.Plan` objects."""

    def grid(f: Callable[[Any], float]) -> np.ndarray:
        return np.array([[f(o) for o in p.options] for p in plans], dtype=float).T

    def energy(o: Any, end: int) -> float:
        e = o.energy_j
        return np.nan if e is None else float(e[end] if isinstance(e, list) else e)

    def p99(p: Any, o: Any) -> float:
        """The Monte Carlo's p99 where a [variability] ran, else the option's own."""
        mc = (p.monte_carlo or {}).get("sites", {}).get(o.site, {})
        return mc.get("p99_s", o.extra.get("time_p99_s", o.time_s))

    block = Block(
        points,
        grid(lambda o: o.time_s),
        np.array([[p99(p, o) for o in p.options] for p in plans], dtype=float).T,
        grid(lambda o: energy(o, 1)),
        grid(lambda o: energy(o, 0)),
        grid(lambda o: o.feasible).astype(bool),
        grid(lambda o: np.nan if o.meets_deadline is None else float(o.meets_deadline)),
        grid(lambda o: o.extra.get("cost", 0.0)),
    )
    block.pareto = pareto_front(block.metrics(), block.feasible)
    block.parts = {k: grid(lambda o, k=k: o.breakdown_s.get(k, 0.0)) for k in PARTS}
    names = [o.site for o in plans[0].options] if plans else []
    block.chosen = np.array([[p.choice == n for p in plans] for n in names], dtype=bool)
    block.chosen = block.chosen.reshape(len(names), len(plans))
    return block


# ------------------------------------------------------------------------- driver


@dataclass
class SweepRun:
    """A sweep over ``axes`` of the scenario in ``base``; iterate :meth:`blocks`."""

    base: Base
    axes: list[Axis]
    catalog: Catalog
    chunk_points: int = CHUNK_POINTS
    notes: list[str] = field(default_factory=list)
    client: Any = None  # a dask.distributed Client for point-by-point chunks
    point_chunk: int = 256  # points per point-by-point chunk (a Dask task)
    _resolved: dict[tuple[str, ...], Any] = field(default_factory=dict, repr=False)
    _sim_site: str | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return grid_size(self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.texts) for a in self.axes)

    def sites(self) -> list[str]:
        return [s.name for s in self.base.scenario().site]

    def check_bounds(self) -> None:
        """Refuse a grid over the work limits, naming the limit (exit 2 on the command line)."""
        size, scn = self.size, self.base.scenario()
        _bound(size, MAX_GRID_POINTS, "grid points")
        if vector_blocker(scn) is not None:
            _bound(size, MAX_PLANNED_POINTS, f"points planned one by one ({vector_blocker(scn)})")
        seeds = sum(s.runs for s in scn.site if s.remote and s.evaluate == "sim")
        if seeds:
            _bound(size * seeds, MAX_SIMULATED_SEEDS, "simulated seeds (points × runs)")

    def blocks(self, on_points: Callable[[int], None] = lambda n: None) -> Iterator[Block]:
        """Results in chunks; the outer loop re-resolves per combination of non-vector keys.

        With a Dask ``client`` the point-by-point chunks are all submitted first and
        collected in order, so the workers run while the vectorised chunks are built.
        """
        futures: dict[tuple[str, ...], Any] = {}
        if self.client is not None:
            shared = self.client.scatter([self.base, self.catalog], broadcast=True)
            for texts, costs, idx, points in self._work():
                if costs is None:
                    key = (*texts, str(points[0]))
                    job = self._overrides(texts, idx, points)
                    futures[key] = self.client.submit(plan_points, *shared, job, points, pure=False)
        for texts, costs, idx, points in self._work():
            if costs is not None:
                yield vector_block(costs[0], costs[1], self._columns(idx), points, self.base.source)
            elif futures:
                yield _collected(futures.pop((*texts, str(points[0]))), points.size, self.size)
            else:
                job = self._overrides(texts, idx, points)
                yield plan_points(self.base, self.catalog, job, points)
            on_points(points.size)

    def _work(self) -> Iterator[tuple[list[str], Any, tuple[np.ndarray, ...], np.ndarray]]:
        """(outer --set texts, (scenario, costs) or None, inner index, global points)."""
        outer, inner = self._split()
        keys = ", ".join(self.axes[i].key for i in outer)
        if keys and not any(keys in n for n in self.notes):
            self.notes.append(f"re-resolved per value of {keys}; the other keys vectorised")
        for combo in itertools.product(*(range(len(self.axes[i].texts)) for i in outer)):
            texts = [self.axes[i].override(j) for i, j in zip(outer, combo, strict=True)]
            costs = self._resolve(texts)
            for idx in self._chunks(inner, costs is not None):
                full = self._full_index(outer, combo, inner, idx)
                points = np.ravel_multi_index(full, self.shape) if self.axes else np.zeros(1, int)
                yield texts, costs, idx, np.atleast_1d(points)

    def _resolve(self, texts: list[str]) -> tuple[Scenario, list[SiteCosts]] | None:
        """(scenario, costs) for the vectorised path, or None (point by point); cached, as a
        Dask sweep walks the grid twice (submit, then collect)."""
        key = tuple(texts)
        if self._always_simulated():
            return None
        if key not in self._resolved:
            scn = self.base.scenario(texts)
            blocker = vector_blocker(scn)
            if blocker is None:
                costs = [resolve_site(scn, s, self.catalog, self.base.source) for s in scn.site]
                self._resolved[key] = (scn, costs)
            else:
                self._resolved[key] = None
                if blocker not in " ".join(self.notes):
                    self.notes.append(f"planned point by point: {blocker} has no vectorised form")
        if self.client is None:
            return self._resolved.pop(key)  # one pass: keep nothing
        return self._resolved[key]

    def _always_simulated(self) -> bool:
        """A site is simulated at every point (no axis turns it off): skip the per-combination
        check, which would cost the client a validation per combination."""
        if self._sim_site is None:
            scn = self.base.scenario()
            touched = {".".join(a.key.split(".")[:3]) for a in self.axes}
            self._sim_site = next(
                (
                    s.name
                    for s in scn.site
                    if s.remote
                    and s.evaluate == "sim"
                    and not {f"site.{s.name}.evaluate", f"site.{s.name}.tier"} & touched
                ),
                "",
            )
            if self._sim_site:
                self.notes.append(
                    f'planned point by point: site {self._sim_site} (evaluate = "sim") '
                    "has no vectorised form"
                )
        return bool(self._sim_site)

    def _split(self) -> tuple[list[int], list[int]]:
        """(outer axes, re-resolved per value; inner axes, chunked). When every point is
        simulated all axes are inner: Dask tasks then hold ``point_chunk`` points each
        wherever they lie in the grid, not the few of one outer combination."""
        if self._always_simulated():
            return [], list(range(len(self.axes)))
        outer = [i for i, a in enumerate(self.axes) if not (is_vector_key(a.key) and a.numeric)]
        return outer, [i for i in range(len(self.axes)) if i not in outer]

    def _columns(self, idx: tuple[np.ndarray, ...]) -> dict[str, np.ndarray]:
        inner = self._split()[1]
        return {self.axes[i].key: self.axes[i].array()[idx[k]] for k, i in enumerate(inner)}

    def _overrides(
        self, texts: list[str], idx: tuple[np.ndarray, ...], points: np.ndarray
    ) -> list[list[str]]:
        inner = self._split()[1]
        return [
            [*texts, *(self.axes[i].override(int(idx[k][p])) for k, i in enumerate(inner))]
            for p in range(points.size)
        ]

    def _chunks(self, inner: list[int], vector: bool) -> Iterator[tuple[np.ndarray, ...]]:
        shape = tuple(len(self.axes[i].texts) for i in inner)
        total = int(np.prod(shape)) if shape else 1
        step = self.chunk_points if vector else max(1, min(self.chunk_points, self.point_chunk))
        for start in range(0, total, step):
            flat = np.arange(start, min(total, start + step))
            yield np.unravel_index(flat, shape) if shape else ()

    def _full_index(
        self,
        outer: list[int],
        combo: tuple[int, ...],
        inner: list[int],
        idx: tuple[np.ndarray, ...],
    ) -> tuple[np.ndarray, ...]:
        m = idx[0].size if idx else 1
        full: list[np.ndarray] = [np.zeros(m, dtype=np.intp)] * len(self.axes)
        for i, j in zip(outer, combo, strict=True):
            full[i] = np.full(m, j, dtype=np.intp)
        for k, i in enumerate(inner):
            full[i] = idx[k]
        return tuple(full)
