"""Output held whole: written at once, in an encoding the destination has, or one error."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierwise.console import DEFAULT_COLUMNS, MAX_COLUMNS, WholeConsole, WholeStdout, encodable
from tierwise.errors import ScenarioError


@given(st.text(max_size=200))
def test_any_text_is_encodable_in_ascii(text: str) -> None:
    """Whatever a report holds, an ASCII destination gets bytes it can take."""
    data = encodable(text, "ascii")
    assert data.isascii() and len(data) == len(text)  # one character for one


def test_stand_ins_keep_one_character_each() -> None:
    """'—', '…', '§', 'µ' become one ASCII character, so rich's borders stay aligned."""
    text = "cloud — §12.3 … 5 µs ≥ 3 → ∞"
    assert len(encodable(text, "ascii")) == len(text)
    assert b"?" not in encodable(text, "ascii")


@pytest.mark.parametrize(
    ("columns", "width"),
    [("0", DEFAULT_COLUMNS), ("1", DEFAULT_COLUMNS), ("99999999", MAX_COLUMNS)],
)
def test_a_console_width_is_one_a_table_fits(columns: str, width: int, monkeypatch) -> None:
    """COLUMNS=0 drew one character per line; it now draws at the default width."""
    monkeypatch.setenv("COLUMNS", columns)
    assert WholeConsole(file=io.StringIO()).width == width


class _Full(io.StringIO):
    encoding = "utf-8"

    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize(("real", "reason"), [(None, "closed"), (_Full(), "No space left")])
def test_an_unwritable_stdout_is_one_scenario_error(real, reason: str, monkeypatch) -> None:
    """A closed or full stdout: one ScenarioError naming stdout, not an OSError."""
    monkeypatch.setattr("tierwise.console._silence_stdout", lambda: None)
    whole = WholeStdout(real)
    whole.write("a table\n")
    with pytest.raises(ScenarioError, match=f"stdout: cannot write the output: .*{reason}"):
        whole.write_whole()


def test_what_was_held_is_written_once_and_whole() -> None:
    """Nothing reaches the destination before write_whole; then all of it."""
    real = io.StringIO()
    whole = WholeStdout(real)
    whole.write("first\n")
    whole.write("second\n")
    assert real.getvalue() == ""
    whole.write_whole()
    assert real.getvalue() == "first\nsecond\n"
