"""Every table a person reads keeps every number and name whole, at any width.

Each command's output at 200 columns is the reference: every word in it (a number with
its digits, a site's name, a header) must stand whole in the same output at 60, 80 and
120 columns, where a table that does not fit is drawn leaner or as one block per row.
"""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from tierwise.cli import app
from tierwise.scenario.loader import bundled_example

WIDTHS = (60, 80, 120)
BOX = re.compile(r"[─-╿]+")  # box-drawing characters: borders, not words
EXAMPLES = ["deployment", "photo-retouch", "photo-chunks", "screenshot-agent", "speech-request"]
COMMANDS = [
    *(["plan", "--example", name] for name in [*EXAMPLES, "voice-stream"]),
    ["plan", "--example", "deployment", "--set", "variability.trials=200"],
    ["catalog"],
    ["calc", "loop"],
    ["calc", "request"],
]


def words(text: str) -> set[str]:
    """The words of ``text`` with borders taken out."""
    return {w for w in BOX.sub(" ", text).split() if any(ch.isalnum() for ch in w)}


def output(args: list[str], columns: int) -> str:
    result = CliRunner().invoke(app, args, env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def test_the_reference_sees_a_cut_word() -> None:
    """The check can fail: a cut word (rich's "workstati…") is not the word."""
    assert not {"workstation", "20.4"} <= words("│ workstati… │ 20.4… │")


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_no_number_or_name_is_cut(args: list[str]) -> None:
    """At 60, 80 and 120 columns every word of the wide output is there, whole."""
    if args[:2] == ["plan", "--example"]:
        assert bundled_example(args[2]).exists()
    wide = words(output(args, 200))
    assert wide
    for columns in WIDTHS:
        text = output(args, columns)
        assert "…" not in text, f"{columns} columns:\n{text}"
        missing = wide - words(text)
        assert not missing, f"{columns} columns lost {sorted(missing)[:12]}:\n{text}"
