"""The what-if page: one self-contained HTML file (plotly, its JavaScript embedded).

A sweep's page shows, over two varied keys (the first two, or ``--map KEY,KEY``), the
*choice map* (which site wins where, with the planner's own threshold lines where the
choice flips: :mod:`tierwise.plan.sweep_lines`), each site's time as a map, and
the time–energy–cost Pareto front with every option's numbers on hover; a slider
per further varied key moves all three through the grid. ``tierwise plan --html``
writes the page of one scenario: where each site's time goes and its Pareto front.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tierwise.errors import ScenarioError, clip

__all__ = ["MAX_PAGE_POINTS", "map_axes", "plan_page", "sweep_data", "sweep_page"]

MAX_PAGE_POINTS = 250_000  # grid points a page embeds (a few MB of JSON)
_NUMBER = re.compile(r"^\s*([-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*(.*)$")


def _display(texts: list[str]) -> tuple[list[Any], str, bool]:
    """(values to plot, unit, numeric) from an axis' --set texts (``12.5 Mbit/s``)."""
    parts = [_NUMBER.match(t) for t in texts]
    units = {m.group(2) for m in parts if m}
    if all(parts) and len(units) == 1:
        return [float(m.group(1)) for m in parts if m], units.pop(), True
    return list(texts), "", False


def _axis_info(axes: list[Any]) -> list[dict[str, Any]]:
    out = []
    for a in axes:
        values, unit, numeric = _display(list(a.texts))
        log = ":log:" in a.spec.replace(" ", "")
        out.append(
            {"key": a.key, "unit": unit, "values": values, "texts": list(a.texts), "log": log}
            | {"numeric": numeric}
        )
    return out


def _grid(frame: Any, shape: tuple[int, ...], sites: list[str], column: str) -> np.ndarray:
    """``column`` as an array (sites, *shape) in grid order."""
    n = int(np.prod(shape))
    out = np.full((len(sites), n), np.nan)
    code = frame["site"].astype(str).map({s: i for i, s in enumerate(sites)}).to_numpy()
    values = frame[column].astype(float).to_numpy()
    out[code, frame["point"].to_numpy()] = values
    return out.reshape((len(sites), *shape))


def _reorder(a: np.ndarray, n_axes: int) -> np.ndarray:
    """(sites, ax0, ax1, rest…) → (sites, rest…, ax1, ax0): a slice is one contiguous block."""
    if n_axes < 2:
        return a[..., None] if n_axes == 1 else a
    order = [0, *range(3, n_axes + 1), 2, 1]
    return np.transpose(a, order)


def _rounded(a: np.ndarray) -> list[Any]:
    flat = a.reshape(-1).astype(float)
    return [None if not np.isfinite(x) else float(f"{x:.5g}") for x in flat]


def map_axes(run: Any, keys: Sequence[str] | None = None) -> list[int]:
    """The indices of the choice map's axes: ``keys`` (two varied keys) or the first two."""
    varied = [a.key for a in run.axes]
    if not keys:
        return list(range(min(2, len(varied))))
    keys = list(keys)
    unknown = [k for k in keys if k not in varied]
    if unknown or len(keys) != 2 or keys[0] == keys[1]:
        raise ScenarioError(
            f"expected two different varied keys (of {clip(', '.join(varied), 160)}), "
            f"got {clip(','.join(keys), 80)}",
            source="--map",
        )
    return [varied.index(k) for k in keys]


def sweep_data(
    frame: Any, run: Any, keys: Sequence[str] | None = None, progress: bool = False
) -> dict[str, Any]:
    """Everything the sweep page plots, as plain JSON-ready lists (map axes first);
    ``progress``: see :func:`sweep_page`."""
    shape = run.shape if run.axes else (1,)
    sites = run.sites()
    n_axes = max(1, len(run.axes))
    on_map = map_axes(run, keys)
    order = [*on_map, *(i for i in range(len(run.axes)) if i not in on_map)] or [0]

    def grid(column: str, data: Any = frame) -> list[Any]:
        g = np.transpose(_grid(data, shape, sites, column), [0, *(1 + i for i in order)])
        return _rounded(_reorder(g, n_axes))

    per_site: dict[str, Any] = {}
    for col in ("time_s", "energy_j", "cost", "feasible", "pareto", "chosen", "meets_deadline"):
        frame_col = frame[col].astype(float) if col == "meets_deadline" else frame[col]
        per_site[col] = grid(col, frame.assign(**{col: frame_col}))
    parts = [c for c in frame.columns if c.endswith("_s") and c not in ("time_s", "time_p99_s")]
    per_site["parts"] = {c[:-2]: grid(c) for c in parts}
    chosen = np.array(per_site["chosen"], dtype=float).reshape(len(sites), -1)
    winner = np.where(chosen.max(axis=0) > 0, chosen.argmax(axis=0), -1)
    if run.axes:
        axes = _axis_info([run.axes[i] for i in order])
    else:
        axes = [{"key": "-", "values": [0], "texts": ["-"]}]
    lines: dict[str, Any] = {"axis": None, "crossings": []}
    if run.axes:
        lines = _lines(frame, run, on_map, axes, progress)
    return {"sites": sites, "axes": axes, "winner": winner.tolist(), "lines": lines, **per_site}


def _lines(
    frame: Any, run: Any, on_map: list[int], axes: list[dict[str, Any]], progress: bool = False
) -> dict[str, Any]:
    """The planner's threshold lines in the page's units (see :mod:`plan.sweep_lines`):
    the first searched axis's as ``axis``/``crossings``, any other map axis's in ``also``."""
    from tierwise.plan.sweep_lines import map_lines

    sites = run.sites()
    winner = np.full(run.size, -1)
    picked = frame[frame["chosen"].astype(bool)]
    code = picked["site"].astype(str).map({s: i for i, s in enumerate(sites)}).to_numpy()
    winner[picked["point"].to_numpy()] = code
    with _line_bar(progress) as step:
        found = map_lines(run, winner.reshape(run.shape), on_map, step)
    notes = "; ".join(f.note for f in found if f.note) or None
    drawn = [f for f in found if f.axis is not None and axes[on_map.index(f.axis)]["numeric"]]
    sets = [_line_set(run, on_map, axes, f) for f in drawn]
    if not sets:
        return {"axis": None, "crossings": [], "note": notes}
    return {**sets[0], "also": sets[1:], "note": notes}


@contextlib.contextmanager
def _line_bar(enabled: bool) -> Iterator[Any]:
    """A transient stderr bar over the rows the line search plans (on a terminal only)."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("threshold lines (rows)", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _line_set(run: Any, on_map: list[int], axes: list[dict[str, Any]], found: Any) -> dict:
    """One searched axis's crossings, ``at`` in the axis's display unit."""
    info = axes[on_map.index(found.axis)]
    si = np.asarray(run.axes[found.axis].values, dtype=float)
    k = int(np.argmax(si != 0))
    f = info["values"][k] / si[k] if si[k] else 1.0  # display unit per SI unit
    crossings = [[r, row, float(f"{at * f:.10g}"), a, b] for r, row, at, a, b in found.crossings]
    return {"axis": "x" if on_map.index(found.axis) == 0 else "y", "crossings": crossings}


def _script(name: str) -> str:
    """A page script shipped beside this module (``sweep_page.js``, ``plan_page.js``)."""
    from importlib import resources

    return resources.files("tierwise.report").joinpath(name).read_text(encoding="utf-8")


def _page(title: str, body: str, data: dict[str, Any], script: str) -> str:
    from plotly.offline import get_plotlyjs

    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
.row {{ display: flex; flex-wrap: wrap; gap: 1em; }}
.plot {{ width: 600px; height: 440px; }}
.slider {{ margin: 0.4em 0; }} .slider label {{ display: inline-block; min-width: 16em; }}
</style>
<script>{get_plotlyjs()}</script></head>
<body><h1>{html.escape(title)}</h1>
{body}
<script id="data" type="application/json">{payload}</script>
<script>{script}</script>
</body></html>
"""


def sweep_page(
    frame: Any,
    run: Any,
    title: str = "",
    keys: Sequence[str] | None = None,
    progress: bool = False,
) -> str:
    """The sweep's page (a self-contained HTML string); ``keys``: the choice map's two axes;
    ``progress``: a stderr bar over the threshold-line search (on a terminal)."""
    if run.size > MAX_PAGE_POINTS:
        raise ScenarioError(
            f"the page embeds at most {MAX_PAGE_POINTS:,} points; this grid has {run.size:,}"
            " (write --out and vary fewer values for --html)",
            source="--html",
        )
    map_axes(run, keys)  # a bad --map fails before the lines are searched
    data = sweep_data(frame, run, keys, progress)
    title = title or f"tierwise sweep — {run.base.source}"
    body = """<div id="sliders"></div>
<div class="row"><div id="choice" class="plot"></div><div id="pareto" class="plot"></div></div>
<div id="times" class="row"></div>
<p id="notes"></p>"""
    data["notes"] = [*run.notes, *([data["lines"]["note"]] if data["lines"].get("note") else [])]
    return _page(title, body, data, _script("sweep_page.js"))


def plan_page(plan: Any) -> str:
    """One scenario's page: each site's time by part, and the options' Pareto front."""
    options = []
    for o in plan.options:
        energy = o.energy_key if np.isfinite(o.energy_key) else None
        options.append(
            {
                "site": o.site,
                "time_s": o.time_s,
                "energy_j": energy,
                "cost": o.extra.get("cost", 0.0),
                "feasible": o.feasible,
                "meets": o.meets_deadline,
                "breakdown": o.breakdown_s,
                "chosen": o.site == plan.choice,
            }
        )
    data = {"options": options, "reason": plan.reason}
    body = (
        '<p id="reason"></p>\n<div class="row"><div id="breakdown" class="plot"></div>'
        '<div id="pareto" class="plot"></div></div>'
    )
    title = f"tierwise plan — {plan.scenario.task.name}"
    return _page(title, body, data, _script("plan_page.js"))
