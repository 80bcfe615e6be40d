"""Figures of a plan: which files each task kind gets, and that they are valid images."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import plan_example, plan_text
from tierwise.report.figures import buffer_curve, plan_figures, stall_intervals, uplink_sites

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SVG_ROOT = "{http://www.w3.org/2000/svg}svg"

DEVICE_ONLY = """
[task]
name = "on-device retouch"
kind = "request"
upload = "30 MB"
download = "5 MB"
deadline = "2 s"

[task.compute]
time = "0.3 s"

[[site]]
name = "phone"
tier = "device"
"""


def _names(paths: list[Path]) -> set[str]:
    return {p.name for p in paths}


def _expected(*figures: str) -> set[str]:
    return {f"{f}.{ext}" for f in figures for ext in ("png", "svg")}


def _assert_valid(paths: list[Path]) -> None:
    for path in paths:
        assert path.is_file() and path.stat().st_size > 0, path
        if path.suffix == ".png":
            assert path.read_bytes().startswith(PNG_SIGNATURE), path
        else:
            assert ET.parse(path).getroot().tag == SVG_ROOT, path


@pytest.mark.parametrize(
    ("example", "figures"),
    [
        ("deployment", ("breakdown", "uplink")),
        ("voice-stream", ("breakdown", "playout", "buffer")),
        ("photo-chunks", ("breakdown", "uplink")),
    ],
)
def test_bundled_examples_get_their_figures(tmp_path, example, figures):
    """Each bundled example writes exactly its figures, as valid PNG and SVG, into the folder."""
    paths = plan_figures(plan_example(example), tmp_path)
    assert _names(paths) == _expected(*figures)
    assert {p.parent for p in paths} == {tmp_path}
    assert _names(list(tmp_path.iterdir())) == _expected(*figures)
    _assert_valid(paths)


def test_device_only_scenario_has_no_uplink_figure(tmp_path):
    """A task that never leaves the device gets no uplink figure."""
    paths = plan_figures(plan_text(DEVICE_ONLY), tmp_path)
    assert _names(paths) == _expected("breakdown")
    _assert_valid(paths)


def test_folder_is_created(tmp_path):
    """A folder that does not exist yet is created, parents included."""
    folder = tmp_path / "a" / "b"
    paths = plan_figures(plan_example("photo-retouch"), folder)
    assert folder.is_dir() and all(p.parent == folder for p in paths)


def test_infeasible_remote_sites_get_no_uplink_curve():
    """Residency on the device makes every remote site infeasible: nothing to sweep (§12.5)."""
    assert [o.site for o in uplink_sites(plan_example("deployment"))] == ["workstation", "cloud"]
    assert uplink_sites(plan_example("deployment", "task.residency=device")) == []


def test_voice_stream_stalls_once_for_the_late_third_chunk():
    """Figure 12-6: the third chunk (index 2) arrives at 123 ms, 5 ms after its planned 118 ms."""
    play = plan_example("voice-stream").option("server").extra["play_s"]
    [(chunk, start, end)] = stall_intervals(play, 0.020)
    assert chunk == 2
    assert start == pytest.approx(0.118) and end == pytest.approx(0.123)


def _direct_buffer(t: float, arrive: np.ndarray, play: np.ndarray, period: float) -> float:
    return period * np.sum(arrive <= t) - np.sum(np.clip(t - play, 0.0, period))


def test_buffer_curve_matches_the_direct_sum():
    """Between breakpoints the curve is linear and equals arrived minus played audio."""
    option = plan_example("voice-stream").option("server")
    arrive, play = np.array(option.extra["arrive_s"]), np.array(option.extra["play_s"])
    t, level = buffer_curve(arrive, play, 0.020)
    probes = np.random.default_rng(12).uniform(0.0, option.time_s, 300)
    assert np.interp(probes, t, level) == pytest.approx(
        [_direct_buffer(x, arrive, play, 0.020) for x in probes], abs=1e-12
    )


def test_buffer_curve_shape_for_figure_12_6():
    """40 ms buffered at first play, flat during the stall, empty when playback ends (§12.1.2)."""
    option = plan_example("voice-stream").option("server")
    t, level = buffer_curve(option.extra["arrive_s"], option.extra["play_s"], 0.020)
    assert np.interp(0.078, t, level) == pytest.approx(0.040)
    assert np.interp([0.1185, 0.120, 0.1225], t, level) == pytest.approx([0.040] * 3)
    assert level.min() >= -1e-12 and level[-1] == pytest.approx(0.0, abs=1e-12)


def test_figures_leave_pyplot_alone(tmp_path):
    """Saving figures never imports pyplot, so no global backend is chosen or figure kept."""
    code = (
        "import sys; from pathlib import Path\n"
        "from tierwise.plan.planner import plan_file\n"
        "from tierwise.scenario.loader import bundled_example\n"
        "from tierwise.report.figures import plan_figures\n"
        f"plan_figures(plan_file(bundled_example('voice-stream')), Path({str(tmp_path)!r}))\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_cli_plan_plot_saves_and_lists_figures(cli, tmp_path):
    """`tierwise plan --plot DIR` exits 0, writes the figures and names them."""
    folder = tmp_path / "figs"
    run = cli("plan", "--plot", str(folder))
    assert run.code == 0, run.stderr
    expected = _expected("breakdown", "uplink")
    assert _names(list(folder.iterdir())) == expected
    listed = run.stdout.replace("\n", "")
    for name in expected:
        assert str(folder / name) in listed


@pytest.mark.parametrize("huge_s", [float("inf"), 1e308])
def test_overflowed_option_is_left_out_of_the_figures(tmp_path: Path, huge_s: float) -> None:
    """An option whose time overflowed is not drawn; the others still are."""
    p = plan_example("deployment", thresholds=False)
    cloud = p.option("cloud")
    cloud.time_s = huge_s
    cloud.breakdown_s = {k: huge_s for k in cloud.breakdown_s}
    saved = plan_figures(p, tmp_path)
    assert {s.name for s in saved} >= {"breakdown.png", "breakdown.svg"}
    assert all(s.stat().st_size > 0 for s in saved)
