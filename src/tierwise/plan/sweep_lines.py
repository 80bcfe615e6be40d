"""Threshold lines for a sweep's choice map, found by the planner's own search (§12.5.2).

The map shows which site wins at each grid point of two varied keys. Between two
neighbouring points with different winners the choice flips somewhere; when the
map's axis is a remote site's uplink, the planner knows where: its choice-flip
search (:func:`~tierwise.plan.thresholds.uplink_choice` bisected by
:func:`~tierwise.plan.thresholds.flip_between`) evaluates that site with the other
values of the point fixed and finds the uplink at which the choice changes. One
search per pair of neighbouring cells, per value of the other map key and of the
slider keys: the lines are the planner's thresholds, not a contour of the grid.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tierwise.errors import ScenarioError
from tierwise.plan.resolve import resolve_site

__all__ = ["MAX_LINE_ROWS", "Lines", "search_axis", "threshold_lines"]

MAX_LINE_ROWS = 2_000  # scenarios re-planned for lines (~5 ms each); beyond: no lines, said
_UPLINK = re.compile(r"^site\.([^.]+)\.uplink$")


@dataclass
class Lines:
    """Where the choice flips along ``axis`` (an index into the sweep's axes).

    Each crossing is ``(rest, row, at, left, right)``: ``rest`` the flat index over
    the slider axes, ``row`` the index on the map's other axis, ``at`` the uplink in
    bytes/s, ``left``/``right`` the site codes (−1: none) on either side.
    """

    axis: int | None
    crossings: list[tuple[int, int, float, int, int]] = field(default_factory=list)
    note: str | None = None


def search_axis(run: Any, map_axes: Sequence[int]) -> tuple[int | None, str | None]:
    """(the map axis the planner can search, or None with the reason)."""
    scn = run.base.scenario()
    simulated = [s.name for s in scn.site if s.remote and s.evaluate == "sim"]
    if simulated:  # each search would re-simulate that site for every row of the map
        return None, (
            f"no threshold lines: site {simulated[0]} is simulated, and the planner's flip "
            "search uses the closed forms"
        )
    for i in map_axes:
        m = _UPLINK.match(run.axes[i].key)
        if m is None or not run.axes[i].numeric:
            continue
        site = scn.site_named(m[1])
        if site.remote:
            return i, None
    return None, (
        "no threshold lines: the planner's flip search varies a remote, closed-form "
        "site's uplink (§12.5.2), and neither map axis is one"
    )


def threshold_lines(run: Any, winner: np.ndarray, map_axes: Sequence[int]) -> Lines:
    """The planner's flip points between every pair of map cells with different winners.

    ``winner`` is the site code chosen at each grid point (−1: none), shape ``run.shape``.
    """
    axis, note = search_axis(run, map_axes)
    if axis is None:
        return Lines(None, note=note)
    other = [i for i in map_axes if i != axis]
    rest = [i for i in range(len(run.axes)) if i not in map_axes]
    fixed = other + rest
    rows = int(np.prod([len(run.axes[i].texts) for i in fixed])) if fixed else 1
    if rows > MAX_LINE_ROWS:
        note = f"no threshold lines: {rows:,} rows to search (limit {MAX_LINE_ROWS:,})"
        return Lines(axis, note=note)
    lines = Lines(axis)
    site = _UPLINK.match(run.axes[axis].key)[1]  # type: ignore[index]
    values = run.axes[axis].array()
    rest_shape = [len(run.axes[i].texts) for i in rest]
    for combo in itertools.product(*(range(len(run.axes[i].texts)) for i in fixed)):
        index: list[Any] = [0] * len(run.axes)
        for i, j in zip(fixed, combo, strict=True):
            index[i] = j
        index[axis] = slice(None)
        along = winner[tuple(index)]
        cells = np.nonzero(along[:-1] != along[1:])[0]
        if cells.size == 0:
            continue
        texts = [run.axes[i].override(j) for i, j in zip(fixed, combo, strict=True)]
        choice_at = _choice_at(run, texts, site)
        r = int(np.ravel_multi_index(combo[len(other) :], rest_shape)) if rest else 0
        row = combo[0] if other else 0
        for j in cells:
            at = _flip(choice_at, float(values[j]), float(values[j + 1]))
            lines.crossings.append((r, row, at, int(along[j]), int(along[j + 1])))
    return lines


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
