"""Every benchmark script answers a bad argument with one error line and exit 2.

The scripts are commands users type from docs/benchmarks.md, so they follow the
project's rule for bad input: no traceback, nothing run. Each case is rejected
while parsing, before any measurement starts.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"

CASES = [
    ("flows_kernel.py", ["/nonexistent/run.json"], "/nonexistent/run.json"),
    ("flows_kernel.py", ["x.json", "--trace", "0"], "--trace"),
    ("lab_emulator.py", ["--size", "4"], "--size"),
    ("lab_rounds.py", ["--cc", "vegas"], "--cc"),
    ("lab_rounds.py", ["--initcwnd", "0"], "--initcwnd"),
    ("mc_vs_loop.py", ["--trials", "0"], "--trials"),
    ("ns3_crosscheck.py", ["--cc", "vegas"], "--cc"),
    ("ns3_crosscheck.py", ["--loss", "1.5"], "--loss"),
    ("plan_scale.py", ["--sites", "-3"], "--sites"),
    ("relay_bulk.py", ["--mb", "nan"], "--mb"),
    ("relay_cpu.py", ["--phases", "sideways"], "--phases"),
    ("relay_cpu.py", ["--mb", "0"], "--mb"),
    ("relay_fec.py", ["--loss", "2"], "--loss"),
    ("relay_flood_lab.py", ["--classes", "client-random"], "--classes"),
    ("relay_flood_lab.py", ["--seconds", "0"], "--seconds"),
    ("relay_gateway_stats.py", ["--few", "0"], "--few"),
    ("relay_native.py", ["--cases", "bulk99"], "--cases"),
    ("relay_sim.py", ["--requests", "0"], "--requests"),
    ("relay_sim.py", ["--cold", "-2"], "--cold"),
    ("relay_trace.py", ["--runs", "x"], "--runs"),
    ("route_estimators.py", ["--samples", "0"], "--samples"),
    ("route_gateway.py", ["--concurrent", "-1"], "--concurrent"),
    ("route_keepalive.py", ["--ages", "3.9,x"], "--ages"),
    ("route_keepalive.py", ["--stall", "0"], "--stall"),
    ("route_keepalive.py", ["--baseline", "/nonexistent/src"], "--baseline"),
    ("sim_flows.py", ["--trace", "abc"], "--trace"),
    ("sim_flows.py", ["--windows", "615:10", "--cut", "5-"], "--cut"),
    ("sim_flows.py", ["--flows", "0"], "--flows"),
    ("sim_scaling.py", ["--regimes", "huge"], "--regimes"),
    ("sim_scaling.py", ["--sizes", "x"], "--sizes"),
    ("sim_vs_ns3.py", ["--cells", "bbr:deep", "--paths", "pure"], "--cells"),
    ("startup.py", ["--peer", "src", "--repeats", "0"], "--repeats"),
    ("sweep_dask.py", ["--points", "0"], "--points"),
    ("sweep_grid.py", ["--sample", "x"], "--sample"),
]


def _run(case: tuple[str, list[str], str]) -> subprocess.CompletedProcess[str]:
    script, argv, _flag = case
    return subprocess.run(
        [sys.executable, str(BENCH / script), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=BENCH.parent,
    )


@pytest.fixture(scope="module")
def results() -> dict[int, subprocess.CompletedProcess[str]]:
    """Every case's run, two interpreters at a time (each is a fresh start-up)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(enumerate(pool.map(_run, CASES)))


@pytest.mark.parametrize(
    "index", range(len(CASES)), ids=[f"{c[0]} {' '.join(c[1])}" for c in CASES]
)
def test_bad_argument_is_one_line_and_exit_2(
    index: int, results: dict[int, subprocess.CompletedProcess[str]]
) -> None:
    proc, flag = results[index], CASES[index][2]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    errors = [line for line in proc.stderr.splitlines() if "error" in line or flag in line]
    assert errors and flag in proc.stderr, proc.stderr
