"""Every command's help names what each option takes, never a type placeholder."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from tierwise.cli import app

PLACEHOLDER = re.compile(r"<(bool|str|int|float|list\[[^\]]*\]|Path|path|text)>", re.IGNORECASE)


def _commands(group: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    for name, sub in getattr(group, "commands", {}).items():  # a group (typer's own click)
        found += _commands(sub, (*prefix, name))
    return found


COMMANDS = _commands(typer.main.get_command(app))


def test_the_walk_finds_the_nested_commands() -> None:
    """The tree holds the top level, plan, and commands two deep (lab request, relay client)."""
    assert {(), ("plan",), ("lab", "request"), ("relay", "client"), ("route",)} <= {
        c[:2] for c in COMMANDS
    }


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "tierwise")
def test_help_has_no_type_placeholders(command: tuple[str, ...]) -> None:
    """`tierwise … --help`: flags show no value, options a name, paths PATH; no <bool>."""
    if command == ("calc",):
        pytest.skip("calc --help lists the models, not typer options")
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "--help" in result.output
    assert not PLACEHOLDER.search(result.output), PLACEHOLDER.findall(result.output)


def test_a_valued_option_names_its_value_and_a_flag_shows_none() -> None:
    """--plot PATH and --objective OBJECTIVE beside a bare --json."""
    out = CliRunner().invoke(app, ["plan", "--help"], env={"COLUMNS": "120"}).output
    assert re.search(r"--plot\s+PATH\b", out) and re.search(r"--objective\s+OBJECTIVE\b", out)
    assert re.search(r"--json\s{2,}Print JSON", out), out
