"""The what-if page in a real headless browser: loads cleanly, regions, sliders."""

from __future__ import annotations

import json
import re
import shutil
from functools import cache

import numpy as np
import pytest

from tierwise.plan.planner import plan_file
from tierwise.plan.sweep_table import open_sweep, sweep
from tierwise.report.html import plan_page, sweep_page
from tierwise.scenario.loader import bundled_example

pytest.importorskip("plotly")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
DEPLOYMENT = str(bundled_example("deployment"))
AXES = [
    "site.cloud.uplink=1..100 Mbit/s:log:30",
    "site.cloud.rtt=20..300 ms:20",
    "task.rounds=20,40,10",
]


@cache
def _sweep():
    return sweep(DEPLOYMENT, AXES), open_sweep(DEPLOYMENT, AXES)


def regions(grid: np.ndarray) -> int:
    """Connected regions (4-neighbour) of equal values in a 2-D grid."""
    seen = np.zeros(grid.shape, dtype=bool)
    count = 0
    for start in zip(*np.nonzero(~seen), strict=True):
        if seen[start]:
            continue
        count += 1
        stack = [start]
        seen[start] = True
        while stack:
            i, j = stack.pop()
            for a, b in ((i + 1, j), (i - 1, j), (i, j + 1), (i, j - 1)):
                if 0 <= a < grid.shape[0] and 0 <= b < grid.shape[1] and not seen[a, b]:
                    if grid[a, b] == grid[i, j]:
                        seen[a, b] = True
                        stack.append((a, b))
    return count


def expected_winners(rounds: int) -> np.ndarray:
    """The choice map at ``rounds`` from the sweep's rows: rows rtt, columns uplink."""
    frame, _ = _sweep()
    sites = ["phone", "workstation", "cloud"]
    part = frame[frame["task.rounds"] == rounds]
    grid = np.full((20, 30), -1)
    for _, row in part[part["chosen"]].iterrows():
        i = int(np.searchsorted(np.unique(part["site.cloud.rtt"]), row["site.cloud.rtt"]))
        j = int(np.searchsorted(np.unique(part["site.cloud.uplink"]), row["site.cloud.uplink"]))
        grid[i, j] = sites.index(row["site"])
    return grid


def test_page_is_self_contained():
    """One file: plotly inline, no external script or stylesheet, the data embedded."""
    frame, run = _sweep()
    text = sweep_page(frame, run)
    assert not re.search(r"<script[^>]+src=", text)
    assert "<link" not in text
    data = re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S)
    assert json.loads(data.group(1))["sites"] == ["phone", "workstation", "cloud"]


@pytest.fixture(scope="module")
def browser():
    if not shutil.which("chromium") and not shutil.which("/usr/bin/chromium"):
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _open(browser, path):
    page = browser.new_page(viewport={"width": 1300, "height": 1500})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_function("document.getElementById('pareto').data !== undefined")
    return page, errors


@pytest.mark.slow
def test_sweep_page_in_chromium(browser, tmp_path):
    """No console errors; the choice map has the sweep's regions; the slider redraws it."""
    frame, run = _sweep()
    path = tmp_path / "sweep.html"
    path.write_text(sweep_page(frame, run), encoding="utf-8")
    page, errors = _open(browser, path)
    z = np.array(page.evaluate("document.getElementById('choice').data[0].z"))
    want = expected_winners(20)
    assert (z == want).all()
    assert regions(z) == regions(want) == 2  # workstation at low uplink, cloud above
    _check_drawn_lines(page, z)
    hover = page.evaluate("document.getElementById('pareto').data[2].text[0]")
    assert "cloud" in hover and "upload" in hover and "energy" in hover  # the breakdown
    page.locator("#slider-0").focus()
    page.keyboard.press("End")  # rounds 20 → 10
    z10 = np.array(page.evaluate("document.getElementById('choice').data[0].z"))
    assert (z10 == expected_winners(10)).all()
    assert not (z10 == z).all()  # the slider changed the picture
    assert regions(z10) == regions(expected_winners(10))
    _check_drawn_lines(page, z10)
    page.screenshot(path=str(tmp_path / "sweep.png"), full_page=True)
    assert errors == []


def _check_drawn_lines(page, z: np.ndarray) -> None:
    """Every drawn threshold step lies between two map cells of different winners.

    Lines searched along the uplink (x) hold each RTT row's threshold across its cell:
    two points with the same uplink whose RTTs straddle the row's RTT; lines searched
    along the RTT (y) likewise per uplink column (a null point where a row has none).
    """
    traces = page.evaluate(
        "document.getElementById('choice').data.slice(1)"
        ".map(t => [t.x, t.y, t.name, t.legendgroup])"
    )
    grid = {
        "x": np.array(page.evaluate("document.getElementById('choice').data[0].x")),
        "y": np.array(page.evaluate("document.getElementById('choice').data[0].y")),
    }
    found = {"x": 0, "y": 0}
    for xs, ys, name, group in traces:
        assert " | " in name and group in ("along-x", "along-y")
        along = group[-1]
        at, across = (xs, ys) if along == "x" else (ys, xs)
        cells = z if along == "x" else z.T  # rows: the other axis; columns: along
        other = grid["y" if along == "x" else "x"]
        k = 0
        while k < len(at):
            if at[k] is None:
                k += 1
                continue
            assert at[k] == at[k + 1] and across[k] < across[k + 1]
            inside = np.nonzero((other > across[k]) & (other < across[k + 1]))[0]
            assert inside.size == 1  # the step spans exactly one row's cell
            row, j = int(inside[0]), int(np.searchsorted(grid[along], at[k])) - 1
            assert grid[along][j] < at[k] <= grid[along][j + 1]
            assert cells[row, j] != cells[row, j + 1]
            found[along] += 1
            k += 2
    assert found["x"] == int((z[:, 1:] != z[:, :-1]).sum())
    assert found["y"] == int((z[1:, :] != z[:-1, :]).sum())


def test_console_error_check_can_fail(browser, tmp_path):
    """The harness sees a page's console error and a thrown exception (so [] means clean)."""
    path = tmp_path / "broken.html"
    path.write_text(
        "<html><body><div id='pareto'></div><script>console.error('boom');"
        "document.getElementById('pareto').data = [];"
        "setTimeout(() => { throw new Error('bang'); });"
        "</script></body></html>"
    )
    page, errors = _open(browser, path)
    seen = lambda: any("boom" in e for e in errors) and any("bang" in e for e in errors)  # noqa: E731
    for _ in range(200):  # until both arrive (a loaded host is slow), at most 10 s
        if seen():
            break
        page.wait_for_timeout(50)
    assert seen(), errors


@pytest.mark.slow
def test_plan_page_in_chromium(browser, tmp_path):
    """`tierwise plan --html`'s page loads cleanly and marks the choice."""
    path = tmp_path / "plan.html"
    path.write_text(plan_page(plan_file(DEPLOYMENT)), encoding="utf-8")
    page, errors = _open(browser, path)
    assert "choice: cloud" in page.inner_text("#reason")
    symbols = page.evaluate("document.getElementById('pareto').data[0].marker.symbol")
    assert symbols == ["circle", "circle", "star"]
    assert errors == []
