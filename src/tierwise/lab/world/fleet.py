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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tierwise.lab.bench.procs import stop
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
    wrap: Callable[[list[str]], list[str]] = list,
) -> Iterator[Redis]:
    """A redis-server on a free loopback port until the block ends. ``password`` sets the
    default user's; with ``user`` an ACL user of that password is made instead (the
    default user disabled); ``tls`` = (cert, key, CA) files serves TLS only. ``wrap``
    runs it another way (in a namespace: the caller then waits from inside it too)."""
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
        args = wrap(args)
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        r = Redis(port, args, proc, tls is not None)
        try:
            wait_port(port, proc=proc)
            yield r
        finally:
            if r.proc.poll() is None:
                r.resume()
            stop(r.proc, 5, close=True)


@dataclass
class Haproxy:
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def haproxy(
    backends: list[int], wrap: Callable[[list[str]], list[str]] = list
) -> Iterator[Haproxy]:
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
            wrap([_which("haproxy"), "-db", "-f", str(path)]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ},
        )
        try:
            wait_port(port, proc=proc)
            yield Haproxy(port, proc)
        finally:
            stop(proc, 5, close=True)


# ------------------------------------------------------------------ the fleet's world run

FLEET_RUNS = ("predictive", "fleet-shared", "fleet-alone")


def run_fleet(
    label: str,
    urls: dict[str, str],
    bodies: list[bytes],
    tmp: Path,
    progress,
    replicas: int,
    state: str | None,
) -> list[dict]:
    """Send the mix through ``replicas`` gateways behind HAProxy (round-robin), sharing
    ``state`` (a Redis URL) or learning alone (None), with the loopback world's changes
    at the same request numbers; the replicas' decisions-log records merged by time."""
    import json as _json

    import httpx

    from tierwise.lab.world.common import CLI, route_toml
    from tierwise.lab.world.loopback import SITES, world
    from tierwise.lab.world.model_server import wait_ready

    procs, ports, logs = [], [], []
    failed = 0
    task = progress.add_task(label, total=len(bodies))
    try:
        for i in range(replicas):
            port, log = free_port(), tmp / f"{label}-{i}.jsonl"
            cfg = tmp / f"{label}-{i}.toml"
            cfg.write_text(route_toml(SITES, urls, port, log, "predictive"))
            extra = ["--state", state] if state else []
            procs.append(subprocess.Popen(
                [*CLI, "route", "--config", str(cfg), "--replica", f"r{i}", *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            ))  # fmt: skip
            ports.append(port)
            logs.append(log)
        for proc, port in zip(procs, ports, strict=True):
            wait_ready(proc, f"http://127.0.0.1:{port}")
        with haproxy(ports) as lb, httpx.Client(timeout=60) as client:
            for i, body in enumerate(bodies):
                for name, change in world(i, len(bodies)).items():
                    client.post(urls[name] + "/admin/behaviour", json=change)
                r = client.post(lb.url + "/v1/chat/completions", content=body)
                failed += r.status_code != 200
                progress.advance(task)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            stop(proc, close=True)
    records = [_json.loads(line) for log in logs if log.exists()
               for line in log.read_text().splitlines() if line]  # fmt: skip
    records.sort(key=lambda r: r.get("ts", 0))
    for rec in records:
        rec["client_failed"] = failed
    return records


def run_fleet_world(
    requests: int, seed: int, replicas: int = 3, runs: tuple[str, ...] = FLEET_RUNS
) -> tuple[dict[str, list[dict]], list[bytes]]:
    """The loopback world through one gateway that sees every request (``predictive``),
    ``replicas`` behind HAProxy sharing state through Redis (``fleet-shared``), and as
    many learning alone (``fleet-alone``); the records per run, and the bodies."""
    import json as _json

    from rich.progress import Progress

    from tierwise.lab.world.common import scratch_dir, workload
    from tierwise.lab.world.loopback import run_strategy, start_sites

    bodies = [_json.dumps(b).encode() for b in workload(requests, seed)]
    procs: list[subprocess.Popen[bytes]] = []
    out: dict[str, list[dict]] = {}
    try:
        with scratch_dir() as tmp:
            procs, urls = start_sites()
            with Progress(transient=True) as progress:
                for label in runs:
                    if label == "predictive":
                        out[label] = run_strategy("predictive", urls, bodies, tmp, progress)
                    elif label == "fleet-shared":
                        with redis_server() as redis:
                            out[label] = run_fleet(label, urls, bodies, tmp, progress,
                                                   replicas, redis.url)  # fmt: skip
                    else:
                        out[label] = run_fleet(label, urls, bodies, tmp, progress, replicas, None)
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    return out, bodies


def fleet_report(runs: dict[str, list[dict]], bodies: list[bytes]) -> dict:
    """The loopback world's figures per run, and the fleet's two ratios: shared over one
    router (goal ≤ 1.05) and shared over alone (goal ≤ 0.80)."""
    from tierwise.lab.world.loopback import report

    figures = report(runs, bodies)
    return {"runs": figures, "ratios": fleet_ratios(figures)}


def fleet_ratios(figures: dict[str, dict]) -> dict[str, float]:
    """Shared over one router (goal ≤ 1.05) and shared over alone (goal ≤ 0.80); printed."""
    total = {name: row["total_s"] for name, row in figures.items()}
    ratios = {}
    if "fleet-shared" in total and "predictive" in total:
        ratios["shared_vs_one_router"] = total["fleet-shared"] / total["predictive"]
    if "fleet-shared" in total and "fleet-alone" in total:
        ratios["shared_vs_alone"] = total["fleet-shared"] / total["fleet-alone"]
    for name, value in ratios.items():
        print(f"{name}: {value:.3f}")
    return ratios
