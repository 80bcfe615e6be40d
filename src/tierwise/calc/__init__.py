"""``tierwise calc``: every closed-form model, one named entry each.

Importing this package registers all entries (one module per model area).
"""

from tierwise.calc import calibrate, device, loop, network, request, reuse, split, stream, transport  # noqa: F401
from tierwise.calc._registry import REGISTRY, Calc, Param, calc

__all__ = ["REGISTRY", "Calc", "Param", "calc"]
