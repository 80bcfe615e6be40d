"""Threshold lines for a sweep's choice map, found by the planner itself (§12.5.2).

The map shows which site wins at each grid point of two varied keys. Between two
neighbouring points with different winners the choice flips somewhere, and the
planner finds where, one search per pair of neighbouring cells, per value of the
other map key and of the slider keys: the lines are the planner's thresholds, not a
contour of the grid.

* A remote, closed-form site's uplink on the map: the planner's choice-flip search
  (:func:`~tierwise.plan.thresholds.uplink_choice` bisected by
  :func:`~tierwise.plan.thresholds.flip_between`) re-evaluates only that site.
* Any other numeric key: the scenario with that one override is planned whole,
  the same path as ``tierwise plan --set`` (one model, not a second one), and the
  choice is bisected between the two cells — in log space on a log axis, over the
  integers on an integer key (``task.rounds``: the line is drawn at the midpoint
  between the last integer where one site wins and the first where the other does).

Planner calls per map are bounded (:data:`MAX_PLANNER_CALLS`): above the bound only
every k-th row is searched and the note says the lines were thinned.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tierwise.errors import ScenarioError, TierwiseError
from tierwise.plan.resolve import resolve_site

__all__ = [
    "MAX_LINE_ROWS",
    "MAX_PLANNER_CALLS",
    "Lines",
    "map_lines",
    "planner_flip",
    "search_axis",
    "threshold_lines",
]

MAX_LINE_ROWS = 2_000  # scenarios re-planned for uplink lines (~5 ms each); beyond: no lines
MAX_PLANNER_CALLS = 10_000  # whole-scenario plans per map (~0.5 ms each); beyond: thinned
_REL_TOL = 1e-10  # a continuous flip is bisected until its bracket is this narrow (relative)
_UPLINK = re.compile(r"^site\.([^.]+)\.uplink$")
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")


@dataclass
class Lines:
    """Where the choice flips along ``axis`` (an index into the sweep's axes).

    Each crossing is ``(rest, row, at, left, right)``: ``rest`` the flat index over
    the slider axes, ``row`` the index on the map's other axis, ``at`` the flip in SI
    units (an integer key: the midpoint of the two integers it lies between),
    ``left``/``right`` the site codes (−1: none) on either side.
    """

    axis: int | None
    crossings: list[tuple[int, int, float, int, int]] = field(default_factory=list)
    note: str | None = None
    uplink: bool = False  # found by the uplink search (else: whole-scenario plans)
    integer: bool = False  # an integer key: each ``at`` is a midpoint between two integers


def search_axis(
    run: Any, map_axes: Sequence[int], winner: np.ndarray | None = None
) -> tuple[int | None, str | None]:
    """(the map axis the lines are searched along, or None with the reason).

    A remote closed-form site's uplink first (its search re-evaluates one site);
    else the numeric map axis along which the winner changes most often.
    """
    scn = run.base.scenario()
    simulated = [s.name for s in scn.site if s.remote and s.evaluate == "sim"]
    if simulated:  # each bisection step would re-simulate that site
        return None, (
            f"no threshold lines: site {simulated[0]} is simulated, and re-simulating it "
            "at every bisection step of every map row is too costly"
        )
    if scn.variability is not None and scn.decision.probability is not None:
        return None, (
            "no threshold lines: the choice depends on Monte Carlo odds ([decision] "
            "probability), and re-running them at every bisection step is too costly"
        )
    numeric = [i for i in map_axes if run.axes[i].numeric and _unit_of(run.axes[i]) is not None]
    for i in numeric:
        m = _UPLINK.match(run.axes[i].key)
        if m is not None and scn.site_named(m[1]).remote:
            return i, None
    if not numeric:
        return None, "no threshold lines: neither map axis is numeric (with one unit)"
    if winner is None or len(numeric) == 1:
        return numeric[0], None
    changes = [int((np.diff(winner, axis=i) != 0).sum()) for i in numeric]
    return numeric[int(np.argmax(changes))], None


def threshold_lines(
    run: Any,
    winner: np.ndarray,
    map_axes: Sequence[int],
    axis: int | None = None,
    max_calls: int = MAX_PLANNER_CALLS,
    progress: Callable[[int, int], None] | None = None,
) -> Lines:
    """The planner's flip points along one map axis between every pair of cells with
    different winners (``axis``: default :func:`search_axis`'s pick).

    ``winner`` is the site code chosen at each grid point (−1: none), shape ``run.shape``;
    ``progress(done, total)`` follows the rows searched.
    """
    if axis is None:
        axis, note = search_axis(run, map_axes, winner)
        if axis is None:
            return Lines(None, note=note)
    m = _UPLINK.match(run.axes[axis].key)
    uplink = m is not None and run.base.scenario().site_named(m[1]).remote
    m = m if uplink else None
    other = [i for i in map_axes if i != axis]
    rest = [i for i in range(len(run.axes)) if i not in map_axes]
    fixed = other + rest
    rows = _rows(run, winner, axis, fixed)
    lines = Lines(axis, uplink=uplink, integer=not uplink and _integer(run.axes[axis]))
    if uplink and len(rows) > MAX_LINE_ROWS:
        lines.note = f"no threshold lines: {len(rows):,} rows to search (limit {MAX_LINE_ROWS:,})"
        return lines
    step = 1 if uplink else _thinning(run.axes[axis], rows, max_calls)
    lines.note = _note(run.axes[axis].key, lines.integer, step, len(rows), max_calls)
    rest_shape = [len(run.axes[i].texts) for i in rest]
    todo = rows[::step]
    for done, (combo, cells, along) in enumerate(todo):
        if progress is not None:
            progress(done, len(todo))
        texts = [run.axes[i].override(j) for i, j in zip(fixed, combo, strict=True)]
        r = int(np.ravel_multi_index(combo[len(other) :], rest_shape)) if rest else 0
        row = combo[0] if other else 0
        for at, left, right in _search_row(run, texts, axis, cells, along, m and m[1]):
            lines.crossings.append((r, row, at, left, right))
    if len(lines.crossings) < sum(len(c) for _, c, _ in todo):
        lines.note = "some threshold line points were left out (the planner refused them)"
    if lines.integer and step == 1 and not lines.crossings:
        lines.note = None  # nothing drawn, nothing to explain
    return lines


def _search_row(
    run: Any, texts: list[str], axis: int, cells: Any, along: Any, uplink_site: str | None
) -> Iterator[tuple[float, int, int]]:
    """(flip, left site, right site) of each winner change in one row of the map."""
    if uplink_site:
        choice_at = _choice_at(run, texts, uplink_site)
        values = run.axes[axis].array()
        for j in cells:
            yield _flip(choice_at, values[j], values[j + 1]), int(along[j]), int(along[j + 1])
        return
    for j in cells:
        try:
            at, right = planner_flip(run, texts, axis, j, int(along[j]))
        except TierwiseError:  # a value between two valid grid values that is not
            continue
        yield at, int(along[j]), right


def map_lines(
    run: Any,
    winner: np.ndarray,
    map_axes: Sequence[int],
    progress: Callable[[int, int], None] | None = None,
) -> list[Lines]:
    """Threshold lines along each numeric map axis (the first: :func:`search_axis`'s pick),
    MAX_PLANNER_CALLS shared between them (``progress``: see :func:`threshold_lines`)."""
    first, note = search_axis(run, map_axes, winner)
    if first is None:
        return [Lines(None, note=note)]
    more = [i for i in map_axes if i != first and run.axes[i].numeric]
    axes = [first, *(i for i in more if _unit_of(run.axes[i]) is not None)]
    share = MAX_PLANNER_CALLS // len(axes)
    return [threshold_lines(run, winner, map_axes, i, share, progress) for i in axes]


def _note(key: str, integer: bool, step: int, rows: int, max_calls: int) -> str | None:
    if step > 1:
        return (
            f"threshold lines along {key} thinned: every {step}th of {rows:,} rows with a "
            f"flip searched (at most {max_calls:,} planner calls)"
        )
    if integer:
        return (
            f"{key} is an integer: each line point is drawn at the midpoint between the "
            "last integer where one site wins and the first where the other does"
        )
    return None


def _rows(run: Any, winner: np.ndarray, axis: int, fixed: list[int]) -> list[tuple]:
    """(combo over ``fixed``, cells where the winner changes, winners along ``axis``)."""
    out = []
    for combo in itertools.product(*(range(len(run.axes[i].texts)) for i in fixed)):
        index: list[Any] = [0] * len(run.axes)
        for i, j in zip(fixed, combo, strict=True):
            index[i] = j
        index[axis] = slice(None)
        along = winner[tuple(index)]
        cells = np.nonzero(along[:-1] != along[1:])[0]
        if cells.size:
            out.append((combo, cells, along))
    return out


def _thinning(axis: Any, rows: list[tuple], max_calls: int) -> int:
    """Every how many rows to search so that the map stays within MAX_PLANNER_CALLS."""
    v = axis.array()
    if _integer(axis):
        per = 2 + math.ceil(math.log2(max(2.0, float(np.ptp(v)))))
    else:
        per = 2 + math.ceil(math.log2(max(2.0, 1.0 / _REL_TOL * _spread(axis))))
    calls = per * sum(len(cells) for _, cells, _ in rows)
    return max(1, math.ceil(calls / max_calls))


def _spread(axis: Any) -> float:
    """The widest neighbouring-cell gap relative to the values (the bisection's start)."""
    v = axis.array()
    if _log(axis):
        return float(np.max(np.abs(np.diff(np.log(np.abs(v)))), initial=1.0))
    scale = float(np.max(np.abs(v))) or 1.0
    return float(np.max(np.abs(np.diff(v)), initial=scale)) / scale


def _integer(axis: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in axis.values)


def _log(axis: Any) -> bool:
    return ":log:" in axis.spec.replace(" ", "") and bool(np.all(axis.array() > 0))


def _unit_of(axis: Any) -> tuple[str, float] | None:
    """(unit text, text number per SI unit) of a numeric axis whose ``--set`` texts share
    one unit (as the page plots them), or None."""
    parts = [_NUMBER.match(t) for t in axis.texts]
    if not all(parts) or len({m[2] for m in parts if m}) != 1:
        return None
    for m, v in zip(parts, axis.array(), strict=True):
        if m is not None and v != 0:
            return m[2], float(m[1]) / float(v)
    return parts[0][2], 1.0  # type: ignore[index]


def planner_flip(run: Any, texts: list[str], axis: int, j: int, left: int) -> tuple[float, int]:
    """(where the planner's choice first differs from ``left`` between cells j and j+1 of
    ``axis``, the site code it flips to), planning the whole scenario with ``texts`` and
    that axis's key overridden (``tierwise plan --set``): bisection, in log space on a
    log axis, over the integers on an integer key (then: the midpoint)."""
    ax = run.axes[axis]
    choice_at = _planner_choice_at(run, texts, ax)
    a, b = ax.values[j], ax.values[j + 1]
    if _integer(ax):
        lo, hi = int(a), int(b)
        step = 1 if hi > lo else -1
        while abs(hi - lo) > 1:
            mid = (lo + hi) // 2 if step > 0 else -((-lo - hi) // 2)
            lo, hi = (mid, hi) if choice_at(mid) == left else (lo, mid)
        return (lo + hi) / 2, choice_at(hi)
    lo, hi, log = float(a), float(b), _log(ax)
    for _ in range(200):
        mid = math.copysign(math.sqrt(lo * hi), lo) if log else (lo + hi) / 2
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if choice_at(mid) == left else (lo, mid)
        if abs(hi - lo) <= _REL_TOL * max(abs(lo), abs(hi)):
            break
    return hi, choice_at(hi)


def _planner_choice_at(run: Any, texts: list[str], ax: Any) -> Callable[[float], int]:
    """The planner's choice (a site code, −1: none) as a function of ``ax``'s value in SI."""
    from tierwise.plan.planner import plan

    unit, per_si = _unit_of(ax) or ("", 1.0)
    names = run.sites()
    cache: dict[float, int] = {}

    def code(v: float) -> int:
        if v not in cache:
            value = str(v) if isinstance(v, int) else repr(float(v) * per_si)
            scn = run.base.scenario([*texts, f"{ax.key}={value}{' ' if unit else ''}{unit}"])
            mc = scn.decision.probability is not None
            chosen = plan(
                scn, run.catalog, source=run.base.source, thresholds=False, monte_carlo=mc
            ).choice
            cache[v] = -1 if chosen is None else names.index(chosen)
        return cache[v]

    return code


def _choice_at(run: Any, texts: list[str], site: str) -> Any:
    """The planner's choice as a function of ``site``'s uplink at one row of the map."""
    from tierwise.plan.planner import evaluate_all
    from tierwise.plan.thresholds import uplink_choice

    scn = run.base.scenario(texts)
    costs = [resolve_site(scn, s, run.catalog, run.base.source) for s in scn.site]
    with np.errstate(all="ignore"):
        options = evaluate_all(scn, costs, run.base.source)
    c = next(c for c in costs if c.site.name == site)
    others = [o for o in options if o.site != site]
    names = [s.name for s in scn.site]
    choose = uplink_choice(scn, others, c, run.base.source)

    def code(b: float) -> int:
        with np.errstate(all="ignore"):
            chosen = choose(b)
        return -1 if chosen is None else names.index(chosen)

    return code


def _flip(choice_at: Any, a: float, b: float) -> float:
    """The uplink between grid values ``a`` and ``b`` where the choice changes."""
    from tierwise.plan.thresholds import flip_between

    lo, hi = min(a, b), max(a, b)
    if lo <= 0:
        raise ScenarioError("an uplink axis needs values above 0", path="--vary")
    return flip_between(choice_at, lo, hi)
