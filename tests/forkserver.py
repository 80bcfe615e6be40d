"""``tierwise`` runs forked from a warm interpreter instead of started from scratch.

About 300 tests run the CLI as a user would and check its exit status, stdout and
stderr; a fresh ``python -c "from tierwise.cli import main; main()"`` pays the
interpreter's start-up and the import of typer, rich and pydantic (0.3-0.5 s idle,
2-3 s at load 5) before the command's own work. A :class:`ForkServer` is one such
interpreter, started the same way (``python -c``, the same environment, stdin and
working directory), that imports those modules once and then, per run, forks a child
that takes the run's working directory, arguments, stdout and stderr files and calls
``main()``. The child is a real process: its exit status, what it wrote to fds 1 and
2, an uncaught exception's traceback and the interpreter's exit (atexit handlers,
flushed streams) are its own. What it shares with its siblings is what the server
imported before forking, and the hash seed.

What a fork cannot show is the start-up itself (an import-time failure or warning
of a fresh interpreter), so the suite keeps fresh interpreters too: the first run of
each test module through ``tests.conftest.run_cli`` and the first run of each test
function in ``tests/cli``'s batches (tests/cli/batch.py) start from scratch, as does
every run with an environment of its own. tests/cli/test_startup.py checks what a
fresh start-up imports.

The server is single-threaded and imports nothing that starts threads (no numpy: the
commands that need it import it in the child, as a fresh run does).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

__all__ = ["SERVER_CODE", "ForkServer", "close_all", "fork_run"]

# Run as ``python -c SERVER_CODE FD``: __main__ and sys.path[0] ("") are a fresh ``-c`` run's.
SERVER_CODE = r"""
import json, os, socket, sys
control = socket.socket(fileno=int(sys.argv.pop(1)))
import tierwise.catalog, tierwise.cli, tierwise.scenario.loader  # typer, rich, pydantic
stream = control.makefile("rwb", buffering=0)


def child(request):
    stream.close()
    control.close()
    os.chdir(request["cwd"])
    for fd, path in ((1, request["out"]), (2, request["err"])):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = ["-c", *request["args"]]
    from tierwise.cli import main
    main()
    sys.exit(0)


def wait(pid, timeout_s):
    import time
    end = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, 0 if end is None else os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > end:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.002)


for line in stream:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(request)  # leaves by SystemExit, through this loop, as a fresh run ends
    code = wait(pid, request["timeout_s"])
    stream.write((json.dumps({"code": code}) + "\n").encode())
"""


class ForkServer:
    """One warm interpreter with ``env``; :meth:`run` forks a child per run, one at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = dict(env)
        ours, theirs = socket.socketpair()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", SERVER_CODE, str(theirs.fileno())],
            env=self.env,
            pass_fds=[theirs.fileno()],
            stdout=subprocess.DEVNULL,
        )
        theirs.close()
        self._socket = ours
        self._stream = ours.makefile("rwb", buffering=0)
        self._scratch = Path(tempfile.mkdtemp(prefix="tierwise-fork-"))

    def run(
        self, args: list[str], timeout_s: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``tierwise ARGS`` in a forked child, in this process's current directory."""
        out, err = self._scratch / "stdout", self._scratch / "stderr"
        request = {
            "args": list(args),
            "cwd": os.getcwd(),
            "out": str(out),
            "err": str(err),
            "timeout_s": timeout_s,
        }
        self._stream.write((json.dumps(request) + "\n").encode())
        answer = self._stream.readline()
        if not answer:
            raise RuntimeError(f"the fork server exited ({self._proc.wait()})")
        code = json.loads(answer)["code"]
        argv = [sys.executable, "-c", "(forked) main()", *args]
        if code is None:
            raise subprocess.TimeoutExpired(argv, timeout_s or 0.0)
        # read as subprocess.run(text=True) decodes: locale encoding, universal newlines
        return subprocess.CompletedProcess(argv, code, out.read_text(), err.read_text())

    def close(self) -> None:
        self._stream.close()
        self._socket.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for name in ("stdout", "stderr"):
            (self._scratch / name).unlink(missing_ok=True)
        self._scratch.rmdir()


_idle: dict[str, list[ForkServer]] = {}  # by environment: servers no run is using
_every: list[ForkServer] = []
_lock = threading.Lock()


def fork_run(
    args: list[str], env: dict[str, str], timeout_s: float | None = None
) -> subprocess.CompletedProcess[str]:
    """``tierwise ARGS`` forked from an idle server for ``env`` (one more is started when
    every server is busy: as many as runs at once, two in the CLI batches)."""
    key = json.dumps(env, sort_keys=True)
    with _lock:
        idle = _idle.setdefault(key, [])
        server = idle.pop() if idle else None
    if server is None:
        server = ForkServer(env)
        with _lock:
            _every.append(server)
    done = server.run(args, timeout_s)  # a server that failed is not used again
    with _lock:
        idle.append(server)
    return done


def close_all() -> None:
    """Stop every server (the end of the session)."""
    with _lock:
        servers = list(_every)
        _every.clear()
        _idle.clear()
    for server in servers:
        server.close()
