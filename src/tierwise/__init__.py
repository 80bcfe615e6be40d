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

from tierwise import model
from tierwise.catalog import Catalog, load_catalog
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
from tierwise.model import device, loop, path, request, reuse, split, stream
from tierwise.plan.options import Option
from tierwise.plan.planner import Plan, plan, plan_file
from tierwise.plan.sweep_table import sweep
from tierwise.scenario.loader import bundled_example, load_scenario, parse_scenario
from tierwise.scenario.schema import Scenario
from tierwise.units import format_quantity, parse_quantity

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
