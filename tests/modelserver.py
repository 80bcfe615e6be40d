"""Start real ``tierwise lab model-server`` processes on loopback for tests (and stop them)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

from tierwise.lab.model_server import free_port, wait_ready

__all__ = ["free_port", "model_server"]


@contextlib.contextmanager
def model_server(*args: str) -> Iterator[str]:
    """A model server with ``args`` on a free loopback port; yields its base URL."""
    port = free_port()
    cmd = [sys.executable, "-c", "from tierwise.cli import main; main()", "lab", "model-server"]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
