"""The fleet's settings: the state URL checked, the password file read, the replica named."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tierwise.errors import ScenarioError
from tierwise.scenario.schema import ErrorAt
from tierwise.secretfile import private_file

__all__ = ["StateTarget", "check_state_url", "replica_name", "state_target"]


@dataclass(frozen=True)
class StateTarget:
    """Where the fleet's state lives and how to reach it."""

    url: str  # without credentials (safe to print)
    host: str
    port: int
    db: int
    tls: bool
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None


def check_state_url(url: str, key: str = "state") -> tuple[str, int, int, bool]:
    """``redis://HOST:PORT/DB`` or ``rediss://…`` → host, port, db, TLS; else an error at
    ``gateway.<key>`` saying what was expected. A password in the URL is refused: the
    config file is no secret (``state_password_file`` is)."""
    expected = "expected redis://HOST:PORT/DB or rediss://HOST:PORT/DB"
    try:
        parts = urlsplit(url)
        port = parts.port or 6379
    except ValueError:
        raise ErrorAt((key,), f"{expected}, got {url!r}") from None
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise ErrorAt((key,), f"{expected}, got {url!r}")
    if parts.username or parts.password:
        raise ErrorAt((key,), "put no user or password in the URL; use state_password_file")
    if parts.query or parts.fragment:
        raise ErrorAt((key,), f"{expected} (no query), got {url!r}")
    db_text = parts.path.strip("/") or "0"
    if not db_text.isdigit() or int(db_text) > 15:
        raise ErrorAt((key,), f"the database is a number 0–15, got {db_text!r}")
    return parts.hostname, port, int(db_text), parts.scheme == "rediss"


def read_password(path: Path) -> tuple[str | None, str]:
    """``PASSWORD`` or ``USER PASSWORD`` from the first line of a private (0600) file."""
    private_file(path, "state password file")
    try:
        line = path.read_text(encoding="utf-8").splitlines()[0].strip()
    except (OSError, UnicodeDecodeError, IndexError):
        line = ""
    if not line:
        raise ScenarioError("state password file is empty", source=str(path))
    words = line.split(None, 1)
    return (words[0], words[1].strip()) if len(words) == 2 else (None, words[0])


def state_target(
    url: str, password_file: str | None, ca_file: str | None, source: str = "gateway.state"
) -> StateTarget:
    """Everything needed to connect, checked now (at start-up, exit 2 on a mistake)."""
    try:
        host, port, db, tls = check_state_url(url)
    except ErrorAt as exc:
        raise ScenarioError(str(exc), source=source) from None
    try:
        import redis  # noqa: F401 (the fleet's client, an extra)
    except ImportError:
        raise ScenarioError(
            "sharing state needs the redis package: pip install 'tierwise[fleet]'", source=source
        ) from None
    user = password = None
    if password_file is not None:
        user, password = read_password(Path(password_file))
    if ca_file is not None:
        if not tls:
            raise ScenarioError("state_ca_file needs a rediss:// URL", source=source)
        if not Path(ca_file).is_file():
            raise ScenarioError("no such CA file", source=ca_file)
    return StateTarget(url, host, port, db, tls, user, password, ca_file)


def replica_name(configured: str | None, port: int) -> str:
    """The replica's name: as configured, else ``HOST:PORT``."""
    return configured or f"{socket.gethostname()}:{port}"
