"""Benchmark: start-up of `tierwise --help` and `tierwise plan`, this tree against a peer.

For each command, a fresh interpreter runs it under ``python -X importtime``; the
import time is the sum of the top-level imports' cumulative times (what the process
spends importing, interpreter start-up modules included). Also reported: the same
without pint's subtree (pint is made lazy in ``units.py`` by another change) and the
command's wall time. Runs alternate (peer, this, peer, ...) and medians are compared,
because the machine is shared.

    python benchmarks/startup.py --peer PEER/src [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _args import positive_int, run

THIS_SRC = Path(__file__).resolve().parent.parent / "src"
COMMANDS = {"--help": ["--help"], "plan": ["plan"]}
_LINE = re.compile(r"import time:\s+\d+ \|\s+(\d+) \| ( *)(\S+)")
_RUN = "import sys; from tierwise.cli import main; sys.argv[0] = 'tierwise'; main()"


def import_seconds(log: str) -> tuple[float, float]:
    """(all top-level imports, the same less pint's subtree) from an importtime log."""
    total = pint = 0
    for line in log.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        if m.group(2) == "":
            total += int(m.group(1))
        if m.group(3) == "pint":
            pint += int(m.group(1))
    return total / 1e6, (total - pint) / 1e6


def measure(src: Path, args: list[str]) -> tuple[float, float, float]:
    """Import seconds, import seconds less pint, and wall seconds of one run."""
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "120"}
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _RUN, *args],
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"{src}: tierwise {' '.join(args)} failed: {run.stderr[-500:]}")
    return (*import_seconds(run.stderr), wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", type=Path, required=True, help="the peer's src folder")
    parser.add_argument("--repeats", type=positive_int, default=7)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for name, argv in COMMANDS.items():
        results: dict[str, list[tuple[float, float, float]]] = {"peer": [], "this": []}
        for _ in range(args.repeats):
            results["peer"].append(measure(args.peer, argv))
            results["this"].append(measure(THIS_SRC, argv))
        for who, rows in results.items():
            imp, less_pint, wall = (statistics.median(col) for col in zip(*rows, strict=True))
            print(
                f"tierwise {name:7} {who}: import {imp:.3f} s, without pint {less_pint:.3f} s, "
                f"wall {wall:.3f} s (median of {args.repeats})"
            )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    run(main)
