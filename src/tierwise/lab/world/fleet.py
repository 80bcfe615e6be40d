"""A fleet's real parts on loopback: Debian's ``redis-server`` and ``haproxy``, started here.

:func:`redis_server` runs a Redis on a free loopback port (no persistence, optionally a
password, an ACL user and TLS) and :func:`haproxy` a round-robin load balancer in front
of gateway replicas; both are stopped on every exit. :func:`missing` names what is not
installed, for a clean skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tierwise.lab.world.model_server import free_port

__all__ = ["Haproxy", "Redis", "haproxy", "missing", "redis_server", "wait_port"]


def missing(*programs: str) -> str | None:
    """Why the fleet's parts cannot run here (a program not on PATH), or None."""
    gone = [p for p in programs if shutil.which(p) is None and not Path(f"/usr/sbin/{p}").exists()]
    if gone:
        return f"{', '.join(gone)} not installed (Debian: apt-get install {' '.join(gone)})"
    return None


def _which(program: str) -> str:
    return shutil.which(program) or f"/usr/sbin/{program}"


def wait_port(port: int, timeout_s: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    """Until something accepts on ``127.0.0.1:port`` (or the process died)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-400:] if proc.stderr else ""
            raise RuntimeError(f"exited with {proc.returncode} before listening: {err}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout_s} s")
        time.sleep(0.02)


@dataclass
class Redis:
    """A running redis-server: its port, URL and process (to stop, kill or restart)."""

    port: int
    args: list[str]
    proc: subprocess.Popen[bytes]
    tls: bool = False

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def kill(self) -> None:
        """SIGKILL: everything it held is gone."""
        self.proc.kill()
        self.proc.wait()

    def start(self) -> None:
        """Start it again on the same port (empty)."""
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_port(self.port, proc=self.proc)

    def pause(self) -> None:
        """SIGSTOP: connections stay open, nothing answers (a slow or partitioned server)."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)


@contextlib.contextmanager
def redis_server(
    password: str | None = None,
    user: str | None = None,
    tls: tuple[str, str, str] | None = None,
) -> Iterator[Redis]:
    """A redis-server on a free loopback port until the block ends. ``password`` sets the
    default user's; with ``user`` an ACL user of that password is made instead (the
    default user disabled); ``tls`` = (cert, key, CA) files serves TLS only."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="tierwise-redis-") as tmp:
        args = [_which("redis-server"), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", tmp, "--protected-mode", "no"]  # fmt: skip
        if tls is not None:
            cert, key, ca = tls
            args += ["--port", "0", "--tls-port", str(port), "--tls-cert-file", cert,
                     "--tls-key-file", key, "--tls-ca-cert-file", ca,
                     "--tls-auth-clients", "no"]  # fmt: skip
        else:
            args += ["--port", str(port)]
        if password is not None and user is None:
            args += ["--requirepass", password]
        elif user is not None:
            acl = Path(tmp) / "users.acl"
            acl.write_text(f"user default off\nuser {user} on >{password} ~* &* +@all\n")
            args += ["--aclfile", str(acl)]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        r = Redis(port, args, proc, tls is not None)
        try:
            wait_port(port, proc=proc)
            yield r
        finally:
            if r.proc.poll() is None:
                r.resume()
                r.proc.terminate()
                try:
                    r.proc.wait(5)
                except subprocess.TimeoutExpired:
                    r.proc.kill()
                    r.proc.wait()
            if r.proc.stderr is not None:
                r.proc.stderr.close()


@dataclass
class Haproxy:
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def haproxy(backends: list[int]) -> Iterator[Haproxy]:
    """HAProxy on a free loopback port, round-robin over the gateways at ``backends``
    (loopback ports), one request per connection choice (``http-server-close``)."""
    port = free_port()
    servers = "\n".join(
        f"    server r{i} 127.0.0.1:{p} check inter 500ms" for i, p in enumerate(backends)
    )
    cfg = f"""global
    maxconn 2000
defaults
    mode http
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    option http-server-close
frontend front
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /metrics
{servers}
"""
    with tempfile.TemporaryDirectory(prefix="tierwise-haproxy-") as tmp:
        path = Path(tmp) / "haproxy.cfg"
        path.write_text(cfg)
        proc = subprocess.Popen(
            [_which("haproxy"), "-db", "-f", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ},
        )
        try:
            wait_port(port, proc=proc)
            yield Haproxy(port, proc)
        finally:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
