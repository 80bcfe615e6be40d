"""The optional mypyc build of the hot path: same results as pure Python.

One build compiles the simulator's modules and the relay's sans-IO connection; a
probe runs the TCP matrix cells and a lossy relay scenario (requests and a bulk
stream between two ``RelayConnection`` objects in synthetic time) on both paths.

The build runs on a copy of the package in a temporary directory, so the checkout
under test keeps whatever path it has. Skipped, with the reason, where there is no
mypyc or no C compiler: the build is never required.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tierwise
from tests.peerjobs import peer_job
from tierwise.sim.build import compiler_missing

pytestmark = pytest.mark.slow

PROBE = """
import hashlib, json
import tierwise.proto.relay.connection as relay_connection
from tierwise.sim.build import active
from tierwise.sim.relay import Net, OneWayPath, all_done, payload, request_response
from tests_matrix import matrix_outcome
ccs = ("newreno", "cubic", "cubic-hystart", "bbr")
cells = [(cc, rg) for cc in ccs for rg in ("huge", "bdp", "loss")]

def relay():
    net = Net(OneWayPath(loss=0.14), OneWayPath(loss=0.036, reorder=0.05), seed=5)
    expected = request_response(net, [(354_640, 1000), (20_000, 300_000), (1, 1)])
    net.run(30, all_done(net, expected))
    bulk = net.client.open_stream(priority=5)
    net.on_gateway_stream = None
    net.client.send(bulk, payload("bulk", 2_000_000), end_stream=True)
    net.run(net.now + 60, lambda: bulk in net.finished["gateway"])
    got = {n: {s: hashlib.sha256(b).hexdigest() for s, b in r.items()}
           for n, r in net.received.items()}
    # snapshot() and the relay client read the config and counters with vars()
    return {"now": repr(net.now), "got": got, "client": net.client.snapshot(),
            "gateway": net.gateway.snapshot(), "config": sorted(vars(net.client.config))}

print(json.dumps({"compiled": active(), "relay_file": relay_connection.__file__,
                  "cells": [matrix_outcome(*c, 3_000_000) for c in cells], "relay": relay()}))
"""


def _copy_package(dest: Path) -> Path:
    """The tierwise package and the matrix pins, without any build of the checkout."""
    src = Path(tierwise.__file__).parent
    ignore = shutil.ignore_patterns("*.so", "_native.manifest", "__pycache__")
    shutil.copytree(src, dest / "tierwise", ignore=ignore)
    shutil.copy(Path(__file__).with_name("test_matrix_pins.py"), dest / "tests_matrix.py")
    return dest


def _run(root: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "TIERWISE_PURE_PYTHON"}
    environ.update(PYTHONPATH=str(root), **env)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env=environ,
        capture_output=True,
        text=True,
        timeout=1200,
    )


def _build_and_probe(root: Path) -> dict[str, object] | None:
    """Build a copy of the package in ``root`` and run the probes (a peer job): what each
    step printed, in order; None where there is no compiler."""
    if compiler_missing() is not None:
        return None
    _copy_package(root)
    # -O0: the C compiler's optimisation does not change what runs, and the build is a
    # third shorter (49 s against 71 s at load 3); the benchmarks build at -O3.
    quick = "import sys; from tierwise.sim.build import main; sys.exit(main(['--opt-level', '0']))"
    status = "from tierwise.sim.build import main; main(['--status'])"
    steps: dict[str, object] = {"built": _run(root, quick)}
    if steps["built"].returncode != 0:
        return steps
    steps["compiled"] = _run(root, PROBE).stdout
    steps["pure"] = _run(root, PROBE, TIERWISE_PURE_PYTHON="1").stdout
    os.utime(root / "tierwise" / "proto" / "tcp.py")  # an edited source: the build is stale
    steps["stale_status"] = _run(root, status).stdout
    steps["stale"] = _run(root, PROBE).stdout
    os.utime(root / "tierwise" / "proto" / "relay" / "wire.py")  # the relay's sources count too
    steps["relay_status"] = _run(root, status).stdout
    steps["cleaned"] = _run(root, "from tierwise.sim.build import main; main(['--clean'])").stdout
    steps["left"] = list(root.rglob("*.so")) + list(root.rglob(".mypy_cache"))
    return steps


@peer_job(lambda workdir: _build_and_probe(workdir))
def test_compiled_build_gives_the_pure_results(peer) -> None:
    """Built, the hot path runs compiled with the same outcomes; forced or stale, pure.

    The build and its probes are a peer job (tests/peerjobs.py): they run on the idle
    core while other tests run, and this test checks what each step printed."""
    reason = compiler_missing()
    if reason is not None:
        pytest.skip(f"no compiled build here: {reason}")
    steps = peer()
    built = steps["built"]
    assert built.returncode == 0, built.stderr
    compiled = json.loads(steps["compiled"])
    pure = json.loads(steps["pure"])
    assert compiled["compiled"] and not pure["compiled"]
    assert compiled["relay_file"].endswith(".so") and pure["relay_file"].endswith(".py")
    assert compiled["cells"] == pure["cells"]
    assert compiled["relay"] == pure["relay"]
    assert compiled["relay"]["client"]["fec_recovered"] > 0  # the scenario exercises FEC
    assert "stale build: tierwise.proto.tcp" in steps["stale_status"]
    assert json.loads(steps["stale"]) == pure
    assert "tierwise.proto.relay.wire" in steps["relay_status"]
    assert "removed 17 file(s)" in steps["cleaned"]  # 15 modules, the shared library, manifest
    assert not steps["left"]  # nor mypy's cache of the build (it stays in the build's tmp)


def test_an_unknown_optimisation_level_is_refused_before_anything_is_built() -> None:
    """`build(opt_level=...)` takes the C compiler's 0-3 only, and says which it got."""
    from tierwise.sim.build import build

    with pytest.raises(ValueError, match=r"opt_level '4': expected one of 0, 1, 2, 3"):
        build(opt_level="4")
