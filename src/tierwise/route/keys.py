"""Client keys of the gateway: a file of named SHA-256 digests, never the keys themselves.

``tierwise route keys add NAME --keys-file F`` draws a key from the OS (``tw-`` and 43
base64url characters: 256 random bits), prints it once and appends its digest to
``F`` (created 0600)::

    [[client]]
    name = "alice"
    sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    rate = 5.0         # requests per second (optional: [gateway] key_rate)
    burst = 10         # requests at once after a quiet spell (optional: key_burst)
    concurrency = 4    # requests in flight (optional: key_concurrency)

Why SHA-256 and not scrypt: the keys are 256 random bits that we generate, not
passwords a person chose, so no dictionary shortens a search of 2²⁵⁶ and a slow hash
would buy nothing — while it would cost tens of milliseconds on every request (the
gateway's whole budget is about one). A stolen keys file therefore gives no key,
and a key is found by a dict lookup of its digest; the digest found is compared
again with :func:`hmac.compare_digest`, so no comparison of secret bytes ends early.

The file is refused if group or others may read or write it (the relay's rule for
its key file): a reader learns who the clients are and a writer could add one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import ConfigDict, Field

from tierwise.errors import ScenarioError
from tierwise.schemakeys import NoBooleanNumbers
from tierwise.secretfile import private_file

__all__ = ["Client", "KeyRing", "add_key", "digest", "load_keys", "new_key"]

KEY_PREFIX = "tw-"
KEY_BYTES = 32
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
HEADER = (
    "# tierwise route client keys: the SHA-256 of each key, never the key.\n"
    "# Add one with: tierwise route keys add NAME --keys-file THIS-FILE\n"
)


class _Entry(NoBooleanNumbers):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME.pattern, description="who holds the key (logs, metrics)")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex SHA-256 of the key")
    rate: float | None = Field(None, gt=0, description="requests per second")
    burst: int | None = Field(None, ge=1, description="requests at once after a quiet spell")
    concurrency: int | None = Field(None, ge=1, description="requests in flight")


class _File(NoBooleanNumbers):
    model_config = ConfigDict(extra="forbid", frozen=True)

    client: list[_Entry] = Field(default_factory=list)


@dataclass(frozen=True)
class Client:
    """One client: its name and limits (None: the gateway's defaults)."""

    name: str
    digest: bytes
    rate: float | None = None
    burst: int | None = None
    concurrency: int | None = None


def new_key() -> str:
    """A fresh key: ``tw-`` and 256 bits from the OS in base64url."""
    return KEY_PREFIX + base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).rstrip(b"=").decode()


def digest(key: str | bytes) -> bytes:
    """The SHA-256 of a key as sent (the bytes after ``Bearer``)."""
    return hashlib.sha256(key.encode() if isinstance(key, str) else key).digest()


def load_keys(path: str | Path) -> dict[bytes, Client]:
    """The clients of a keys file by digest; every problem is one ScenarioError."""
    from tierwise.scenario.loader import validate
    from tierwise.tomlfile import read_toml

    path = Path(path)
    private_file(path, "keys file")  # who the clients are, and a way to add one
    parsed: _File = validate(read_toml(path), str(path), schema_model=_File)
    clients: dict[bytes, Client] = {}
    names: set[str] = set()
    for i, e in enumerate(parsed.client):
        if e.name in names:
            raise ScenarioError(f"two clients are named {e.name!r}", source=str(path),
                                path=f"client[{i}].name")  # fmt: skip
        d = bytes.fromhex(e.sha256)
        if d in clients:
            raise ScenarioError(f"the same key as {clients[d].name!r}", source=str(path),
                                path=f"client[{i}].sha256")  # fmt: skip
        names.add(e.name)
        clients[d] = Client(e.name, d, e.rate, e.burst, e.concurrency)
    return clients


def add_key(
    path: str | Path,
    name: str,
    rate: float | None = None,
    burst: int | None = None,
    concurrency: int | None = None,
) -> str:
    """Append a new client ``name`` to the keys file (created 0600 if missing); return
    its key, which exists nowhere else afterwards."""
    path = Path(path)
    if not NAME.fullmatch(name):
        raise ScenarioError(
            "a client name is 1-64 letters, digits, '_', '.', '@' or '-' (first a letter or "
            f"digit), got {name!r}", source="NAME",
        )  # fmt: skip
    if path.exists():
        clients = load_keys(path)
        if any(c.name == name for c in clients.values()):
            raise ScenarioError(f"a client is already named {name!r}", source=str(path))
        flags = os.O_WRONLY | os.O_APPEND
    else:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    key = new_key()
    lines = ["", "[[client]]", f'name = "{name}"', f'sha256 = "{digest(key).hex()}"']
    lines += [f"rate = {float(rate)!r}"] if rate is not None else []
    lines += [f"burst = {int(burst)}"] if burst is not None else []
    lines += [f"concurrency = {int(concurrency)}"] if concurrency is not None else []
    text = ("" if path.exists() else HEADER) + "\n".join(lines) + "\n"
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise ScenarioError(f"cannot write keys file: {exc.strerror}", source=str(path)) from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    load_keys(path)  # what was written reads back
    return key


class KeyRing:
    """The clients by digest: :meth:`find` is one hash, one dict lookup, one
    constant-time comparison of digests."""

    def __init__(self, clients: dict[bytes, Client]) -> None:
        self.clients = clients

    def find(self, authorization: bytes | None) -> Client | None:
        """The client whose key ``Authorization: Bearer <key>`` carries, or None."""
        if not authorization or authorization[:7].lower() != b"bearer ":
            return None
        d = hashlib.sha256(authorization[7:].strip()).digest()
        client = self.clients.get(d)
        if client is None or not hmac.compare_digest(client.digest, d):
            return None
        return client
