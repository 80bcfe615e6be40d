"""JSON output: SI numbers, unit in the key's suffix, numpy values made plain."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

__all__ = ["dumps", "plain"]


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


def dumps(value: Any) -> str:
    return json.dumps(plain(value), indent=2, ensure_ascii=False)
