"""The optional mypyc build of the hot path: same results as pure Python (issue 14).

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
from tierwise.sim.build import compiler_missing

pytestmark = pytest.mark.slow

PROBE = """
import json
from tierwise.sim.build import active
from tests_matrix import matrix_outcome
ccs = ("newreno", "cubic", "cubic-hystart", "bbr")
cells = [(cc, rg) for cc in ccs for rg in ("huge", "bdp", "loss")]
print(json.dumps({"compiled": active(), "cells": [matrix_outcome(*c, 3_000_000) for c in cells]}))
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
        [sys.executable, "-c", code], cwd=root, env=environ, capture_output=True, text=True
    )


def test_compiled_build_gives_the_pure_results(tmp_path: Path) -> None:
    """Built, the hot path runs compiled with the same outcomes; forced or stale, pure."""
    reason = compiler_missing()
    if reason is not None:
        pytest.skip(f"no compiled build here: {reason}")
    root = _copy_package(tmp_path)
    built = _run(root, "import sys; from tierwise.sim.build import main; sys.exit(main())")
    assert built.returncode == 0, built.stderr
    compiled = json.loads(_run(root, PROBE).stdout)
    pure = json.loads(_run(root, PROBE, TIERWISE_PURE_PYTHON="1").stdout)
    assert compiled["compiled"] and not pure["compiled"]
    assert compiled["cells"] == pure["cells"]
    os.utime(root / "tierwise" / "proto" / "tcp.py")  # an edited source: the build is stale
    stale = _run(root, "from tierwise.sim.build import main; main(['--status'])")
    assert "stale build: tierwise.proto.tcp" in stale.stdout
    assert json.loads(_run(root, PROBE).stdout) == pure
    cleaned = _run(root, "from tierwise.sim.build import main; main(['--clean'])")
    assert "removed 8 file(s)" in cleaned.stdout
    assert not list(root.rglob("*.so"))
