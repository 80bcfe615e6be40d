"""``tierwise calc``: every closed-form model, one named entry each.

Importing this package registers all entries (one module per model area).
"""

from tierwise.calc import (  # noqa: F401
    calibrate,
    device,
    inverse,
    loop,
    network,
    request,
    reuse,
    split,
    stream,
    transport,
)
from tierwise.calc._registry import REGISTRY, Calc, Param, calc

__all__ = ["REGISTRY", "Calc", "Param", "calc"]
