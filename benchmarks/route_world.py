"""Benchmark: predictive routing against static, lowest-latency and an oracle.

The experiment is ``tierwise lab route`` (src/tierwise/lab/world/loopback.py and
namespaces.py); this script runs it with the settings recorded in docs/benchmarks.md:
in network namespaces as root (the default), or on loopback with ``--loopback``.

    python benchmarks/route_world.py --requests 40 --seed 1 --plot docs/img/route_lab
    python benchmarks/route_world.py --loopback --requests 80 --seed 1 --plot docs/img/route_world
"""

from __future__ import annotations

import sys

from tierwise.cli import main

if __name__ == "__main__":
    sys.argv = ["tierwise", "lab", "route", *sys.argv[1:]]
    main()
