"""Argument types and the entry point the benchmark scripts share.

A bad value on a benchmark's command line gets argparse's one ``error:`` line and
exit status 2, and an input error the project itself raises (:class:`TierwiseError`:
an unknown controller, a loss outside [0, 1), …) gets one line naming it and exit 2 —
never a traceback, like the ``tierwise`` commands.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from tierwise.errors import TierwiseError


def positive_int(text: str) -> int:
    """An integer ≥ 1 (counts: runs, repeats, flows, seeds)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (sizes, seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number above 0")
    return value


def fraction(text: str) -> float:
    """A loss probability in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a probability in [0, 1)")
    return value


def queue_seconds(text: str) -> tuple[int, float]:
    """``QUEUE:SECONDS``: a queue in packets and a simulated duration."""
    queue, sep, seconds = text.partition(":")
    try:
        pair = (int(queue), float(seconds))
    except ValueError:
        pair = (0, 0.0)
    if not sep or pair[0] < 1 or not 0 < pair[1] < float("inf"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not QUEUE:SECONDS (packets ≥ 1, seconds > 0), e.g. 615:240"
        )
    return pair


def windows(text: str) -> list[tuple[float, float]]:
    """``A-B,C-D,…``: time windows in seconds, each with A < B."""
    out = []
    for part in text.split(","):
        start, sep, end = part.partition("-")
        try:
            window = (float(start), float(end))
        except ValueError:
            window = (0.0, 0.0)
        if not sep or not 0 <= window[0] < window[1] < float("inf"):
            raise argparse.ArgumentTypeError(
                f"{part!r} in {text!r} is not a window START-END in seconds with START < END"
            )
        out.append(window)
    return out


def choices_list(known: tuple[str, ...] | list[str]) -> Callable[[str], list[str]]:
    """A comma-separated list whose every item is one of ``known``."""

    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        bad = [item for item in items if item not in known]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"{', '.join(map(repr, bad)) or repr(text)}: expected a comma-separated "
                f"list of {', '.join(known)}"
            )
        return items

    return parse


def run(main: Callable[[], object]) -> None:
    """Run a benchmark's ``main``: a project input error is one line and exit 2."""
    try:
        main()
    except TierwiseError as exc:
        print(f"{os.path.basename(sys.argv[0])}: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
