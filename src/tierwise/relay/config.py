"""``tierwise relay gateway|client`` settings: one TOML file and the flags, merged and checked.

Every option can also come from one TOML file (``--config relay.toml``) whose keys are
the long option names with ``_`` for ``-`` (``key_file``, ``allow``,
``connect_timeout``…); a flag given on the command line wins over the file, and
relative paths in the file are relative to the file. An unknown key, a value of the
wrong type or out of range is one line and exit 2 (a :class:`ScenarioError` naming the
file or the flag). :func:`gateway_settings` and :func:`client_settings` return what a
command runs with, the key and SOCKS password read from their private files;
``check()`` is the effective settings as ``--check`` prints them (JSON).

Only the standard library, :mod:`tierwise.errors` and :mod:`tierwise.addresses` are
imported at the top; the relay's own modules (keys, tuning, the protocol's defaults)
load inside the functions that need them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierwise.addresses import (
    format_address,
    is_ip,
    is_loopback,
    is_port,
    parse_address,
    parse_destination,
)
from tierwise.errors import ScenarioError, did_you_mean, shown

__all__ = [
    "CLIENT_KEYS",
    "GATEWAY_KEYS",
    "ClientSettings",
    "GatewaySettings",
    "client_settings",
    "gateway_settings",
    "parse_stats_addr",
]

Addr = tuple[str, int]
Forward = tuple[Addr, Addr]  # (listen, target)
# the tuning flags in tuning.FLAGS order: stream_window, session_window, fec_target,
# idle_timeout, initial_rate, max_datagram
Tuning = tuple[str | None, ...]

# key: (type, (low, high) for integers); the file's keys are these and nothing else
GATEWAY_KEYS: dict[str, tuple[type, tuple[int, int] | None]] = {
    "listen": (str, None),
    "allow": (list, None),
    "key_file": (str, None),
    "log_level": (str, None),
    "max_sessions": (int, (1, 4096)),
    "max_streams": (int, (1, 65536)),
    "stats": (str, None),
    "path_memory": (str, None),  # a state file, or "off" (pathmemory.py)
    "session": (dict, None),  # the session's tunables: tuning.py
}
CLIENT_KEYS: dict[str, tuple[type, tuple[int, int] | None]] = {
    "gateway": (str, None),
    "socks": (str, None),
    "forward": (list, None),
    "user": (str, None),
    "password_file": (str, None),
    "key_file": (str, None),
    "log_level": (str, None),
    "connect_timeout": (str, None),
    "udp_buffer": (int, (1024, 64 << 20)),
    "public_forward": (bool, None),
    "path_memory": (str, None),
    "session": (dict, None),
}
# a secret in the file would sit beside settings people share and print (--check):
# each has a key naming a private file instead
SECRET_KEYS = {"password": "password_file", "key": "key_file"}
CONNECT_TIMEOUT_S = (0.1, 300.0)


@dataclass(frozen=True)
class GatewaySettings:
    """What ``relay gateway`` runs with; ``log_level`` upper-case, as logging takes it."""

    listen: Addr
    allow: set[Addr]
    key_file: Path
    key: bytes
    max_sessions: int
    max_streams: int
    stats: Addr | None
    log_level: str
    session: dict  # RelayConfig fields from [session] and the tuning flags (tuning.py)
    path_memory: Path | None = None  # the state file of what sessions measured; None: off

    def check(self) -> str:
        """The effective settings as ``--check`` prints them: JSON, one key per setting."""
        return _check_json(
            {"listen": self.listen, "allow": sorted(self.allow), "key_file": self.key_file,
             "max_sessions": self.max_sessions, "max_streams": self.max_streams,
             "stats": self.stats, "log_level": self.log_level.lower(),
             "path_memory": self.path_memory or "off",
             "session": _effective("gateway", self.session, max_streams=self.max_streams)}
        )  # fmt: skip


@dataclass(frozen=True)
class ClientSettings:
    """What ``relay client`` runs with; ``exposed`` are the forwards that listen beyond
    loopback (allowed by ``public_forward``), to be warned about when they open."""

    gateway: Addr
    socks: Addr
    forwards: list[Forward]
    public_forward: bool
    exposed: list[Forward]
    credentials: tuple[str, str] | None
    key_file: Path
    key: bytes
    connect_timeout_s: float
    udp_buffer: int
    log_level: str
    session: dict
    path_memory: Path | None = None  # the state file of what sessions measured; None: off

    def check(self) -> str:
        """The effective settings as ``--check`` prints them (the user, never the password)."""
        return _check_json(
            {"gateway": self.gateway, "socks": self.socks, "forward": self.forwards,
             "public_forward": self.public_forward, "key_file": self.key_file,
             "user": self.credentials[0] if self.credentials else None,
             "connect_timeout_s": self.connect_timeout_s, "udp_buffer": self.udp_buffer,
             "log_level": self.log_level.lower(), "path_memory": self.path_memory or "off",
             "session": _effective("client", self.session)}
        )  # fmt: skip


def gateway_settings(
    config: Path | None,
    *,
    listen: str | None,
    allow: list[str] | None,
    max_sessions: int | None,
    max_streams: int | None,
    stats: str | None,
    tuning: Tuning,
    key_file: Path | None,
    log_level: str | None,
    path_memory: str | None = None,
) -> GatewaySettings:
    """The gateway's settings from the file ``config`` and the flags, checked in the
    order the errors are reported."""
    cfg = _config(config, GATEWAY_KEYS)
    src = str(config) if config is not None else None
    tuned = _session(cfg, config, "gateway", *tuning)
    level = _level(log_level, cfg, src)
    text, where_src, where = _pick(listen, cfg, "listen", src, "0.0.0.0:7443")
    addr = parse_address(text, where, where_src)
    items, where_src, where = _pick(allow, cfg, "allow", src, [])
    allowed = {parse_destination(a, where, where_src) for a in items}
    if not allowed:
        raise ScenarioError(
            "at least one --allow HOST:PORT is required", source=where_src, path=where
        )
    sessions = _int(max_sessions, cfg, "max_sessions", 64, GATEWAY_KEYS)
    streams = _int(max_streams, cfg, "max_streams", 1024, GATEWAY_KEYS)
    text, where_src, where = _pick(stats, cfg, "stats", src)
    stats_addr = parse_stats_addr(text, where, where_src) if text is not None else None
    memory = _path_memory(path_memory, cfg, config, "gateway")
    path = _key_path(key_file, cfg)
    return GatewaySettings(
        listen=addr, allow=allowed, key_file=path, key=_read_key(path),
        max_sessions=sessions, max_streams=streams, stats=stats_addr, log_level=level,
        session=tuned, path_memory=memory,
    )  # fmt: skip


def client_settings(
    config: Path | None,
    *,
    gateway: str | None,
    socks: str | None,
    forward: list[str] | None,
    public_forward: bool,
    user: str | None,
    password_file: Path | None,
    connect_timeout: str | None,
    udp_buffer: int | None,
    tuning: Tuning,
    key_file: Path | None,
    log_level: str | None,
    path_memory: str | None = None,
) -> ClientSettings:
    """The client's settings from the file ``config`` and the flags, checked in the
    order the errors are reported; the SOCKS password read from its private file."""
    cfg = _config(config, CLIENT_KEYS)
    src = str(config) if config is not None else None
    tuned = _session(cfg, config, "client", *tuning)
    level = _level(log_level, cfg, src)
    gw, where_src, where = _pick(gateway, cfg, "gateway", src)
    if gw is None:
        raise ScenarioError("the gateway address is required", path="--gateway")
    gw_addr = parse_destination(gw, where, where_src)
    text, where_src, where = _pick(socks, cfg, "socks", src, "127.0.0.1:1080")
    socks_addr = parse_address(text, where, where_src)
    socks_from = where_src, where
    items, where_src, where = _pick(forward, cfg, "forward", src, [])
    forwards = [_forward(item, where, where_src) for item in items]
    _distinct_listeners(socks_addr, forwards)
    public = public_forward or cfg.get("public_forward", False)
    exposed = _exposed_forwards(forwards, public, where, where_src)
    credentials = _credentials(
        _pick(user, cfg, "user", src), password_file, cfg, socks_addr, socks_from
    )
    timeout_s = _timeout_s(connect_timeout, cfg, src)
    buffer = _int(udp_buffer, cfg, "udp_buffer", 1 << 20, CLIENT_KEYS)
    memory = _path_memory(path_memory, cfg, config, "client")
    path = _key_path(key_file, cfg)
    return ClientSettings(
        gateway=gw_addr, socks=socks_addr, forwards=forwards, public_forward=public,
        exposed=exposed, credentials=credentials, key_file=path, key=_read_key(path),
        connect_timeout_s=timeout_s, udp_buffer=buffer, log_level=level, session=tuned,
        path_memory=memory,
    )  # fmt: skip


def _check_json(settings: dict) -> str:
    return json.dumps(settings, indent=2, default=str) + "\n"


def parse_stats_addr(
    text: str, flag: str = "--stats", source: str | None = None
) -> tuple[str, int]:
    """``HOST:PORT``, or a bare ``PORT`` on loopback (127.0.0.1), the safe default."""
    if text.isascii() and text.isdigit():
        if not is_port(text):
            raise ScenarioError(
                f"expected a port from 1 to 65535, got {shown(text)}", source=source, path=flag
            )
        return "127.0.0.1", int(text)
    return parse_address(text, flag, source)


def _config(path: Path | None, keys: dict[str, tuple[type, tuple[int, int] | None]]) -> dict:
    """The file's settings, checked against ``keys``; relative paths made absolute."""
    if path is None:
        return {}
    from tierwise.tomlfile import read_toml

    _not_writable_by_others(path)
    cfg = read_toml(path)  # a FIFO (<(make-config)) too, bounded by tomlfile.INPUT_WAIT_S
    for key, value in cfg.items():
        if SECRET_KEYS.get(key) in keys:
            raise ScenarioError(
                f"a secret does not go in the config file; put it in a file only you can "
                f"read (chmod 600) and name that file with {SECRET_KEYS[key]}",
                source=str(path),
                path=key,
            )
        if key not in keys:
            raise ScenarioError(
                f"unknown key{did_you_mean(key, keys)}; expected one of: {', '.join(keys)}",
                source=str(path),
                path=key,
            )
        kind, bounds = keys[key]
        if kind is dict:
            continue  # [session]: checked by tuning.session_settings
        _check_value(value, kind, bounds, str(path), key)
        if key.endswith("_file"):
            cfg[key] = str(path.parent / value)
    return cfg


def _not_writable_by_others(path: Path) -> None:
    """Refuse a config file group or others may write (OpenSSH's rule for its config):
    whoever can write it chooses the key the relay trusts and what the gateway allows."""
    import shlex
    import stat

    try:
        mode = path.stat().st_mode
    except OSError:
        return  # read_toml says why
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ScenarioError(
            f"config file is writable by group or others (mode {stat.S_IMODE(mode):04o}), who "
            f"could choose its key and destinations; run: chmod go-w {shlex.quote(str(path))}",
            source=str(path),
        )


def _check_value(value: Any, kind: type, bounds: Any, source: str, key: str) -> None:
    if kind is list:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        what = "a list of strings"
    elif kind is bool:
        ok, what = isinstance(value, bool), "true or false"
    else:
        ok = isinstance(value, kind) and not isinstance(value, bool)
        what = {str: "a string", int: "an integer"}[kind]
    if not ok:
        raise ScenarioError(f"expected {what}, got {shown(value)}", source=source, path=key)
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise ScenarioError(
            f"must be in [{bounds[0]}, {bounds[1]}], got {shown(value)}", source=source, path=key
        )


def _pick(flag_value: Any, cfg: dict, key: str, source: str | None, default: Any = None):  # type: ignore[no-untyped-def]
    """``(value, source, where)`` of a setting: the flag's if given (an empty string is
    a value to check, never "not given"), else the file's (named by its key, so an error
    names the file, not a flag the user never typed), else ``default``."""
    flag = "--" + key.replace("_", "-")
    if flag_value is not None and flag_value != []:
        return flag_value, None, flag
    if key in cfg:
        return cfg[key], source, key
    return default, None, flag


def _int(value: int | None, cfg: dict, key: str, default: int, keys: dict) -> int:
    if value is None:
        return cfg.get(key, default)
    _check_value(value, int, keys[key][1], "command line", "--" + key.replace("_", "-"))
    return value


def _level(flag: str | None, cfg: dict, source: str | None) -> str:
    text, src, where = _pick(flag, cfg, "log_level", source, "info")
    if text.lower() not in ("debug", "info", "warning", "error"):
        raise ScenarioError(
            f"unknown log level {shown(text)}; expected debug, info, warning or error",
            source=src, path=where,
        )  # fmt: skip
    return text.upper()


def _path_memory(flag: str | None, cfg: dict, config: Path | None, side: str) -> Path | None:
    """The path memory's state file: the flag's or the file's (relative to the file),
    ``off`` for none, else the user's state directory (pathmemory.default_path)."""
    from tierwise.relay.pathmemory import default_path

    src = str(config) if config is not None else None
    text, where_src, where = _pick(flag, cfg, "path_memory", src)
    if text is None:
        return default_path(side)
    if text == "off":
        return None
    if not text.strip() or "\0" in text or text.endswith("/"):
        raise ScenarioError(
            f"expected a file path or off, got {shown(text)}", source=where_src, path=where
        )
    path = Path(text).expanduser()
    if where_src is not None and config is not None and not path.is_absolute():
        path = config.parent / path
    return path


def _key_path(flag: Path | None, cfg: dict) -> Path:
    path = flag or (Path(cfg["key_file"]) if "key_file" in cfg else None)
    if path is None:
        raise ScenarioError("a key is required (from tierwise relay keygen)", path="--key-file")
    return path


def _read_key(path: Path) -> bytes:
    from tierwise.relay.keys import read_key

    return read_key(path)


def _timeout_s(flag: str | None, cfg: dict, source: str | None) -> float:
    from tierwise.errors import UnitError
    from tierwise.units import parse_quantity

    text, src, where = _pick(flag, cfg, "connect_timeout", source, "10 s")
    try:
        seconds = parse_quantity(text, "time")
    except UnitError as exc:
        raise ScenarioError(str(exc), source=src, path=where) from None
    low, high = CONNECT_TIMEOUT_S
    if not low <= seconds <= high:
        raise ScenarioError(
            f"must be between {low:g} s and {high:g} s, got {shown(text)}", source=src, path=where
        )
    return seconds


def _session(cfg: dict, path: Path | None, side: str, *flags: str | None) -> dict:
    """The ``[session]`` table and the tuning flags, checked (tuning.py)."""
    from tierwise.relay.tuning import FLAGS, session_settings

    source = str(path) if path is not None else "command line"
    return session_settings(cfg.get("session"), source, side, dict(zip(FLAGS, flags, strict=True)))


def _effective(side: str, tuned: dict, **extra: Any) -> dict:
    """Every tunable the session will run with (what ``relay stats --json`` shows)."""
    from tierwise.proto.relay import RelayConfig
    from tierwise.relay.client import DEAD_PEER_S, SILENT_GRACE_S
    from tierwise.relay.gateway import IDLE_TIMEOUT_S
    from tierwise.relay.tuning import effective

    side_defaults = {"dead_peer_s": DEAD_PEER_S, "silent_grace_s": SILENT_GRACE_S} if (
        side == "client") else {"idle_timeout_s": IDLE_TIMEOUT_S}  # fmt: skip
    config = RelayConfig(**{**side_defaults, **tuned, **extra})
    return {**effective(config, side), **({"max_streams": config.max_streams} if extra else {})}


def _forward(
    item: str, where: str = "--forward", source: str | None = None
) -> tuple[tuple[str, int], tuple[str, int]]:
    listen, sep, target = item.partition("=")
    if not sep:
        raise ScenarioError(f"expected LISTEN=TARGET, got {shown(item)}", source=source, path=where)
    return parse_address(listen, where, source), parse_destination(target, where, source)


def _distinct_listeners(
    socks: tuple[str, int], forwards: list[tuple[tuple[str, int], tuple[str, int]]]
) -> None:
    """Every local port once: a second listener on an address (or the same port on a
    wildcard address) could only fail at start-up, after the session is opened."""
    taken: dict[tuple[str, int], str] = {socks: "--socks"}
    for listen, _ in forwards:
        host, port = listen
        for (other_host, other_port), flag in taken.items():
            wildcard = {host, other_host} & {"0.0.0.0", "::"}
            if port == other_port and (host == other_host or wildcard):
                raise ScenarioError(
                    f"{format_address(listen)} listens on the port {flag} "
                    f"({format_address((other_host, other_port))}) already takes; "
                    "give each listener its own port",
                    path="--forward",
                )
        taken[listen] = "--forward"


def _exposed_forwards(
    forwards: list[tuple[tuple[str, int], tuple[str, int]]],
    public: bool,
    where: str,
    source: str | None,
) -> list[tuple[tuple[str, int], tuple[str, int]]]:
    """The forwards that listen beyond loopback; refused unless ``public`` (the operator's
    explicit opt-in). A forward has no authentication: on 0.0.0.0 it hands its target to
    anyone who can reach this host, an open proxy to one destination. ssh -L binds
    loopback too unless GatewayPorts says otherwise."""
    exposed = [(listen, target) for listen, target in forwards if not is_loopback(listen[0])]
    if exposed and not public:
        listen, target = exposed[0]
        what = "is not a loopback address" if is_ip(listen[0]) else (
            "does not resolve to loopback addresses only")  # fmt: skip
        raise ScenarioError(
            f"{format_address(listen)} {what}, and a forward has no "
            f"authentication: anyone who reaches it reaches {format_address(target)}; listen on "
            "127.0.0.1 or [::1], or add --public-forward (public_forward = true) to mean it",
            source=source, path=where,
        )  # fmt: skip
    return exposed


def _credentials(
    user_pick: tuple[Any, str | None, str],
    flag: Path | None,
    cfg: dict,
    socks_addr: tuple[str, int],
    socks_from: tuple[str | None, str] = (None, "--socks"),
) -> tuple[str, str] | None:
    user, user_src, user_where = user_pick
    path = flag or (Path(cfg["password_file"]) if "password_file" in cfg else None)
    if user is None and path is not None:
        raise ScenarioError(
            "a password file without a user: add --user NAME (RFC 1929), or drop it",
            path="--password-file",
        )
    if user is not None:
        if path is None:
            raise ScenarioError("--user needs --password-file", path="--password-file")
        user_bytes = _utf8(user, user_src, user_where)
        if not 0 < len(user_bytes) < 256:
            raise ScenarioError(
                f"must be 1–255 bytes (RFC 1929), got {len(user_bytes)}",
                source=user_src, path=user_where,
            )  # fmt: skip
        return user, _read_password(path)
    if not is_loopback(socks_addr[0]):
        raise ScenarioError(
            f"{format_address(socks_addr)} is not loopback-only, and SOCKS without a password may "
            "listen on loopback only; add --user (and --password-file)",
            source=socks_from[0], path=socks_from[1],
        )  # fmt: skip
    return None


def _read_password(path: Path) -> str:
    """The SOCKS password in ``path``: a private file (0600, as the key), 1–255 bytes."""
    from tierwise.relay.keys import private_file
    from tierwise.tomlfile import read_text

    private_file(path, "password file")
    password = read_text(path).strip()
    if not 0 < len(password.encode()) < 256:
        raise ScenarioError(
            f"the password must be 1–255 bytes (RFC 1929), got {len(password.encode())}",
            source=str(path),
        )
    return password


def _utf8(text: str, source: str | None, where: str) -> bytes:
    """``text`` as UTF-8; an argument that was not (``$'\\xff'``) is one line."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        raise ScenarioError(
            f"{shown(text)} is not valid UTF-8", source=source, path=where
        ) from None
