"""Calibration from a measured decode step (§12.5.2): the factor, its use and its errors."""

from __future__ import annotations

import pytest

from tests.conftest import calc_json, plan_example, run_cli
from tierwise.errors import ModelError, ScenarioError, UnitError
from tierwise.model.calibrate import parse_measured_step_s, slowdown_factor

MEASURED = ("site.workstation.measured_decode=25.83 ms", "site.workstation.measured_weights=bf16")


def test_calc_calibrate_is_the_chapter_factor() -> None:
    """`calc calibrate`: 25.83 ms against the 9.12 ms BF16 8K bound on 1,792 GB/s is 2.832."""
    got = calc_json("calibrate")
    assert got["bound_step_s"] == pytest.approx(9.12e-3, abs=5e-6)
    assert got["slowdown"] == pytest.approx(2.832, abs=5e-4)


def test_rate_and_time_forms_agree() -> None:
    """38.7 tokens/s is a 25.84 ms step; both forms give the same factor."""
    assert parse_measured_step_s("38.7 tokens/s") == pytest.approx(1 / 38.7)
    assert parse_measured_step_s("25.83 ms") == pytest.approx(0.02583)
    by_rate = plan_example(
        "deployment",
        "site.workstation.measured_decode=38.71 tokens/s",
        "site.workstation.measured_weights=bf16",
    )
    by_time = plan_example("deployment", *MEASURED)
    assert by_rate.option("workstation").time_s == pytest.approx(
        by_time.option("workstation").time_s, abs=0.01
    )


def test_measurement_is_used_and_noted() -> None:
    """The factor replaces the bound's 1.0 on the measured site only, with a note."""
    p = plan_example("deployment", *MEASURED)
    assert p.option("workstation").time_s == pytest.approx(16.04, abs=0.005)
    assert p.option("cloud").time_s == pytest.approx(31.6, abs=0.05)
    notes = " ".join(p.costs[1].notes)
    assert "25.83 ms measured / 9.121 ms bound (bf16, 8192 tokens)" in notes


def test_measured_in_task_format_by_default() -> None:
    """Without measured_weights the bound is the task's q4_0 one (3.05 ms), a larger factor."""
    p = plan_example("deployment", "site.workstation.measured_decode=25.83 ms")
    assert p.option("workstation").breakdown_s["model"] == pytest.approx(20 * 45 * 0.02583)


def test_faster_than_bound_is_refused() -> None:
    """A step below the bound cannot be a measurement of that bound."""
    with pytest.raises(ModelError, match="faster than the bandwidth bound"):
        slowdown_factor(0.002, 0.00912)
    with pytest.raises(ScenarioError, match=r"site\.workstation\.measured_decode"):
        plan_example(
            "deployment",
            "site.workstation.measured_decode=2 ms",
            "site.workstation.measured_weights=bf16",
        )


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (("site.cloud.measured_decode=3 parsecs",), ["measured_decode", "step time"]),
        (
            ("site.cloud.measured_decode=30 ms", "site.cloud.decode_slowdown=2"),
            ["measured_decode or decode_slowdown"],
        ),
        (("site.cloud.slowdown_from=moon",), ["slowdown_from", "moon", "workstation"]),
        (("site.cloud.slowdown_from=cloud",), ["slowdown_from"]),
        (("site.cloud.measured_weights=q9",), ["measured_weights", "q9"]),
    ],
)
def test_bad_calibration_input_names_the_key(overrides, words) -> None:
    """Each bad calibration key is one stderr line naming it, exit status 2."""
    args = ["plan"] + [a for o in overrides for a in ("--set", o)]
    if "measured_weights" in overrides[0]:
        args += ["--set", "site.cloud.measured_decode=30 ms"]
    run = run_cli(*args)
    assert run.code == 2 and run.stdout == ""
    assert len(run.stderr.strip().splitlines()) == 1
    for word in words:
        assert word in run.stderr


def test_unit_error_for_junk() -> None:
    """A bare number or a wrong dimension is not a step."""
    for junk in ("25.83", "3 MB", "-1 tokens/s"):
        with pytest.raises(UnitError):
            parse_measured_step_s(junk)


def test_plan_prints_the_chapters_calibrated_figures() -> None:
    """§12.5.2 as printed: the workstation 16.04 s, the cloud's floor 14.29 s, a 1.75 s gap."""
    run = run_cli(
        "plan", *(f"--set={s}" for s in MEASURED), "--set=site.cloud.slowdown_from=workstation"
    )
    assert run.code == 0, run.stderr
    text = " ".join(run.stdout.split())  # the table may wrap the line
    assert "cloud beats workstation (16.04 s) from 73.3 Mbit/s" in text
    assert "(its floor 14.29 s is 1.75 s under)" in text
