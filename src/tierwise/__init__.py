"""tierwise: decide where an AI task runs by the time the whole task takes.

The Python API mirrors the command line::

    import tierwise
    p = tierwise.plan_file(tierwise.bundled_example("deployment"),
                           ["site.cloud.uplink=3.5 Mbit/s"])
    p.choice                                    # 'workstation'
    tierwise.model.request.serial_time_s(30e6, 2.5e6, 0.1, 0.3, 5e6, 12.5e6)   # 12.8
    tierwise.sweep(tierwise.bundled_example("deployment"),
                   {"site.cloud.uplink": "1..100 Mbit/s:log:60"})   # a pandas DataFrame

Model functions (``tierwise.model.*``) take SI floats or numpy arrays.
"""

from __future__ import annotations

import copyreg
import importlib
import sys
import types

from tierwise import _native
from tierwise.errors import (
    CatalogError,
    LabError,
    ModelError,
    ProtocolError,
    ScenarioError,
    SimulationError,
    TierwiseError,
    UnitError,
)
from tierwise.lazy import lazy_exports

# Imported on first use (PEP 562), so `tierwise --help` loads no numpy, pint or pydantic:
# name → (module, attribute; None for the module itself).
_LAZY: dict[str, tuple[str, str | None]] = {
    "Catalog": ("tierwise.catalog", "Catalog"),
    "load_catalog": ("tierwise.catalog", "load_catalog"),
    "model": ("tierwise.model", None),
    **{m: (f"tierwise.model.{m}", None) for m in ("device", "loop", "path", "request")},
    **{m: (f"tierwise.model.{m}", None) for m in ("reuse", "split", "stream")},
    "Option": ("tierwise.plan.options", "Option"),
    "Plan": ("tierwise.plan.planner", "Plan"),
    "plan": ("tierwise.plan.planner", "plan"),
    "plan_file": ("tierwise.plan.planner", "plan_file"),
    "bundled_example": ("tierwise.scenario.loader", "bundled_example"),
    "load_scenario": ("tierwise.scenario.loader", "load_scenario"),
    "parse_scenario": ("tierwise.scenario.loader", "parse_scenario"),
    "Scenario": ("tierwise.scenario.schema", "Scenario"),
    "sweep": ("tierwise.plan.sweep_table", "sweep"),
    "format_quantity": ("tierwise.units", "format_quantity"),
    "parse_quantity": ("tierwise.units", "parse_quantity"),
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


class _Package(types.ModuleType):
    """Keeps ``tierwise.plan`` the function: importing the subpackage ``tierwise.plan``
    would otherwise bind the package's attribute of that name to the module."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType) and _LAZY[name][1] is not None:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
# Pickle the package by name, as pickle and cloudpickle do a plain module: Dask ships
# functions that refer to ``tierwise`` to its workers.
copyreg.pickle(_Package, lambda module: (importlib.import_module, (module.__name__,)))

# The simulator's optional compiled hot path (python -m tierwise.sim.build): kept only
# while it matches the sources and TIERWISE_PURE_PYTHON is unset.
_native.install()

__version__ = "0.1.0"

__all__ = [
    "Catalog",
    "CatalogError",
    "LabError",
    "ModelError",
    "Option",
    "Plan",
    "ProtocolError",
    "Scenario",
    "ScenarioError",
    "SimulationError",
    "TierwiseError",
    "UnitError",
    "bundled_example",
    "device",
    "format_quantity",
    "load_catalog",
    "load_scenario",
    "loop",
    "model",
    "parse_quantity",
    "parse_scenario",
    "path",
    "plan",
    "plan_file",
    "request",
    "reuse",
    "split",
    "stream",
    "sweep",
]
