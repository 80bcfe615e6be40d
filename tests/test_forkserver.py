"""The fork server (tests/forkserver.py): a forked run is the fresh run's twin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CLI_ENV
from tests.forkserver import ForkServer
from tierwise.scenario.loader import bundled_example

CASES = {
    "a result": ["plan", "--example", "deployment", "--json"],
    "a usage error": ["plan", "--no-such-option"],
    "a user error": ["calc", "no-such-entry", "--json"],
    "help": ["calc", "--help"],
}


@pytest.fixture(scope="module")
def server():
    started = ForkServer(CLI_ENV)
    yield started
    started.close()


@pytest.mark.parametrize("args", CASES.values(), ids=CASES.keys())
def test_forked_run_equals_a_fresh_interpreter(server: ForkServer, args: list[str]) -> None:
    """Exit status, stdout and stderr of a forked run are a fresh ``python -c`` run's."""
    fresh = subprocess.run(
        [sys.executable, "-c", "from tierwise.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=CLI_ENV,
    )
    forked = server.run(args)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )


def test_forked_run_uses_the_callers_directory(
    server: ForkServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative path names a file in the caller's current directory, as it would."""
    (tmp_path / "mine.toml").write_bytes(Path(bundled_example("deployment")).read_bytes())
    monkeypatch.chdir(tmp_path)
    done = server.run(["plan", "mine.toml", "--json"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["choice"]
    assert sorted(os.listdir(tmp_path)) == ["mine.toml"]


def test_a_run_past_its_time_limit_is_killed(server: ForkServer) -> None:
    """A run that outlives ``timeout_s`` is killed and raises TimeoutExpired; the server
    serves the next run."""
    with pytest.raises(subprocess.TimeoutExpired):
        server.run(["plan", "--example", "deployment"], timeout_s=0.001)
    assert server.run(["calc", "--help"]).returncode == 0
