"""Ending a child process the one way the lab, its worlds and the tests all do."""

from __future__ import annotations

import signal
import subprocess

__all__ = ["stop"]


def stop(
    proc: subprocess.Popen, grace_s: float = 10.0, *, kill: bool = False, close: bool = False
) -> int:
    """SIGTERM (or SIGKILL with ``kill``) unless it has ended, up to ``grace_s`` to exit,
    then SIGKILL; with ``close``, its stderr pipe closed (nobody reads it after). Its exit
    status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if close and proc.stderr is not None:
        proc.stderr.close()
    return proc.returncode
