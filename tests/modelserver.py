"""Start real ``tierwise lab model-server`` processes on loopback for tests (and stop them)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

from tierwise.lab.bench.procs import stop
from tierwise.lab.world.model_server import free_port, wait_ready

__all__ = ["free_port", "model_server", "model_servers"]


_CMD = [sys.executable, "-c", "from tierwise.cli import main; main()", "lab", "model-server"]


@contextlib.contextmanager
def model_server(*args: str) -> Iterator[str]:
    """A model server with ``args`` on a free loopback port; yields its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [*_CMD, "--port", str(port), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url)
        yield url
    finally:
        stop(proc)


@contextlib.contextmanager
def model_servers(*arg_lists: tuple[str, ...]) -> Iterator[list[str]]:
    """One model server per argument tuple, started together (their start-ups overlap);
    yields their base URLs in the same order.

    At the end they are killed, not asked to stop: a server's graceful stop waits for
    its requests in flight, and a test that made a server stall a request (30-60 s)
    would sit out ``model_server``'s 10 s grace for nothing it checks."""
    procs: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for args in arg_lists:
            port = free_port()
            procs.append(
                subprocess.Popen(
                    [*_CMD, "--port", str(port), *args],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        for proc, url in zip(procs, urls, strict=True):
            wait_ready(proc, url)
        yield urls
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
