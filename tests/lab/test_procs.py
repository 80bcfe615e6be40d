"""tierwise.lab.bench.procs.stop: a child that exits on SIGTERM, one that ignores it, one
already gone."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from tierwise.lab.bench.procs import stop

IGNORE_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print(1, flush=True); time.sleep(60)"
)


def test_a_child_that_obeys_sigterm_ends_with_it() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert stop(proc) == -signal.SIGTERM


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", IGNORE_TERM], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"1\n"
    t0 = time.monotonic()
    assert stop(proc, 0.3, close=True) == -signal.SIGKILL
    assert 0.3 <= time.monotonic() - t0 < 5
    assert proc.stderr is not None and proc.stderr.closed
    proc.stdout.close()


def test_a_child_already_gone_keeps_its_status() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    assert stop(proc, kill=True) == 3
