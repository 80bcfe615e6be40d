"""An optional event trace of a relay process, for finding where a request's time goes.

``TIERWISE_RELAY_TRACE=/path/prefix`` makes each relay process append one line per
event to ``/path/prefix.<pid>``: the monotonic clock (the one asyncio and
``time.perf_counter`` read on Linux, shared by every process and namespace of the
host, so two ends' traces line up), the event and its numbers. Events: ``rx``
(datagrams read, bytes), ``tx`` (datagrams sent, bytes, pacing rate, window,
bandwidth estimate, bytes in flight, repairs queued), ``startup_end`` (why the rate's
start-up ended — ``queued_train``, ``full_pipe`` or ``brake`` — and the estimate then, once
per session), ``policed`` (a policer declared or released: 1 or 0, the ceiling in bytes/s,
the datagrams sent so far), ``tcp_read`` / ``tcp_write``
(a stream's bytes from / to its application socket), ``connect`` (the gateway's
connection to the service). Unset, every hook is one global lookup.
"""

from __future__ import annotations

import atexit
import os
import time
from typing import TextIO

__all__ = ["enabled", "event"]

ENV = "TIERWISE_RELAY_TRACE"
_file: TextIO | None = None
_checked = False


def enabled() -> bool:
    """Whether this process traces (the environment variable is read once)."""
    global _file, _checked
    if not _checked:
        _checked = True
        prefix = os.environ.get(ENV)
        if prefix:
            _file = open(f"{prefix}.{os.getpid()}", "a", buffering=1 << 16)
            atexit.register(_file.close)
    return _file is not None


def event(name: str, *values: object) -> None:
    """One trace line: ``<monotonic s> <name> <values...>``."""
    if _file is not None:
        _file.write(f"{time.monotonic():.6f} {name} {' '.join(map(str, values))}\n")
