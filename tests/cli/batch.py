"""Run a test module's CLI cases two at a time, each still a real ``tierwise`` process.

The first call of each test function starts a new interpreter; the others are
children forked from a warm one (tests/forkserver.py): real processes, exit statuses
and streams, without the interpreter's start-up.

A test declares its runs with :func:`cli_calls`: a function of the test's parameters
that returns ``{label: Call}``. The module-scoped ``cli_batch`` fixture
(tests/cli/conftest.py) looks at the tests pytest selected in that module, writes each
call's files into a folder of its own and starts every call in a pool of two threads
(one process each); a test then
waits only for its own runs (fixture ``cli_runs``). Unselected tests' calls never run,
so ``-k`` stays cheap.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI_ENV, Run
from tests.forkserver import fork_run


@dataclass(frozen=True)
class Call:
    """``tierwise ARGS`` with ``files`` (name, bytes, mode) written first into its folder.

    ``{dir}`` in ``args`` stands for that folder. ``env`` replaces run_cli's environment.
    """

    args: tuple[str, ...]
    files: tuple[tuple[str, bytes, int], ...] = ()
    env: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True)
class Done:
    """One finished call: its run, its folder and how long the process took."""

    run: Run
    dir: Path
    seconds: float


FileData = str | bytes | tuple[str | bytes, int]


def call(
    *args: str, files: dict[str, FileData] | None = None, env: dict[str, str] | None = None
) -> Call:
    """A :class:`Call`. A file is text (written as UTF-8) or bytes, mode 0o644, or a
    ``(data, mode)`` pair."""
    encoded = []
    for name, value in (files or {}).items():
        data, mode = value if isinstance(value, tuple) else (value, 0o644)
        encoded.append((name, data.encode("utf-8") if isinstance(data, str) else data, mode))
    return Call(tuple(args), tuple(encoded), None if env is None else tuple(sorted(env.items())))


Builder = Callable[..., dict[str, Call]]


def cli_calls(builder: Builder) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a test whose runs ``builder(**params)`` declares (params: its parametrization)."""

    def mark(test: Callable[..., Any]) -> Callable[..., Any]:
        test.cli_builder = builder  # type: ignore[attr-defined]
        return test

    return mark


def calls_of(item: pytest.Item) -> dict[str, Call]:
    builder = getattr(getattr(item, "function", None), "cli_builder", None)
    if builder is None:
        return {}
    callspec = getattr(item, "callspec", None)
    params = dict(callspec.params) if callspec is not None else {}
    return builder(**params)


def _execute(c: Call, folder: Path, fresh: bool) -> Done:
    folder.mkdir(parents=True)
    for name, data, mode in c.files:
        (folder / name).write_bytes(data)
        (folder / name).chmod(mode)
    args = [a.replace("{dir}", str(folder)) for a in c.args]
    start = time.monotonic()
    if fresh or c.env is not None:
        proc = subprocess.run(
            [sys.executable, "-c", "from tierwise.cli import main; main()", *args],
            capture_output=True,
            text=True,
            env=CLI_ENV if c.env is None else dict(c.env),
            timeout=300,
        )
    else:
        proc = fork_run(args, CLI_ENV, timeout_s=300)
    seconds = time.monotonic() - start
    return Done(Run(proc.returncode, proc.stdout, proc.stderr), folder, seconds)


class Batch:
    """Futures of every selected call of one module, started in collection order.

    The calls in ``fresh`` start a new interpreter; the others are forked from a warm
    one (tests/forkserver.py), as are calls a test asks for that were not batched.
    """

    def __init__(self, calls: list[Call], root: Path, fresh: frozenset[Call] = frozenset()) -> None:
        self._pool = ThreadPoolExecutor(max_workers=2)
        self._root = root
        self._futures: dict[Call, Future[Done]] = {}
        for c in calls:
            self._submit(c, c in fresh)

    def _submit(self, c: Call, fresh: bool = False) -> Future[Done]:
        if c not in self._futures:  # the same call twice (same args and files) runs once
            folder = self._root / f"call{len(self._futures)}"
            self._futures[c] = self._pool.submit(_execute, c, folder, fresh)
        return self._futures[c]

    def result(self, c: Call) -> Done:
        return self._submit(c).result()

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)
