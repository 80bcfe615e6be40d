"""Pre-shared relay keys: generated from the OS, stored hex-encoded in 0600 files.

A key file readable by group or others is refused (OpenSSH's rule for private
keys): the key is the whole of the relay's security. Every secret the relay reads
from a file (the key, the SOCKS password) passes the same check,
:func:`private_file`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tierwise.errors import ScenarioError

__all__ = ["generate_key", "private_file", "read_key", "regular_file", "write_key"]

KEY_BYTES = 32


def generate_key() -> str:
    """A fresh 256-bit key as 64 hex digits."""
    return os.urandom(KEY_BYTES).hex()


def write_key(path: Path, key_hex: str) -> None:
    """Create ``path`` with mode 0600 (never overwriting) holding ``key_hex``."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise ScenarioError(f"cannot create key file: {exc.strerror}", source=str(path)) from exc
    with os.fdopen(fd, "w") as f:
        f.write(key_hex + "\n")


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


def read_key(path: Path) -> bytes:
    """The 32-byte key in ``path``; refused if the file is readable by group or others,
    or is not a regular file."""
    private_file(path, "key file")
    from tierwise.tomlfile import read_text

    text = read_text(path).strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise ScenarioError(
            f"expected {2 * KEY_BYTES} hex digits (from tierwise relay keygen), "
            f"got {len(text)} characters",
            source=str(path),
        )
    return key
