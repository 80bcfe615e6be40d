"""Start-up stays light: the entry point imports typer and rich, not the heavy layers.

Not a timed test: it checks which modules a fresh interpreter holds after the import
(or after a command), which is what the start-up time follows. The measured times
are in docs/benchmarks.md (``python benchmarks/startup.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("matplotlib", "numpy", "pint", "pydantic", "scipy", "httpx", "uvicorn", "dask")
LAYERS = ("tierwise.sim", "tierwise.proto", "tierwise.model", "tierwise.plan", "tierwise.report")
LAB_INNARDS = tuple(
    f"tierwise.lab.{m}"
    for m in (
        "bench.emulator",
        "experiments.request",
        "experiments.factors",
        "bench.netns",
        "bench.path",
        "bench.service",
    )
)

_LOADED = """
import json, sys
{code}
print(json.dumps(sorted(sys.modules)))
"""


def loaded_after(code: str) -> set[str]:
    """Module names a fresh interpreter holds after running ``code``."""
    run = subprocess.run(
        [sys.executable, "-c", _LOADED.format(code=code)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    return set(json.loads(run.stdout.splitlines()[-1]))


def _hits(loaded: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == p or m.startswith(p + ".") for p in prefixes))


@pytest.mark.parametrize("code", ["import tierwise.cli", "import tierwise", "import tierwise.lab"])
def test_importing_the_entry_point_loads_no_heavy_module(code: str) -> None:
    """`tierwise --help` pays for typer and rich only: no numpy, pint, pydantic, lab or sim."""
    loaded = loaded_after(code)
    assert _hits(loaded, HEAVY + LAYERS + LAB_INNARDS) == []


def test_help_loads_no_heavy_module() -> None:
    """Rendering `tierwise --help` still loads none of the heavy layers."""
    code = (
        "import contextlib, io\n"
        "from tierwise.cli import app\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    app(['--help'], standalone_mode=False, prog_name='tierwise')"
    )
    assert _hits(loaded_after(code), HEAVY + LAYERS + LAB_INNARDS) == []


def test_plan_loads_neither_the_lab_the_simulator_nor_plotting() -> None:
    """`tierwise plan` on the bundled example needs the model, not sim, lab or matplotlib."""
    code = (
        "import contextlib, io\n"
        "from tierwise.cli import app\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    app(['plan'], standalone_mode=False, prog_name='tierwise')"
    )
    loaded = loaded_after(code)
    assert "tierwise.plan.planner" in loaded  # the command did run
    assert _hits(loaded, ("matplotlib", "scipy", "tierwise.sim", "tierwise.proto")) == []
    assert _hits(loaded, LAB_INNARDS) == []


def test_lazy_exports_resolve_to_the_same_objects() -> None:
    """`tierwise.NAME` is the object its module defines, even after the subpackage loads."""
    import tierwise
    from tierwise.plan import planner as planner_module  # binds nothing over tierwise.plan

    assert tierwise.plan is planner_module.plan
    assert tierwise.Plan is planner_module.Plan
    assert tierwise.path.__name__ == "tierwise.model.path"
    assert set(tierwise.__all__) <= set(dir(tierwise))
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = tierwise.no_such_name
