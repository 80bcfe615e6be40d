"""Standard output written whole, or not at all.

A report command (``plan``, ``sim``, ``catalog`` …) writes its table or JSON into
memory (:class:`WholeStdout` stands in for ``sys.stdout``), and :func:`write_whole`
sends it in one write when the command has finished. So:

- an error found half-way (a late ``ScenarioError``) leaves nothing on stdout, not
  half a table;
- a destination that cannot take it — ``>/dev/full``, a closed stdout (``>&-``), a
  reader gone — is one line on stderr and exit 2, not a traceback;
- an output encoding that cannot spell "—", "µ" or "§" (``LANG=C``,
  ``PYTHONIOENCODING=ascii``) gets ASCII boxes from rich and ASCII stand-ins for the
  rest, not a ``UnicodeEncodeError`` half-way through a table.

:class:`WholeConsole` is the rich console of those commands: its width stays within
``MIN_COLUMNS``..``MAX_COLUMNS`` whatever ``COLUMNS`` says (``COLUMNS=0`` drew one
character per line; it now draws at ``DEFAULT_COLUMNS``). Servers, whose output is a
banner and then a log, write live.
"""

from __future__ import annotations

import copy
import errno
import io
import os
import sys
from typing import Any, TextIO

from rich import box
from rich.console import Console, ConsoleDimensions, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from tierwise.errors import ScenarioError

__all__ = [
    "DEFAULT_COLUMNS",
    "MAX_COLUMNS",
    "MIN_COLUMNS",
    "WholeConsole",
    "WholeStdout",
    "fitted",
    "sane_columns",
]

MIN_COLUMNS = 40  # narrower, a table has one character per cell line: COLUMNS=0 is a mistake
DEFAULT_COLUMNS = 80  # what a console below MIN_COLUMNS is drawn at (rich's own default)
MAX_COLUMNS = 1000  # wider is a mistake (COLUMNS=99999999), not a screen

# Characters our reports print that an ASCII terminal lacks, and what stands in for
# them: one character each, so a table rich drew keeps its borders aligned.
_ASCII = str.maketrans(
    {
        "—": "-", "–": "-", "−": "-", "‐": "-", "…": ".", "•": "*", "·": "*", "×": "x",
        "÷": "/", "µ": "u", "μ": "u", "§": "S", "°": "o", "≤": "<", "≥": ">", "≈": "~",
        "≠": "#", "→": ">", "←": "<", "↔": "-", "∞": "~", "²": "2", "³": "3", "Δ": "D",
        "‘": "'", "’": "'", "“": '"', "”": '"', "\u00a0": " ", "\u202f": " ", "✓": "+",
        "✗": "x", "±": "~",
    }
)  # fmt: skip


def sane_columns(environ: Any = os.environ) -> None:
    """Make ``COLUMNS`` one a table can be drawn in, for consoles made from now on (rich
    reads it when a console is made; typer's help makes its own)."""
    text = environ.get("COLUMNS")
    if text is not None and text.strip().isdigit():
        clamped = _columns(int(text.strip()))
        if str(clamped) != text:
            environ["COLUMNS"] = str(clamped)


def _columns(width: int) -> int:
    return DEFAULT_COLUMNS if width < MIN_COLUMNS else min(width, MAX_COLUMNS)


def fitted(console: Console, renderable: Any) -> Any:
    """``renderable`` as it can be drawn whole on ``console``.

    A table whose narrowest rendering (each column as wide as its longest word) is wider
    than the console would have rich cut its words (``workstati…``, ``20.4…``); it is
    drawn instead as one block per row, each cell under its column's name, so no number
    or name is ever cut. Anything else is returned as it is.
    """
    if not isinstance(renderable, Table):
        return renderable
    for table in (renderable, _lean(renderable)):
        if _whole(console, table):
            return table
    return records(renderable)


def _lean(table: Table) -> Table:
    """``table`` with light rules between columns and one space beside each cell: seven
    columns take about ten fewer characters than with a box."""
    lean = copy.copy(table)
    lean.box, lean.padding, lean.show_edge = box.SIMPLE_HEAD, (0, 1, 0, 0), False
    return lean


def _whole(console: Console, table: Table) -> bool:
    options = console.options
    return Measurement.get(console, options, table).minimum <= options.max_width and not _cut(
        console, table
    )


def _cut(console: Console, table: Table) -> bool:
    """Whether rich, drawing ``table`` at ``console``'s width, would end a word with "…"
    (its column sharing can squeeze a column below its longest word even when the
    narrowest widths add up to less than the screen)."""
    if not any("…" in _plain(c) for column in table.columns for c in column.cells):
        probe = Console(
            file=io.StringIO(),
            width=console.options.max_width,
            color_system=None,
            legacy_windows=False,
        )
        probe.print(table)
        return "…" in probe.file.getvalue()  # type: ignore[attr-defined]
    return False


def records(table: Table) -> RenderableType:
    """``table`` as blocks: its title, then per row one ``column  value`` line per cell."""
    names = [_plain(column.header) for column in table.columns]
    columns = [list(column.cells) for column in table.columns]
    parts: list[RenderableType] = []
    if table.title:
        parts.append(Text(_plain(table.title), style="bold"))
    for i in range(table.row_count):
        block = Table.grid(padding=(0, 2))
        block.add_column(style="bold", no_wrap=True)
        block.add_column(overflow="fold")  # a word wider than the screen is folded, not cut
        for name, cells in zip(names, columns, strict=True):
            cell = cells[i] if i < len(cells) else ""
            block.add_row(name, cell)
        parts += [Text(""), block]
    if table.caption:
        parts += [Text(""), Text(_plain(table.caption))]
    return Group(*parts)


def _plain(text: Any) -> str:
    plain = text.plain if isinstance(text, Text) else str(text or "")
    return " ".join(plain.split())  # a header set on two lines reads as one


class WholeConsole(Console):
    """A rich console ``DEFAULT_COLUMNS`` wide when told less than ``MIN_COLUMNS``, and
    never wider than ``MAX_COLUMNS``; a table too wide for it is drawn as blocks
    (:func:`fitted`), never with its words cut."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # an address such as [2001:db8::1234:5678] is not the emoji code ":1234:"
        kwargs.setdefault("emoji", False)
        super().__init__(*args, **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(fitted(self, o) for o in objects), **kwargs)

    @property
    def size(self) -> ConsoleDimensions:
        width, height = Console.size.fget(self)  # type: ignore[attr-defined]
        return ConsoleDimensions(_columns(width), height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]

    @property
    def width(self) -> int:
        return self.size.width

    @width.setter
    def width(self, width: int) -> None:
        Console.width.fset(self, width)  # type: ignore[attr-defined]


class WholeStdout(io.StringIO):
    """``sys.stdout`` while a command runs: text kept in memory until :meth:`write_whole`.

    It answers ``encoding`` and ``isatty`` as the real stdout would, so rich picks the
    colours and box characters that destination can show.
    """

    def __init__(self, real: TextIO | None) -> None:
        super().__init__()
        self.real = real

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.real, "encoding", None) or "utf-8"

    def isatty(self) -> bool:
        try:
            return self.real is not None and self.real.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        if self.real is None:
            raise io.UnsupportedOperation("standard output is closed")
        return self.real.fileno()

    @classmethod
    def install(cls) -> WholeStdout:
        """Stand in for ``sys.stdout`` from now on (and clamp ``COLUMNS``)."""
        sane_columns()
        whole = cls(sys.stdout)
        sys.stdout = whole
        return whole

    def discard(self) -> None:
        """Give ``sys.stdout`` back and drop what was written (the command failed)."""
        sys.stdout = self.real  # type: ignore[assignment]

    def write_whole(self) -> None:
        """Give ``sys.stdout`` back and write everything to it at once; a failure is one
        ScenarioError (stdout closed, disk full, reader gone), and nothing more is tried."""
        sys.stdout = self.real  # type: ignore[assignment]
        text = self.getvalue()
        if not text:
            return
        try:
            if self.real is None:
                raise OSError(errno.EBADF, "standard output is closed")
            data = encodable(text, self.encoding)
            binary = getattr(self.real, "buffer", None)
            if binary is None:
                self.real.write(data.decode(self.encoding))
                self.real.flush()
            else:
                self.real.flush()
                binary.write(data)
                binary.flush()
        except (OSError, ValueError) as exc:
            _silence_stdout()
            reason = getattr(exc, "strerror", None) or str(exc) or "standard output is closed"
            raise ScenarioError(f"cannot write the output: {reason}", source="stdout") from None


def encodable(text: str, encoding: str) -> bytes:
    """``text`` in ``encoding``; characters it lacks become ASCII stand-ins, then '?'."""
    try:
        return text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        pass
    try:
        return text.translate(_ASCII).encode(encoding, errors="replace")
    except LookupError:
        return text.translate(_ASCII).encode("ascii", errors="replace")


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's last flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
