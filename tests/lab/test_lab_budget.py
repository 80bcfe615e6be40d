"""Predictions beside a lab run are bounded: a simulation that never ends is abandoned.

The README's ``lab request --factor initcwnd=10,40,300`` on a host whose default
congestion control is bbr once hung in the simulator's prediction (bbr and bbr-linux
at an initial window of 300 behind the SYN window). These run everywhere (no root).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tierwise.lab.bench.budget import BudgetExceeded, wall_budget
from tierwise.lab.cli.request import render_factor
from tierwise.lab.experiments.request import RequestExperiment, simulated_s

README_PREDICTIONS = """
import json, sys
from tierwise.lab.experiments import request as experiment
from tierwise.lab.cli.common import build_experiment
from tierwise.lab.experiments.factors import parse_factor, resolve_mode, summarise_factor

experiment.PREDICTION_BUDGET_S = 1.0  # the bound under test, kept short
factor = parse_factor("initcwnd=10,40,300")
mode = resolve_mode(factor, None)
exp = build_experiment("354640", "30ms", "1000", mode, 1, None, "200ms", "100Mbit/s", 0.0, 0.0, 0)
samples = [{"level": label, "time_s": 1.0, "tcp_before": {}} for label in factor.labels]
print(json.dumps(summarise_factor(samples, exp, factor, mode, sys.argv[1])))
"""


def test_wall_budget_stops_a_loop_that_never_returns() -> None:
    """A busy loop under a 0.2 s budget raises BudgetExceeded; the old handler is restored."""
    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(BudgetExceeded, match=r"0\.2 s"):
        with wall_budget(0.2):
            while True:
                pass
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_wall_budget_lets_a_quick_block_through_and_disarms() -> None:
    """A block that ends in time returns its work, and no alarm fires afterwards.

    The budget is 0.5 s so that a loaded host cannot stretch the block past it; the
    sleep outlasts the budget, so an alarm left armed would raise inside it.
    """
    with wall_budget(0.5):
        total = sum(range(1000))
    time.sleep(0.6)  # a stray alarm would raise here
    assert total == 499500
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.mark.parametrize("sim_cc", ["bbr", "bbr-linux"])
def test_a_cold_initcwnd_300_prediction_finishes_for_bbr(sim_cc: str) -> None:
    """bbr and bbr-linux at IW 300 behind the SYN window: a time, or blank with the reason."""
    sim_s, note = simulated_s(RequestExperiment(), "cold", 300, sim_cc, budget_s=1.0)
    if sim_s is None:
        assert note is not None and sim_cc in note and "1 s" in note
    else:
        assert 0.6 < sim_s < 5.0 and note is None


@pytest.mark.parametrize("cc", ["bbr", "cubic"])
def test_the_readme_factor_command_predicts_every_level(cc: str) -> None:
    """`lab request --factor initcwnd=10,40,300`'s prediction path ends, on a bbr host too."""
    run = subprocess.run(
        [sys.executable, "-c", README_PREDICTIONS, cc],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert list(summary) == ["10", "40", "300"]
    for level in summary.values():
        assert level["closed_form_s"] > 0.6
        assert (level["sim_s"] is None) == ("sim_note" in level)
    assert summary["10"]["sim_s"] is not None  # a normal prediction is not abandoned
    if cc == "cubic":
        assert all(level["sim_s"] is not None for level in summary.values())


def test_an_abandoned_prediction_shows_a_dash_and_the_reason(capsys) -> None:
    """The table prints '—' in the sim column and one line saying why."""
    from rich.console import Console

    level = {
        "runs": 1,
        "median_s": 0.9,
        "p90_s": 0.9,
        "p99_s": 0.9,
        "closed_form_s": 0.85,
        "sim_s": None,
        "sim_note": "sim (bbr-linux, initial window 300) did not finish within 10 s; left blank",
    }
    result = {
        "factor": "initcwnd",
        "mode": "cold",
        "kernel": "6.1",
        "summary": {"300": level},
        "fixed": ["cc bbr"],
        "order": [["300"]],
        "parameters": {
            "size_bytes": 354640,
            "response_bytes": 1000,
            "processing_s": 0.03,
            "rtt_s": 0.2,
            "rate_bytes_per_s": 12.5e6,
        },
    }
    console = Console(width=200, record=True)
    render_factor(console, result)
    text = console.export_text()
    assert "—" in text
    assert "did not finish within 10 s" in text
