"""Ctrl-C or SIGTERM at any moment of `tierwise …`, loading included: 130 or 143, no traceback.

The program is started as pip's console script starts it (a launcher built from
pyproject.toml's entry point, run by this interpreter), so what is tested is what an
install runs. A signal is sent at several delays after the child's interpreter is up
(its own SIGINT handler installed, read from /proc/PID/status), spread over the
~0.3 s the command spends loading and a little past its end.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC_PACKAGE = str(ROOT / "src" / "tierwise")
DELAYS_MS = (0, 15, 30, 50, 80, 120, 170, 230, 300, 400)

# pip's console-script launcher (pip/_internal/operations/install/wheel.py), verbatim
LAUNCHER = """\
import re
import sys
from {module} import {attr}
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit({attr}())
"""


@pytest.fixture(scope="module")
def launcher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `tierwise` script pip would write for pyproject.toml's entry point."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    module, _, attr = project["project"]["scripts"]["tierwise"].partition(":")
    path = tmp_path_factory.mktemp("bin") / "tierwise"
    path.write_text(LAUNCHER.format(module=module, attr=attr))
    return path


def caught(pid: int) -> int:
    """The mask of signals ``pid`` has handlers for (SigCgt), 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(r"^SigCgt:\s*([0-9a-f]+)", status, re.M)
    return int(found.group(1), 16) if found else 0


def interrupted(launcher: Path, signum: int, ready: int, delay_s: float) -> tuple[int, str]:
    """Start `tierwise --help`, wait until it catches ``ready``, then ``delay_s``, then
    send ``signum``: its exit status and stderr."""
    proc = subprocess.Popen(
        [sys.executable, str(launcher), "--help"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not caught(proc.pid) & (1 << (ready - 1)):
        assert proc.poll() is None and time.monotonic() < deadline, "never caught the signal"
        time.sleep(0.0005)
    time.sleep(delay_s)
    if proc.poll() is None:
        proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err


def ours(stderr: str) -> list[str]:
    """The traceback frames in the tierwise package (a signal the program failed to
    handle), as opposed to the interpreter's own start-up before any code of ours."""
    return [line for line in stderr.splitlines() if line.strip().startswith(f'File "{SRC_PACKAGE}')]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_loading_is_one_word_and_its_exit_status(
    launcher: Path, signum: int
) -> None:
    """From the interpreter's start on: no traceback from the package's loading (there
    used to be one for Ctrl-C until ~0.3 s), and exit 128 + the signal or 0 (done)."""
    if not caught(os.getpid()):
        pytest.skip("no SigCgt in /proc/PID/status")
    outcomes = [interrupted(launcher, signum, signal.SIGINT, ms / 1e3) for ms in DELAYS_MS]
    for ms, (code, err) in zip(DELAYS_MS, outcomes, strict=True):
        assert not ours(err), (ms, err)
        if "Traceback" in err or code == -signum:  # before the launcher's import: not ours
            continue
        assert code in (0, 128 + signum), (ms, code, err)
        if code:
            assert err == {signal.SIGINT: "aborted\n", signal.SIGTERM: "terminated\n"}[signum]
    stopped = sum(code == 128 + signum for code, _ in outcomes)
    assert stopped >= 3, f"only {stopped} of {len(DELAYS_MS)} runs were stopped: {outcomes}"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_once_our_code_runs_every_signal_is_handled(launcher: Path, signum: int) -> None:
    """From the entry module's first line (it catches SIGTERM): always 128 + the
    signal, one word, or 0 if the help was done — never a traceback. One more outcome
    is the interpreter's, not ours: after the command has ended, Python's finalization
    restores each signal's default action, and a signal then ends the process by that
    action (status −signal, nothing printed), as for any program at its exit (seen in
    CI at 300 ms)."""
    if not caught(os.getpid()):
        pytest.skip("no SigCgt in /proc/PID/status")
    for ms in DELAYS_MS[::2]:
        code, err = interrupted(launcher, signum, signal.SIGTERM, ms / 1e3)
        assert "Traceback" not in err and "Exception ignored" not in err, (ms, err)
        assert code in (0, 128 + signum) or (code == -signum and not err), (ms, code, err)


def test_a_signal_the_parent_ignores_stays_ignored(launcher: Path) -> None:
    """`nohup`, a background job: SIGINT ignored at the start is not caught by the entry
    module either, so `--help` runs to its end (exit 0) through any number of them."""
    proc = subprocess.Popen(
        [sys.executable, str(launcher), "--help"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.02)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Usage" in out and err == "", (proc.returncode, err)


def test_the_entry_module_loads_nothing_of_ours() -> None:
    """Importing `_tierwise_entry` (the launcher's first import) loads no tierwise module:
    its handlers are in place before the package's ~0.25 s of imports start."""
    code = "import _tierwise_entry, json, sys; print(json.dumps(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    loaded = json.loads(run.stdout)
    assert [m for m in loaded if m == "tierwise" or m.startswith("tierwise.")] == []


LOST_IN_A_CALLBACK = """\
import os, signal, sys, time, weakref
from tierwise.cli import Terminated, install_signals
install_signals()
class Thing:
    pass
def callback(_ref):
    os.kill(os.getpid(), {signum})
    for _ in range(100_000):  # the handler runs in here, where its exception is lost
        pass
thing = Thing()
ref = weakref.ref(thing, callback)
try:
    del thing
    time.sleep(5)
    print("carried on")
except KeyboardInterrupt as exc:
    print(type(exc).__name__)
"""


@pytest.mark.parametrize(
    ("signum", "raised"), [(signal.SIGINT, "KeyboardInterrupt"), (signal.SIGTERM, "Terminated")]
)
def test_a_signal_inside_a_weakref_callback_still_unwinds(signum: int, raised: str) -> None:
    """A signal whose exception is raised inside a weakref callback (as an import's module
    lock has) is not lost there: it is raised again in the program, which unwinds."""
    run = subprocess.run(
        [sys.executable, "-c", LOST_IN_A_CALLBACK.format(signum=int(signum))],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert run.stdout == f"{raised}\n" and "ignored" not in run.stderr, run
