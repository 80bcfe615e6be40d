"""Start real ``tierwise lab model-server`` processes on loopback for tests (and stop them)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx

START_TIMEOUT_S = 30.0  # the machine is shared; start-up can take a few seconds


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        _wait_ready(proc, url)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(proc: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"model-server exited: {proc.stderr.read().decode()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=1.0).status_code in (200, 503):
                return
        time.sleep(0.1)
    raise RuntimeError(f"model-server at {url} did not start in {START_TIMEOUT_S} s")
