"""A real ``tierwise route`` process in front of a stand-in, for the edge's tests."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tierwise.lab.bench.procs import stop
from tierwise.lab.world.model_server import free_port, wait_ready

CLI = [sys.executable, "-c", "from tierwise.cli import main; main()"]


def route_toml(tmp: Path, site_url: str, port: int, gateway: str = "", site: str = "") -> Path:
    path = tmp / "route.toml"
    path.write_text(
        f'[gateway]\nport = {port}\ndecisions_log = "{tmp}/d.jsonl"\nprobe_interval = "1 h"\n'
        f"{gateway}\n"
        f'[[site]]\nname = "edge"\ntier = "edge"\nurl = "{site_url}"\ndecode_step = "1 ms"\n'
        f'uplink = "1 Gbit/s"\ndownlink = "1 Gbit/s"\n{site}\n',
        encoding="utf-8",
    )
    return path


@contextlib.contextmanager
def route_process(config: Path, *args: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``tierwise route --config config`` until the block ends; yields (URL, process)."""
    import tomllib

    port = tomllib.loads(config.read_text())["gateway"]["port"]
    proc = subprocess.Popen(
        [*CLI, "route", "--config", str(config), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url)
        yield url, proc
    finally:
        stop(proc, close=True)


__all__ = ["CLI", "free_port", "route_process", "route_toml"]
