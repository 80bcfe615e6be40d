"""JSON output: SI numbers, unit in the key's suffix, numpy values made plain."""

from __future__ import annotations

import json
from typing import Any

from tierwise.jsonvalue import plain

__all__ = ["dumps", "plain"]


def dumps(value: Any) -> str:
    return json.dumps(plain(value), indent=2, ensure_ascii=False)
