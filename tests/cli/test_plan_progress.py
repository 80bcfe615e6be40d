"""`tierwise plan`: a progress bar on stderr for a long threshold search, and only then."""

from __future__ import annotations

import pytest

from tierwise.cli import PLAN_BAR_SITES, _threshold_bar


def _drive(total: int) -> None:
    with _threshold_bar() as step:
        for done in range(total + 1):
            step(done, total)


def test_many_sites_on_a_terminal_show_a_bar(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """At PLAN_BAR_SITES sites on a terminal the bar names the search; stdout stays clean."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich: treat stderr as a terminal
    _drive(PLAN_BAR_SITES)
    captured = capsys.readouterr()
    assert f"thresholds of {PLAN_BAR_SITES:,} sites" in captured.err
    assert captured.out == ""


@pytest.mark.parametrize(("total", "terminal"), [(PLAN_BAR_SITES - 1, True), (1000, False)])
def test_no_bar_for_few_sites_or_off_a_terminal(
    total: int, terminal: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Few sites, or stderr not a terminal (a log, a pipe): nothing at all on stderr."""
    monkeypatch.delenv("FORCE_TERMINAL", raising=False)
    monkeypatch.setenv("TTY_COMPATIBLE", "1" if terminal else "0")
    _drive(total)
    assert capsys.readouterr().err == ""
