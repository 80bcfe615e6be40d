"""Network namespaces owned by this process: create, enter, run in, delete, clean up.

Every namespace is named ``tw-<pid>-<tag>`` after the process that created it, so a
later run can tell its own namespaces from those a crashed run left behind
(:func:`cleanup_stale`). Nothing here changes the root namespace except adding and
removing those names.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tierwise.errors import LabError

__all__ = [
    "PREFIX",
    "cleanup_stale",
    "create",
    "delete",
    "entered",
    "exec_argv",
    "ip",
    "lab_unavailable_reason",
    "list_namespaces",
    "namespace_name",
    "owned",
    "require_lab",
]

PREFIX = "tw"
NETNS_DIR = Path("/run/netns")  # where `ip netns add` bind-mounts a namespace
TUN_PATH = Path("/dev/net/tun")
CLONE_NEWNET = 0x40000000  # <linux/sched.h>
IP_TIMEOUT_S = 10.0
NO_IP = "the `ip` command (iproute2) is missing: `apt-get install -y iproute2`"

_OWNED = re.compile(rf"^{PREFIX}-(\d+)-")


def lab_unavailable_reason() -> str | None:
    """Why the lab cannot run on this host (with the fix), or None when it can."""
    if os.geteuid() != 0:
        return "the lab needs root (network namespaces and TUN devices): run as root or with sudo"
    if not TUN_PATH.exists():
        return (
            f"{TUN_PATH} is missing: load the tun module (`modprobe tun`) or, in a "
            "container, pass the device (`--device /dev/net/tun --cap-add NET_ADMIN`)"
        )
    if shutil.which("ip") is None:
        return NO_IP
    return None


def require_lab() -> None:
    """Raise :class:`LabError` naming what is missing and the fix."""
    reason = lab_unavailable_reason()
    if reason is not None:
        raise LabError(reason)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS``; a failure becomes a :class:`LabError` quoting its stderr."""
    argv = ["ip", *args]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    except FileNotFoundError as exc:
        raise LabError(NO_IP) from exc
    if check and proc.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed: {proc.stderr.strip()}")
    return proc


def namespace_name(tag: str, pid: int | None = None) -> str:
    """``tw-<pid>-<tag>``: the owner's PID lets :func:`cleanup_stale` find orphans."""
    return f"{PREFIX}-{os.getpid() if pid is None else pid}-{tag}"


def list_namespaces() -> list[str]:
    """Names of all namespaces ``ip netns`` knows (ours and others')."""
    out = ip("netns", "list").stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def create(name: str) -> None:
    """Add namespace ``name`` with its loopback up."""
    ip("netns", "add", name)
    try:
        ip("-n", name, "link", "set", "lo", "up")
    except LabError:
        delete(name)
        raise


def delete(name: str) -> None:
    """Remove namespace ``name``; a namespace that is already gone is not an error."""
    proc = ip("netns", "delete", name, check=False)
    if proc.returncode != 0 and name in list_namespaces():
        raise LabError(f"cannot delete namespace {name}: {proc.stderr.strip()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale() -> list[str]:
    """Delete ``tw-<pid>-*`` namespaces whose owning process is dead; return their names.

    TUN devices need no sweep: they are not persistent, so the kernel removes each one
    when the last descriptor (the emulator's) closes, even after ``kill -9``.
    """
    removed = []
    for name in list_namespaces():
        match = _OWNED.match(name)
        if match and not _alive(int(match.group(1))):
            delete(name)
            removed.append(name)
    return removed


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise LabError(f"setns failed: {os.strerror(err)} (the lab needs root)")


@contextmanager
def entered(name: str) -> Iterator[None]:
    """Move the calling thread into namespace ``name`` for the block, then back.

    Sockets created inside stay in that namespace after the block, so one Python
    process can hold endpoints in several namespaces without helper processes.
    """
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(NETNS_DIR / name, os.O_RDONLY)
    except FileNotFoundError as exc:
        os.close(home)
        raise LabError(f"namespace {name} does not exist") from exc
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


@contextmanager
def owned(tag: str) -> Iterator[str]:
    """Namespace ``tw-<pid>-<tag>`` for the block (created, then deleted however it ends)."""
    name = namespace_name(tag)
    create(name)
    try:
        yield name
    finally:
        delete(name)


def exec_argv(name: str, argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` inside namespace ``name`` (for subprocess)."""
    return ["ip", "netns", "exec", name, *argv]
