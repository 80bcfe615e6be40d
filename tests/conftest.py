"""Shared fixtures: run the CLI in-process and plan scenarios from text."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.forkserver import close_all, fork_run
from tests.peerjobs import PeerJobs, quiet_safe
from tierwise.plan.planner import plan
from tierwise.scenario.loader import bundled_example, parse_scenario

# Property tests judge values, not speed: hypothesis's default 200 ms deadline per
# example and its too-slow health check fail a test when a loaded CI machine (load 2-8
# on 2 cores) merely runs it slowly. Each test's @settings still sets its example count.
settings.register_profile("tierwise", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tierwise")

# A suite started as a background job of a shell without job control (`cmd &` in a
# script) inherits SIGINT ignored, and so would every process it starts: the tests that
# interrupt a run with SIGINT (Ctrl-C: exit 130, nothing left behind) then saw it finish
# normally, and the paths it had left failed the lab tests after it. With a handler here
# the processes this suite starts get SIGINT's default action (exec resets a handled
# signal, not an ignored one).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The relay's ends keep path memory in the user's state directory by default
# (relay/pathmemory.py): each test, and every process it starts, gets a state directory
# of its own under one of this run, so no test starts from what another measured and
# none writes to the home directory.
_STATE_ROOT = tempfile.mkdtemp(prefix="tierwise-state-")
_state_dirs = itertools.count()


@pytest.fixture(autouse=True)
def _own_state_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    state = os.path.join(_STATE_ROOT, str(next(_state_dirs)))  # made when first written
    monkeypatch.setenv("XDG_STATE_HOME", state)
    monkeypatch.setitem(CLI_ENV, "XDG_STATE_HOME", state)


# Tests marked @peer_job (tests/peerjobs.py) run last, after the tests of QUIET_SAFE
# directories; their subprocess jobs start, one at a time in a thread, at the first of those.
_PEER_JOBS = PeerJobs()
_TESTS_DIR = Path(__file__).resolve().parent
_peer_start: list[pytest.Item] = []  # the test at which the jobs start, once known


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "peer_job(fn): the test's `peer` fixture is fn(workdir, **params), started early "
        "on the idle core (tests/peerjobs.py)",
    )


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: only selected tests' jobs run
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """With peer jobs selected: the other tests first, those in QUIET_SAFE directories
    after them (each group in collection order), the peer-job tests last."""
    jobs = [item for item in items if PeerJobs.job_of(item) is not None]
    if not jobs:
        return
    rest = [item for item in items if PeerJobs.job_of(item) is None]
    safe = [item for item in rest if quiet_safe(item, _TESTS_DIR)]
    items[:] = [item for item in rest if not quiet_safe(item, _TESTS_DIR)] + safe + jobs
    _peer_start[:] = [(safe or jobs)[0]]


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _peer_start and item is _peer_start[0]:
        for later in item.session.items[item.session.items.index(item) :]:
            _PEER_JOBS.start(later)


def pytest_sessionfinish() -> None:
    _PEER_JOBS.close()
    close_all()


@pytest.fixture
def peer(request: pytest.FixtureRequest):
    """A callable giving this test's @peer_job result (waiting for it if it is running)."""
    yield lambda: _PEER_JOBS.result(request.node)[0]
    _PEER_JOBS.forget(request.node)


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)


CLI_ENV = {"COLUMNS": "160", "PATH": "/usr/bin:/bin"}
_started_fresh: set[str] = set()  # test files whose first run_cli started an interpreter
_fresh_lock = threading.Lock()


def run_cli(*args: str, fresh: bool = False) -> Run:
    """Run ``tierwise ARGS`` as a user would (a process of its own, so exit codes and
    stderr are real): the first run of each test file (or ``fresh``) in a new
    interpreter, the others forked from a warm one (tests/forkserver.py)."""
    test_file = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0]
    with _fresh_lock:
        fresh = fresh or test_file not in _started_fresh
        _started_fresh.add(test_file)
    if fresh:
        proc = subprocess.run(
            [sys.executable, "-c", "from tierwise.cli import main; main()", *args],
            capture_output=True,
            text=True,
            env=CLI_ENV,
        )
    else:
        proc = fork_run(list(args), CLI_ENV)
    return Run(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli():
    return run_cli


@cache
def calc_json(name: str, *args: str) -> dict:
    """Run ``tierwise calc NAME ARGS --json`` in-process and return the parsed JSON."""
    from typer.testing import CliRunner

    from tierwise.cli import app

    result = CliRunner().invoke(app, ["calc", name, *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def plan_text(text: str, *overrides: str):
    """Plan a scenario given as TOML text."""
    return plan(parse_scenario(text, source="test.toml", overrides=overrides), source="test.toml")


def plan_example(name: str = "deployment", *overrides: str, thresholds: bool = True):
    """Plan a bundled example with ``--set``-style overrides."""
    path = bundled_example(name)
    return plan(
        parse_scenario(Path(path).read_text(), source=str(path), overrides=overrides),
        source=str(path),
        thresholds=thresholds,
    )
