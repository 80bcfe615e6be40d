"""Output files written whole or not at all.

Every file a command writes (a figure, a page, a trace, a table, a record) is first
written under a hidden temporary name in the target's own directory and renamed over
the target only once it is complete. A failure part-way — a full disk, Ctrl-C, a
figure that cannot be drawn — leaves no truncated file, and an existing file of that
name as it was. A symbolic link is followed: its target is replaced, the link stays.

A target that exists and is not a regular file (``/dev/stdout``, ``/dev/null``, a
FIFO) is written directly: it cannot hold half a file, and must not be renamed over.

Usage::

    with staged(path) as tmp:   # write ``tmp`` by any means: open(), savefig(), a writer
        fig.savefig(tmp)
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

__all__ = ["partial_path", "staged", "target_of", "write_text"]


def target_of(path: str | os.PathLike[str]) -> Path:
    """The file ``path`` names, through any symbolic links (a dangling link's target too)."""
    return Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)


def partial_path(target: Path) -> Path:
    """A hidden name beside ``target`` (same directory, so the rename is atomic) that keeps
    its suffix (matplotlib chooses the format by it)."""
    return target.with_name(f".{target.stem}.{os.getpid()}-{secrets.token_hex(3)}{target.suffix}")


@contextlib.contextmanager
def staged(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path to write; on success it becomes ``path``, on error it goes."""
    target = target_of(path)
    try:
        mode = target.stat().st_mode
    except OSError:
        mode = None  # no file yet (or not ours to stat): a new one is staged
    if mode is not None and not stat.S_ISREG(mode):
        yield target  # a device or FIFO: written in place
        return
    tmp = partial_path(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    os.close(fd)  # the name is ours; the caller writes it by path
    try:
        if mode is not None:
            os.chmod(tmp, stat.S_IMODE(mode))  # the replaced file's permissions
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all."""
    with staged(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
