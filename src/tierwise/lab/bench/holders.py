"""`tierwise lab up`'s holders: the process that keeps a path, its state file, stopping it.

A holder is a detached process running :func:`hold`: it brings an
:class:`~tierwise.lab.bench.path.EmulatedPath` up, writes its state file under
:data:`STATE_DIR`, prints that state as one JSON line and keeps the path until SIGTERM.

The state file ``lab-<pid>.json`` names the holder's pid, the process's start time (field
22 of ``/proc/PID/stat``, clock ticks since boot) and the user who asked for the path
(``SUDO_UID`` under sudo, else the real uid). A pid alone is not an identity: once
the holder is gone the kernel may give its number to any process, and ``lab down``
runs as root. So a holder is signalled only through a pidfd (``pidfd_open``, Linux
≥ 5.3) opened *before* its start time and command line are checked: the descriptor
pins that one process, so no reuse can slip in between the check and the signal.
A state file whose process is gone or is someone else is stale and removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from tierwise.errors import LabError
from tierwise.outfile import write_text

__all__ = [
    "HOLDER_MARK",
    "STATE_DIR",
    "HolderState",
    "caller_uid",
    "hold",
    "is_holder",
    "read_states",
    "start_ticks",
    "stop",
    "write_state",
]

STATE_DIR = Path("/run/tierwise")  # where holders write their state files
HOLDER_MARK = "from tierwise.lab.bench.holders import hold; hold()"  # a holder's command line
STOP_TIMEOUT_S = 10.0
KILL_TIMEOUT_S = 2.0


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def caller_uid() -> int:
    """The user behind this command: the one who ran sudo, else the real uid."""
    sudo = os.environ.get("SUDO_UID", "")
    return int(sudo) if sudo.isdigit() else os.getuid()


@dataclass(frozen=True)
class HolderState:
    """What a state file says; ``file`` is where it was read from."""

    file: Path
    pid: int
    start_ticks: int | None
    uid: int | None
    data: dict

    @classmethod
    def read(cls, file: Path) -> HolderState | None:
        """The state in ``file``; None if it cannot be read or is not a holder's."""
        try:
            data = json.loads(file.read_text())
            pid = int(data["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        ticks, uid = data.get("start_ticks"), data.get("uid")
        return cls(file, pid, ticks if isinstance(ticks, int) else None, uid, data)


def write_state(file: Path, data: dict) -> None:
    """Write ``data`` with this process's identity, atomically (a reader never sees half)."""
    pid = os.getpid()
    full = {**data, "pid": pid, "start_ticks": start_ticks(pid)}
    write_text(file, json.dumps(full))


def read_states(folder: Path) -> tuple[list[HolderState], list[Path]]:
    """The readable state files in ``folder``, and the unreadable ones."""
    states, broken = [], []
    for file in sorted(folder.glob("lab-*.json")):
        state = HolderState.read(file)
        if state is None:
            broken.append(file)
        else:
            states.append(state)
    return states, broken


def is_holder(state: HolderState) -> bool:
    """Whether the process ``state.pid`` is the holder that wrote ``state`` (same start time,
    a holder's command line)."""
    if state.start_ticks is None or start_ticks(state.pid) != state.start_ticks:
        return False
    try:
        with open(f"/proc/{state.pid}/cmdline", "rb") as f:
            return HOLDER_MARK.encode() in f.read()
    except OSError:
        return False


def stop(state: HolderState) -> bool:
    """SIGTERM the holder (SIGKILL after :data:`STOP_TIMEOUT_S`) and remove its state file.

    Returns False, signalling nothing, when the process is gone or is not that holder
    (its state file is stale and is removed all the same).
    """
    try:
        pidfd = os.pidfd_open(state.pid)
    except ProcessLookupError:
        state.file.unlink(missing_ok=True)
        return False
    except OSError as exc:  # a kernel before 5.3 has no pidfd_open
        raise LabError(f"cannot stop holder {state.pid} safely: pidfd_open: {exc}") from exc
    try:
        if not is_holder(state):
            return False
        with contextlib.suppress(ProcessLookupError):  # it may end on its own meanwhile
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
            if not _exited(pidfd, STOP_TIMEOUT_S):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                _exited(pidfd, KILL_TIMEOUT_S)
        return True
    finally:
        os.close(pidfd)
        with contextlib.suppress(OSError):
            state.file.unlink()


def _exited(pidfd: int, timeout_s: float) -> bool:
    """Wait until the process behind ``pidfd`` exits (a pidfd turns readable then)."""
    ready, _, _ = select.select([pidfd], [], [], timeout_s)
    return bool(ready)


def hold() -> None:
    """Holder entry: bring the path up, report it as JSON, keep it until SIGTERM."""
    from tierwise.lab.bench.emulator import Direction
    from tierwise.lab.bench.path import EmulatedPath, PathConfig

    spec = json.loads(sys.stdin.readline())
    uid = spec.pop("uid", None)
    config = PathConfig(
        Direction.from_dict(spec["a"]), Direction.from_dict(spec["b"]), spec["seed"]
    )
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    state_file = STATE_DIR / f"lab-{os.getpid()}.json"
    try:
        with EmulatedPath(config) as path:
            state = {
                "pid": os.getpid(),
                "uid": uid,
                "state_file": str(state_file),
                "client_ns": path.client_ns,
                "server_ns": path.server_ns,
                "client_addr": path.client_addr,
                "server_addr": path.server_addr,
                "devices": [path.client_dev, path.server_dev],
                "config": spec,
            }
            write_state(state_file, state)
            _say(json.dumps(state))
            while not stop:
                signal.pause()
    except Exception as exc:  # the parent shows this line and exits 2
        _say(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        state_file.unlink(missing_ok=True)


def _say(line: str) -> None:
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        pass
