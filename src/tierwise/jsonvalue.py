"""Values made JSON-ready: numpy scalars and arrays plain, tuples as lists, no Infinity.

JSON has no Infinity or NaN, so a float that is not finite becomes ``null``: a figure
not measured yet ("never", "unbounded"), such as a pacing rate before the first RTT
sample. Every layer that writes JSON uses :func:`plain`, so the rule is one rule.
"""

from __future__ import annotations

import math
import sys
from typing import Any

__all__ = ["plain"]


def plain(value: Any) -> Any:
    """Recursively turn numpy scalars/arrays and tuples into JSON-ready Python values."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    np = sys.modules.get("numpy")  # not imported: no value can be a numpy one
    if np is not None and isinstance(value, np.ndarray):
        return plain(value.tolist())
    if np is not None and isinstance(value, np.generic):
        return plain(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no infinity: null means "never" or "unbounded"
    return value
