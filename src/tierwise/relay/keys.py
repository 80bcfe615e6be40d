"""Pre-shared relay keys: generated from the OS, stored hex-encoded in 0600 files.

A key file readable by group or others is refused (OpenSSH's rule for private
keys): the key is the whole of the relay's security. Every secret the relay reads
from a file (the key, the SOCKS password) passes the same check,
:func:`private_file`.
"""

from __future__ import annotations

import os
from pathlib import Path

from tierwise.errors import ScenarioError
from tierwise.secretfile import private_file, regular_file

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
