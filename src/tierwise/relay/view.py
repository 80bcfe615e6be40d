"""What ``tierwise relay`` prints: a key, the ``--check`` settings, the stats tables.

Every output goes through :func:`emit`, written whole or failing with one line. The
tables are rich's, imported when drawn, so ``tierwise --help`` stays fast.
"""

from __future__ import annotations

import errno
import json
import sys
from typing import Any

from tierwise.errors import ScenarioError

__all__ = ["emit", "print_stats"]


def emit(text: str) -> None:
    """Write ``text`` whole to standard output, or fail with one line: stdout closed
    (``>&-``), a full disk (``>/dev/full``) or a reader gone (``| head -c0``) must not
    end in a traceback, nor in exit 0 when a new key went nowhere."""
    import os

    try:
        if sys.stdout is None:
            raise OSError(errno.EBADF, "standard output is closed")
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError) as exc:
        try:  # keep the interpreter's last flush from printing the same failure again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
        except OSError:
            pass
        reason = getattr(exc, "strerror", None) or "standard output is closed"
        raise ScenarioError(f"cannot write the output: {reason}", source="stdout") from None


def print_stats(data: dict, as_json: bool = False, width: int | None = None) -> None:
    """A running relay's measurements (``relay stats``): JSON in SI units, or a table of
    every measure and, for a gateway, one of its busiest sessions (``width`` columns: by
    default the terminal's, or 160 into a file or a pipe)."""
    if as_json:
        emit(json.dumps(data, indent=2) + "\n")
        return
    import io

    from rich.console import Console

    from tierwise.console import fitted

    try:
        tty = sys.stdout is not None and sys.stdout.isatty()
    except ValueError:  # closed
        tty = False
    # a file or a pipe: the sessions' rows whole, not cut at 80
    width = width or (Console().width if tty else 160)
    # drawn whole first, then written at once: a failed write is one line, not half a table
    console = Console(file=io.StringIO(), width=width, force_terminal=tty, emoji=False)
    console.print(fitted(console, _measures_table(data)))
    if data.get("role") == "gateway":
        console.print(fitted(console, _sessions_table(data)))
    emit(console.file.getvalue())  # type: ignore[attr-defined]


def _cell(value: Any) -> str:
    if value is None:
        return "—"  # not measured yet (null in the JSON)
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _measures_table(data: dict):  # type: ignore[no-untyped-def]
    """Every scalar as a row; a nested table's (``session``, ``totals``) as ``name.key``."""
    from rich.table import Table

    table = Table("measure", "value")
    rows = {k: v for k, v in data.items() if not isinstance(v, dict | list)}
    for name in ("session", "totals"):
        rows.update({f"{name}.{k}": v for k, v in data.get(name, {}).items()})
    for key, value in rows.items():
        table.add_row(key, _cell(value))
    return table


# the sessions table, in the units an operator reads (the JSON stays in SI units)
SESSION_COLUMNS: dict[str, Any] = {
    "session": lambda e: e["id"],
    "client": lambda e: e["peer"],
    "age s": lambda e: f"{e['age_s']:.0f}",
    "srtt ms": lambda e: f"{e['srtt_s'] * 1e3:.1f}",
    "Mbit/s": lambda e: f"{e['bandwidth_bytes_per_s'] * 8e-6:.1f}",
    "loss in/out %": lambda e: f"{e['loss_in'] * 100:.1f}/{e['loss_out'] * 100:.1f}",
    "FEC %": lambda e: f"{e['fec_overhead'] * 100:.1f}",
    "datagram B": lambda e: str(e["datagram_bytes"]),  # this end's, after path MTU discovery
    "streams": lambda e: str(e["streams"]),
    "MB in/out": lambda e: f"{e['bytes_received'] / 1e6:.2f}/{e['bytes_sent'] / 1e6:.2f}",
}


def _sessions_table(data: dict):  # type: ignore[no-untyped-def]
    """The gateway's busiest sessions, one row each."""
    from rich import box
    from rich.table import Column, Table

    listed, total = data.get("sessions_listed", 0), data.get("sessions_open", 0)
    title = f"sessions: the {listed} busiest of {total} (by bytes carried)"
    columns = [Column(name, no_wrap=True) for name in SESSION_COLUMNS]
    table = Table(*columns, title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    for entry in data.get("sessions", []):
        table.add_row(*(_shown(cell, entry) for cell in SESSION_COLUMNS.values()))
    return table


def _shown(cell: Any, entry: dict) -> str:
    """A session's cell; "-" for a figure not measured yet (``null`` in the JSON)."""
    try:
        return cell(entry)
    except (TypeError, KeyError):
        return "-"
