"""Margins, differences to the choice and savings against a baseline (§12.5.2)."""

from __future__ import annotations

import pytest

from tests.conftest import plan_example, run_cli
from tierwise.plan.compare import energy_difference_j


def _row(p, site):
    return next(r for r in p.comparison if r["site"] == site)


def test_margins_and_difference_to_choice() -> None:
    """§12.5.2: cloud 13.4 s early, phone 19.0 s late; workstation 20.6 s faster than cloud."""
    p = plan_example("deployment", thresholds=False)
    assert _row(p, "cloud")["margin_s"] == pytest.approx(13.4, abs=0.05)
    assert _row(p, "phone")["margin_s"] == pytest.approx(-19.0, abs=0.05)
    assert _row(p, "workstation")["vs_choice_time_s"] == pytest.approx(-20.6, abs=0.05)
    assert _row(p, "cloud")["vs_choice_time_s"] == 0
    assert _row(p, "workstation")["vs_choice_energy_j"] == pytest.approx(690, abs=10)
    assert "saving_time_s" not in _row(p, "cloud")


def test_baseline_saving_with_energy_range() -> None:
    """Against the phone, the cloud saves 32.4 s and spends 442–604 J more (an interval)."""
    p = plan_example("deployment", "decision.baseline=phone", thresholds=False)
    cloud = _row(p, "cloud")
    assert cloud["saving_time_s"] == pytest.approx(32.4, abs=0.05)
    lo, hi = cloud["saving_energy_j"]
    assert lo == pytest.approx(518 - 1124, abs=3) and hi == pytest.approx(680 - 1124, abs=3)
    assert _row(p, "phone")["saving_time_s"] == 0


def test_energy_difference_intervals() -> None:
    """Scalars subtract; a range on either side gives the widest interval; None stays None."""
    assert energy_difference_j(10.0, 4.0) == 6.0
    assert energy_difference_j([1.0, 3.0], 2.0) == [-1.0, 1.0]
    assert energy_difference_j(5.0, [1.0, 2.0]) == [3.0, 4.0]
    assert energy_difference_j(None, 2.0) is None


def test_cli_baseline_lines_and_json() -> None:
    """`plan --baseline phone` prints margins and savings; JSON carries the rows."""
    text = run_cli("plan", "--baseline", "phone")
    assert text.code == 0, text.stderr
    assert "cloud 13.4 s to spare" in text.stdout
    assert "saving against phone: workstation saves 53.0 s" in text.stdout
    data = run_cli("plan", "--baseline", "phone", "--json").json()
    assert data["baseline"] == "phone"
    assert {r["site"] for r in data["comparison"]} == {"phone", "workstation", "cloud"}


def test_unknown_baseline_is_one_line() -> None:
    """A baseline that names no site is one stderr line naming decision.baseline."""
    run = run_cli("plan", "--baseline", "moon")
    assert run.code == 2 and run.stdout == ""
    assert "decision.baseline" in run.stderr and "moon" in run.stderr
