"""A wall-clock budget for computations the lab runs beside a measurement.

The lab prints predictions next to what the kernel did; a prediction that does not
finish must never hold the measured results hostage. :func:`wall_budget` arms a
one-shot ``ITIMER_REAL`` whose ``SIGALRM`` handler raises inside the computation
(pure Python, so the interpreter delivers it between bytecodes, even inside a loop
that never returns) and turns it into :class:`BudgetExceeded`.

Signal handlers run on the main thread only, so off it the block runs unbounded.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["BudgetExceeded", "wall_budget"]


class BudgetExceeded(Exception):
    """The block did not finish within its wall-clock budget."""

    def __init__(self, budget_s: float):
        super().__init__(f"did not finish within {budget_s:g} s")
        self.budget_s = budget_s


class _Alarm(BaseException):
    """Raised by the handler; a BaseException so no ``except Exception`` inside swallows it."""


@contextmanager
def wall_budget(budget_s: float) -> Iterator[None]:
    """Run the block for at most ``budget_s`` seconds of wall time, else raise
    :class:`BudgetExceeded` (on the main thread; elsewhere the block is not bounded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    armed = [True]

    def on_alarm(signum: int, frame: object) -> None:
        if armed[0]:  # an alarm landing after the block ended is ignored
            raise _Alarm

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, budget_s)
    try:
        yield
        armed[0] = False
    except _Alarm:
        raise BudgetExceeded(budget_s) from None
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
