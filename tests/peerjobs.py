"""Long subprocess work a test waits for, run early on the core pytest leaves idle.

pytest runs one test at a time, so on a 2-core machine one core idles through most of
the suite. A few tests spend nearly all their time waiting for subprocesses whose
inputs are fixed before the test starts: the ns-3 peer runs of the cross-checks and
the mypyc build with its probes. Such a test is marked ``@peer_job(fn)``; the suite
(tests/conftest.py) moves these tests to its end, after the tests of the
:data:`QUIET_SAFE` directories (which move behind all others), and from the first of
those on runs their jobs one at a time in a thread (one subprocess at a time, the other
core's share). Each test then takes its
own job's result from the ``peer`` fixture and checks it exactly as before; a job that
raised raises in its test. With ``-k`` or one file, only the selected tests' jobs run,
and a test whose job did not start early runs it when it starts.

The directories whose tests run beside the jobs are computations in the test's
process, without wall-clock bounds a busy second core could break (the few bounds
there are hang guards of 30 s or a budget many times the work); the lab, relay, route,
proto (the relay's real-time tests), plan (Dask clusters), CLI (two runs at a time)
and fuzz tests all run before the jobs start. Without peer-job tests selected, the
order is pytest's own.
"""

from __future__ import annotations

import inspect
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

__all__ = ["QUIET_SAFE", "PeerJobs", "peer_job"]

F = TypeVar("F", bound=Callable[..., object])

# Top-level entries of tests/ (directories, or "" for the files in tests/ itself) whose
# tests may run while a peer job takes the other core.
QUIET_SAFE = frozenset({"", "model", "scenario", "sim"})


def peer_job(fn: Callable[..., Any]) -> Callable[[F], F]:
    """Mark a test whose ``peer`` fixture is ``fn(workdir, **params)``.

    ``workdir`` is a fresh directory (removed after the test) and ``params`` the
    test's parametrize values that ``fn`` names.
    """
    return pytest.mark.peer_job.with_args(fn)


def _call(fn: Callable[..., Any], item: pytest.Item, workdir: Path) -> Any:
    params = getattr(getattr(item, "callspec", None), "params", {})
    names = inspect.signature(fn).parameters
    return fn(workdir, **{k: v for k, v in params.items() if k in names})


class PeerJobs:
    """The session's jobs: started in collection order, one at a time, results by test."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._jobs: dict[str, tuple[Future[Any], Path]] = {}
        self._leftover: list[Path] = []
        self._lock = threading.Lock()

    @staticmethod
    def job_of(item: pytest.Item) -> Callable[..., Any] | None:
        marker = item.get_closest_marker("peer_job")
        return None if marker is None else marker.args[0]

    def start(self, item: pytest.Item) -> None:
        """Queue ``item``'s job (once)."""
        fn = self.job_of(item)
        if fn is None:
            return
        with self._lock:
            if item.nodeid in self._jobs:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="peer-job")
            workdir = Path(tempfile.mkdtemp(prefix="tierwise-peer-"))
            future = self._pool.submit(_call, fn, item, workdir)
            self._jobs[item.nodeid] = (future, workdir)

    def result(self, item: pytest.Item) -> tuple[Any, Path]:
        """``item``'s job result (started now if it was not) and its workdir."""
        self.start(item)
        with self._lock:
            future, workdir = self._jobs[item.nodeid]
        return future.result(), workdir

    def forget(self, item: pytest.Item) -> None:
        """Drop ``item``'s job and its workdir (after the test)."""
        with self._lock:
            job = self._jobs.pop(item.nodeid, None)
        if job is None:
            return
        job[0].cancel()
        if job[0].done():
            shutil.rmtree(job[1], ignore_errors=True)
        else:  # still running (its test ended without waiting): removed at the end
            self._leftover.append(job[1])

    def close(self) -> None:
        """Cancel the jobs not started, wait for a running one, remove every workdir."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        for workdir in [*(w for _, w in self._jobs.values()), *self._leftover]:
            shutil.rmtree(workdir, ignore_errors=True)
        self._jobs.clear()
        self._leftover.clear()


def quiet_safe(item: pytest.Item, tests_dir: Path) -> bool:
    """Whether ``item`` is in a directory of :data:`QUIET_SAFE`."""
    try:
        rel = Path(item.path).resolve().relative_to(tests_dir)
    except ValueError:
        return False
    top = rel.parts[0] if len(rel.parts) > 1 else ""
    return top in QUIET_SAFE
