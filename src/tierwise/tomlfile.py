"""Read a user's TOML file (scenario, sim file or catalog) with every failure as one line.

One reader for every file a user hands us, so that each gets the same guarantees:

- at most ``MAX_FILE_BYTES`` are read (a FIFO or ``/dev/zero`` cannot exhaust memory);
- a FIFO, socket or device is read without blocking: one that has not finished within
  ``INPUT_WAIT_S`` (``mkfifo f; tierwise plan f`` with no writer) is an error, not a
  hang, while ``--config <(make-config)`` still reads what its writer sends;
- bytes that are not UTF-8 are named by offset and line; a UTF-8 byte-order mark is
  accepted and dropped (editors on Windows write one);
- tables and arrays nested deeper than ``MAX_DEPTH`` (a 1,000-part dotted header,
  ``[[[[...]]]]``) are refused before anything walks them recursively;
- an integer longer than Python reads (4,300 digits) is a syntax error, not a crash.

Errors are ``error(message, source)``: a :class:`~tierwise.errors.ScenarioError` by
default, or the caller's own type (the catalog raises :class:`CatalogError`).
"""

from __future__ import annotations

import os
import stat
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tierwise.errors import ScenarioError, TierwiseError

__all__ = [
    "INPUT_WAIT_S",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "check_depth",
    "parse_toml",
    "read_bytes",
    "read_json",
    "read_text",
    "read_toml",
]

MAX_FILE_BYTES = 10_000_000  # the bundled files are a few kB; a scenario is never 10 MB
MAX_DEPTH = 16  # the schema's deepest key is 5 levels (variability.site.<name>.uplink.dist)
INPUT_WAIT_S = 5.0  # a FIFO or device (<(…), /dev/stdin): how long its writer may take
_BOM = b"\xef\xbb\xbf"

ErrorFactory = Callable[[str, str], TierwiseError]


def scenario_error(message: str, source: str) -> TierwiseError:
    """The default error: a ScenarioError naming ``source``."""
    return ScenarioError(message, source=source)


def read_toml(path: str | Path, *, error: ErrorFactory = scenario_error) -> dict[str, Any]:
    """Read and parse the TOML file at ``path``; any problem is one ``error``."""
    return parse_toml(read_bytes(path, error), str(path), error=error)


def read_text(path: str | Path, *, error: ErrorFactory = scenario_error) -> str:
    """The UTF-8 text of ``path`` (a key, a log), with the same bounds as a TOML file."""
    return _decode(read_bytes(path, error), str(path), error)


def read_json(path: str | Path, *, error: ErrorFactory = scenario_error) -> dict[str, Any]:
    """The JSON object in ``path`` (a config.json); any problem is one ``error``."""
    import json

    source = str(path)
    text = read_text(path, error=error)
    try:
        data = json.loads(text)
    except RecursionError:
        raise error("JSON nested deeper than Python can read; not read", source) from None
    except ValueError as exc:  # JSONDecodeError, or an int of more than 4,300 digits
        raise error(f"not JSON: {_short(str(exc))}", source) from None
    if not isinstance(data, dict):
        raise error("expected a JSON object", source)
    check_depth(data, source, error=error)
    return data


def read_bytes(path: str | Path, error: ErrorFactory = scenario_error) -> bytes:
    """The bytes of ``path``, at most ``MAX_FILE_BYTES``; any problem is one ``error``.

    Opened without blocking, so a FIFO with no writer cannot stall the open itself.
    """
    source = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error("cannot read file: file not found", source) from None
    except IsADirectoryError:
        raise error("cannot read file: it is a directory, not a file", source) from None
    except OSError as exc:
        raise error(f"cannot read file: {exc.strerror or exc}", source) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error("cannot read file: it is a directory, not a file", source)
        if stat.S_ISREG(mode):
            os.set_blocking(fd, True)
            data = _read_regular(fd)
        else:
            data = _read_stream(fd, source, error)
    except OSError as exc:
        raise error(f"cannot read file: {exc.strerror or exc}", source) from None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise error(f"file is larger than {MAX_FILE_BYTES // 1_000_000} MB; not read", source)
    return data


def _read_regular(fd: int) -> bytes:
    chunks = []
    left = MAX_FILE_BYTES + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_stream(fd: int, source: str, error: ErrorFactory) -> bytes:
    """A FIFO's or device's bytes up to end of file, or one ``error`` after ``INPUT_WAIT_S``."""
    import select

    data = bytearray()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + INPUT_WAIT_S
    while len(data) <= MAX_FILE_BYTES:
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            raise error(
                f"not a regular file, and its writer did not finish within {INPUT_WAIT_S:g} s "
                "(a FIFO nothing writes to?); not read",
                source,
            )
        if not poller.poll(left_s * 1e3):
            continue
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            continue
        if not chunk:
            break
        data += chunk
    return bytes(data)


def parse_toml(
    data: bytes | str, source: str, *, error: ErrorFactory = scenario_error
) -> dict[str, Any]:
    """Parse TOML text (or UTF-8 bytes, a leading BOM dropped) and bound its depth."""
    text = _decode(data, source, error) if isinstance(data, bytes) else data.removeprefix("\ufeff")
    if len(text) > MAX_FILE_BYTES:
        raise error(f"text is longer than {MAX_FILE_BYTES:,} characters; not read", source)
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"TOML syntax error: {_short(str(exc))}", source) from None
    except RecursionError:
        raise error(f"TOML syntax error: nested deeper than {MAX_DEPTH} levels", source) from None
    except ValueError:  # int() refuses more than 4,300 digits
        raise error("TOML syntax error: a number has more than 4,300 digits", source) from None
    check_depth(parsed, source, error=error)
    return parsed


def _short(message: str, limit: int = 120) -> str:
    """tomllib's message, its middle cut (it may quote a 1,000-part key) but its position kept."""
    if len(message) <= limit:
        return message
    head, paren, where = message.rpartition(" (at ")
    tail = paren + where if paren and len(where) < 40 else ""
    return (head if paren else message)[: limit - len(tail)] + "…" + tail


def _decode(data: bytes, source: str, error: ErrorFactory) -> str:
    try:
        return data.removeprefix(_BOM).decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start + (len(_BOM) if data.startswith(_BOM) else 0)
        line = data.count(b"\n", 0, offset) + 1
        raise error(
            f"not UTF-8 text: byte 0x{data[offset]:02x} at offset {offset} (line {line}); "
            "save the file as UTF-8",
            source,
        ) from None


def check_depth(data: Any, source: str, *, error: ErrorFactory = scenario_error) -> None:
    """Refuse tables/arrays nested deeper than ``MAX_DEPTH``, naming the key path (iterative)."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(data, ())]
    while stack:
        node, path = stack.pop()
        if len(path) > MAX_DEPTH:
            shown = ".".join(path[:4])
            raise error(
                f"{shown}…: tables or arrays nested deeper than {MAX_DEPTH} levels "
                "(no key of the schema is that deep)",
                source,
            )
        if isinstance(node, dict):
            stack.extend((v, (*path, str(k)[:20])) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*path, f"[{i}]")) for i, v in enumerate(node))
