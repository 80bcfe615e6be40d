"""Pre-shared relay keys: generated from the OS, stored hex-encoded in 0600 files.

A key file readable by group or others is refused (OpenSSH's rule for private
keys): the key is the whole of the relay's security.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tierwise.errors import ScenarioError

__all__ = ["generate_key", "read_key", "write_key"]

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


def read_key(path: Path) -> bytes:
    """The 32-byte key in ``path``; refused if the file is readable by group or others."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise ScenarioError(f"cannot read key file: {exc.strerror}", source=str(path)) from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ScenarioError(
            f"key file is accessible by others (mode {stat.S_IMODE(mode):04o}); "
            f"run: chmod 600 {path}",
            source=str(path),
        )
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
