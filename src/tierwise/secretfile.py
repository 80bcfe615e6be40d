"""Files that hold secrets: a key, a password, the gateway's client keys.

One rule for every secret read from a file (OpenSSH's for private keys): it must be a
regular file — a FIFO would block the reader until some writer came, a device is no
secret, a directory no key — that neither group nor others may read, write or run: a
secret others can read is no secret, and one others can write can be swapped for theirs.
Each refusal is one line naming the file, its mode and the fix.
"""

from __future__ import annotations

import stat
from pathlib import Path

from tierwise.errors import ScenarioError

__all__ = ["private_file", "regular_file"]


def regular_file(path: Path, what: str) -> int:
    """The mode of ``path`` if it is a regular file; else one line naming it. A FIFO
    would block the reader until some writer comes (a hang at start-up), a device is no
    secret and a directory no key: each is refused before anything opens it."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise ScenarioError(
            f"cannot read {what}: {exc.strerror or exc}", source=str(path)
        ) from None
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "something else")
        raise ScenarioError(f"{what} is {kind}, not a regular file", source=str(path))
    return mode


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def private_file(path: Path, what: str) -> None:
    """Refuse ``path`` (one line naming it, its mode and the fix) unless it is a regular
    file that neither group nor others may read, write or run: a secret others can
    read is no secret, and one others can write can be swapped for theirs."""
    mode = regular_file(path, what)
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        import shlex

        raise ScenarioError(
            f"{what} is accessible by others (mode {stat.S_IMODE(mode):04o}); "
            f"run: chmod 600 {shlex.quote(str(path))}",
            source=str(path),
        )
