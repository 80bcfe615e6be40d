"""What every lab test shares: when the root tests run, and proof they leave nothing behind.

The root tests (real namespaces, TUN devices, the emulator, kernel TCP) run wherever
the host allows them — root, ``/dev/net/tun`` and ``ip`` — and so in CI; elsewhere
they skip with the reason :func:`tierwise.lab.lab_unavailable_reason` gives. They are
marked ``lab`` and ``slow``: ``pytest -m 'not lab'`` skips them locally.

A session fixture sweeps namespaces left by an earlier, killed run, turns SIGTERM
into KeyboardInterrupt while the lab tests run (so a CI timeout unwinds every
``with Path(...)`` like Ctrl-C does), and at the end checks that no namespace, TUN
device or emulator process is left that was not there before the session.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import pytest

from tests.conftest import Run
from tierwise.lab import lab_unavailable_reason
from tierwise.lab.bench import netns

SKIP_REASON = lab_unavailable_reason()

F = TypeVar("F", bound=Callable[..., object])


def lab(test: F) -> F:
    """Mark a test as needing the lab host (root, TUN, ip); skip it with the reason if not."""
    marked = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")(test)
    return pytest.mark.slow(pytest.mark.lab(marked))


@dataclass(frozen=True)
class HostState:
    """The lab's footprint on the host: our namespaces, TUN devices, emulator processes."""

    namespaces: frozenset[str]
    tun_devices: frozenset[str]
    emulators: frozenset[int]

    def __sub__(self, other: HostState) -> HostState:
        return HostState(
            self.namespaces - other.namespaces,
            self.tun_devices - other.tun_devices,
            self.emulators - other.emulators,
        )

    @property
    def empty(self) -> bool:
        return not (self.namespaces or self.tun_devices or self.emulators)


def host_state() -> HostState:
    """What of ours exists on the host right now (other live runs' paths are not ours)."""
    names = frozenset(
        n
        for n in netns.list_namespaces()
        if n.startswith(f"{netns.PREFIX}-") and _ours(_owner(n.split("-")[1]))
    )
    links = subprocess.run(
        ["ip", "-o", "link", "show", "type", "tun"], capture_output=True, text=True, check=True
    ).stdout
    devices = frozenset(
        name
        for name in (line.split(":")[1].strip().split("@")[0] for line in links.splitlines())
        if name.startswith(netns.PREFIX) and _ours(_owner(re.sub(r"[cs]\d+$", "", name[2:])))
    )
    return HostState(names, devices, frozenset(emulator_pids()))


def _owner(text: str) -> int:
    return int(text) if text.isdigit() else 0


# Every process this test session starts inherits the mark (even a detached `lab up`
# holder), so paths of other runs on a shared host are told apart from ours.
_MARK_KEY = "TIERWISE_LAB_TEST_SESSION"
os.environ.setdefault(_MARK_KEY, str(os.getpid()))
_MARK = f"{_MARK_KEY}={os.environ[_MARK_KEY]}".encode()


def _ours(pid: int) -> bool:
    """This process, one it started (by the inherited mark), or a dead owner."""
    if pid == os.getpid():
        return True
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return _MARK in f.read().split(b"\0")
    except FileNotFoundError:
        return True  # dead: what it left is left behind
    except OSError:
        return False


def run_lab_cli(*args: str, **env: str) -> Run:
    """`tierwise ARGS` in a subprocess as :func:`tests.conftest.run_cli` runs it, carrying
    this session's mark (so its paths count as ours) and ``env``."""
    proc = subprocess.run(
        [sys.executable, "-c", "from tierwise.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env={"COLUMNS": "160", "PATH": "/usr/bin:/bin", _MARK_KEY: os.environ[_MARK_KEY], **env},
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def emulator_pids() -> list[int]:
    """PIDs of running (not zombie) emulators this session started, found by command line."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"tierwise.lab.bench.emulator" in cmdline and state != "Z" and _ours(int(entry)):
            pids.append(int(entry))
    return pids


_BASELINE: list[HostState] = []


def left_behind() -> HostState:
    """Namespaces, devices and emulators that appeared since the lab session began."""
    nothing = HostState(frozenset(), frozenset(), frozenset())
    return host_state() - (_BASELINE[0] if _BASELINE else nothing)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session", autouse=True)
def lab_host_left_clean() -> Iterator[None]:
    """Sweep orphans first; afterwards, nothing new may remain on the host."""
    if SKIP_REASON is not None:
        yield
        return
    netns.cleanup_stale()
    _BASELINE.append(host_state())
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
    extra = left_behind()
    assert extra.empty, f"the lab tests left behind {extra}"
