"""The lab's request experiment and its CLI (§12.3.5).

Option parsing and the error paths run everywhere; the experiment itself needs
root, ``/dev/net/tun`` and ``ip``, and is opt-in with ``TIERWISE_LAB=1`` like
``test_lab_path.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import run_cli
from tierwise.errors import LabError, ScenarioError, UnitError
from tierwise.lab import lab_unavailable_reason, netns
from tierwise.lab.cli import build_experiment
from tierwise.lab.experiment import RequestExperiment, predict, run_experiment, serial_floor_s


def _lab_skip_reason() -> str | None:
    if os.environ.get("TIERWISE_LAB") != "1":
        return "lab suite opt-in (TIERWISE_LAB=1) until issue 5 lands"
    return lab_unavailable_reason()


_SKIP = _lab_skip_reason()
lab = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

DEFAULTS = dict(
    size="354640",
    proc="30ms",
    response="1000",
    modes="cold,warm,warm-tuned",
    runs=20,
    cc=None,
    rtt="200ms",
    rate="100Mbit/s",
    loss_up=0.0,
    loss_down=0.0,
    seed=0,
)


def _build(**changes: object) -> RequestExperiment:
    return build_experiment(**{**DEFAULTS, **changes})


# --- everywhere ----------------------------------------------------------------------


def test_options_parse_to_si_units() -> None:
    """--size/--proc/--rtt/--rate in human units become bytes, seconds and bytes/s."""
    exp = _build(size="0.35 MB", proc="0.03 s", rtt="200 ms", rate="100 Mbit/s", modes="warm, cold")
    assert exp.size_bytes == 350_000
    assert exp.processing_s == pytest.approx(0.03)
    assert exp.rtt_s == pytest.approx(0.2)
    assert exp.rate_bytes_per_s == pytest.approx(12.5e6)
    assert exp.modes == ("warm", "cold")
    assert _build().size_bytes == 354_640  # a bare integer is a byte count


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"rtt": "200"}, UnitError),
        ({"rate": "100 MB"}, UnitError),
        ({"proc": "-5 ms"}, ScenarioError),
        ({"loss_down": 1.5}, ScenarioError),
        ({"modes": "cold,lukewarm"}, LabError),
        ({"cc": "vegas"}, LabError),
    ],
)
def test_bad_options_are_typed_errors(changes: dict, error: type[Exception]) -> None:
    """Each bad option raises a TierwiseError subclass that names the problem."""
    with pytest.raises(error):
        _build(**changes)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--rtt", "200"], "has no unit"),
        (["--rate", "fast"], "rate"),
        (["--size", "12 parsecs"], "size"),
    ],
)
def test_unit_errors_exit_2_with_one_line(args: list[str], needle: str) -> None:
    """A unit error in `lab request` is one line on stderr and exit status 2."""
    run = run_cli("lab", "request", *args)
    assert run.code == 2
    assert len(run.stderr.strip().splitlines()) == 1
    assert needle in run.stderr and run.stdout == ""


@pytest.mark.parametrize("args", [["up"], ["down"], ["request", "--runs", "1"]])
def test_without_root_every_lab_command_exits_2(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not root: the LabError names the fix in one line, exit 2, nothing created."""
    from tierwise.cli import main

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sys, "argv", ["tierwise", "lab", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "needs root" in err


def test_predictions_for_the_chapter_request() -> None:
    """Closed form: floor 0.258 s; cold adds 1 RTT handshake and 4 stalled rounds (§12.3.5)."""
    exp = RequestExperiment()
    assert serial_floor_s(exp) == pytest.approx(0.2 + 354_640 / 12.5e6 + 0.03 + 1000 / 12.5e6)
    cold = predict(exp, "cold", 10 * 1448, "cubic")
    assert cold["closed_form_s"] == pytest.approx(0.258 + 0.2 + 0.783, abs=0.002)
    assert cold["sim_s"] == pytest.approx(cold["closed_form_s"], rel=0.05)
    tuned = predict(exp, "warm-tuned", 300 * 1448, "cubic")
    assert tuned["window_wait_s"] == 0.0
    assert tuned["sim_s"] == pytest.approx(serial_floor_s(exp), rel=0.02)


# --- root: real kernel TCP -------------------------------------------------------------


def _leftovers() -> tuple[list[str], str]:
    ours = [n for n in netns.list_namespaces() if n.startswith(f"{netns.PREFIX}-")]
    tun = subprocess.run(
        ["ip", "-o", "link", "show", "type", "tun"], capture_output=True, text=True
    )
    return ours, tun.stdout.strip()


@lab
def test_warm_tuned_reaches_the_serial_floor_and_cold_is_3x_slower() -> None:
    """§12.3.5 acceptance: 200 ms, 100 Mbit/s, 354,640 B, 30 ms; cold ≥ 3× warm-tuned ≈ floor."""
    exp = RequestExperiment(runs=5, cc="cubic")
    result = run_experiment(exp)
    summary = result["summary"]
    floor = serial_floor_s(exp)
    assert floor == pytest.approx(0.258, abs=0.001)
    assert summary["cold"]["median_s"] >= 3 * summary["warm-tuned"]["median_s"]
    assert summary["warm-tuned"]["median_s"] == pytest.approx(floor, rel=0.15)
    assert summary["warm-tuned"]["median_s"] >= floor - 0.005  # nothing beats the floor
    assert result["server_cc_seen"] == ["cubic"]
    assert len(result["samples"]) == 15
    order = [s["mode"] for s in result["samples"][:6]]
    assert order == ["cold", "warm", "warm-tuned"] * 2  # alternated run by run
    cold = result["samples"][0]["events_s"]
    assert cold["connect_start"] < cold["connect_end"] <= cold["first_sent"] <= cold["last_sent"]
    assert cold["last_sent"] < cold["first_response"] <= cold["last_response"]
    assert result["emulator"]["up"]["lost"] == 0
    assert _leftovers() == ([], "")


@lab
def test_lab_up_and_down_leave_nothing_behind() -> None:
    """`lab up` holds a path after the command exits; `lab down` removes all of it."""
    up = run_cli("lab", "up", "--rtt", "20ms", "--rate", "10Mbit/s")
    assert up.code == 0, up.stderr
    names, _ = _leftovers()
    assert len(names) == 2 and all(f"ip netns exec {n}" in up.stdout for n in names)
    down = run_cli("lab", "down")
    assert down.code == 0, down.stderr
    assert "stopped the path" in down.stdout
    assert _leftovers() == ([], "")
    ps = subprocess.run(["ps", "-eo", "cmd"], capture_output=True, text=True).stdout
    assert "tierwise.lab" not in ps
