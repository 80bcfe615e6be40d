"""``tierwise relay …``: keygen, gateway, client, stats (§12.3.5).

Only typer and the standard library are imported here; the relay itself loads
inside each command, so ``tierwise --help`` stays fast.

Every option can also come from one TOML file (``--config relay.toml``) whose
keys are the long option names with ``_`` for ``-`` (``key_file``, ``allow``,
``connect_timeout``…); a flag given on the command line wins over the file, and
relative paths in the file are relative to the file. An unknown key, a value
of the wrong type or out of range is one line and exit 2. ``--check`` prints
the effective settings as JSON and exits without opening a socket.
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tierwise.addresses import (
    format_address,
    is_ip,
    is_loopback,
    is_port,
    parse_address,
    parse_destination,
)
from tierwise.errors import ScenarioError, did_you_mean, shown

__all__ = ["relay_app"]

relay_app = typer.Typer(
    help="An accelerated, authenticated client–gateway transport (SOCKS5 in, TCP out).",
    no_args_is_help=True,
)

KeyOpt = Annotated[Path | None, typer.Option("--key-file", help="Key from `relay keygen` (0600).")]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="TOML file with the same keys as the flags.")
]
LogOpt = Annotated[str | None, typer.Option("--log-level", help="debug, info, warning or error.")]
CheckOpt = Annotated[
    bool, typer.Option("--check", help="Print the effective settings as JSON and exit.")
]
# the session tunables an operator sets most often; every one is a [session] key (tuning.py)
StreamWindowOpt = Annotated[
    str | None,
    typer.Option("--stream-window", help="Flow-control window per stream (default 16 MiB)."),
]
SessionWindowOpt = Annotated[
    str | None,
    typer.Option("--session-window", help="Flow-control window of the session (default 32 MiB)."),
]
FecTargetOpt = Annotated[
    str | None,
    typer.Option("--fec-target", help="FEC recovery target of a request (default 0.999)."),
]
IdleOpt = Annotated[
    str | None,
    typer.Option("--idle-timeout", help="End a silent session after this (30 s client, 12 s gw)."),
]
InitialRateOpt = Annotated[
    str | None,
    typer.Option("--initial-rate", help="Pacing rate before the path is measured, e.g. 50Mbit/s."),
]
MaxDatagramOpt = Annotated[
    str | None,
    typer.Option(
        "--max-datagram",
        help="Largest datagram in bytes (default 1350); above it the session discovers the "
        "path's MTU, e.g. 8880 for a 9000-byte jumbo path.",
    ),
]

# key: (type, (low, high) for integers); the file's keys are these and nothing else
GATEWAY_KEYS: dict[str, tuple[type, tuple[int, int] | None]] = {
    "listen": (str, None),
    "allow": (list, None),
    "key_file": (str, None),
    "log_level": (str, None),
    "max_sessions": (int, (1, 4096)),
    "max_streams": (int, (1, 65536)),
    "stats": (str, None),
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
    "session": (dict, None),
}
# a secret in the file would sit beside settings people share and print (--check):
# each has a key naming a private file instead
SECRET_KEYS = {"password": "password_file", "key": "key_file"}
CONNECT_TIMEOUT_S = (0.1, 300.0)


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


def _setup(level: str) -> None:
    import logging

    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )


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


def _print_check(settings: dict) -> None:
    emit(json.dumps(settings, indent=2, default=str) + "\n")


def emit(text: str) -> None:
    """Write ``text`` whole to standard output, or fail with one line: stdout closed
    (``>&-``), a full disk (``>/dev/full``) or a reader gone (``| head -c0``) must not
    end in a traceback, nor in exit 0 when a new key went nowhere."""
    import os

    try:
        if sys.stdout is None:
            raise OSError(errno.EBADF, "standard output is closed")
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError) as exc:
        try:  # keep the interpreter's last flush from printing the same failure again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
        except OSError:
            pass
        reason = getattr(exc, "strerror", None) or "standard output is closed"
        raise ScenarioError(f"cannot write the output: {reason}", source="stdout") from None


@relay_app.command()
def keygen(
    out: Annotated[Path | None, typer.Option("--out", help="Write a new 0600 key file.")] = None,
) -> None:
    """Print (or write) a new 256-bit pre-shared key."""
    from tierwise.relay.keys import generate_key, write_key

    key = generate_key()
    if out is None:
        _private_stdout()
        emit(key + "\n")
    else:
        write_key(out, key)


def _private_stdout() -> None:
    """``keygen > relay.key``: the shell created the file with the umask's mode (0644
    mostly), which the gateway and client rightly refuse for a key; when standard output
    is a regular file, make it 0600 before the key goes in."""
    import os
    import stat

    try:
        fd = sys.stdout.fileno()
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.fchmod(fd, 0o600)
    except (OSError, ValueError, AttributeError) as exc:  # not a real file, or not ours
        if isinstance(exc, PermissionError):
            raise ScenarioError(
                "standard output is a file this user cannot make private (chmod 600); "
                "write the key with --out FILE instead",
                source="keygen",
            ) from None


@relay_app.command()
def gateway(
    listen: Annotated[str | None, typer.Option(help="UDP address to listen on.")] = None,
    allow: Annotated[
        list[str] | None, typer.Option(help="Allowed destination HOST:PORT (repeatable).")
    ] = None,
    max_sessions: Annotated[
        int | None, typer.Option(help="Most client sessions at once (default 64).")
    ] = None,
    max_streams: Annotated[
        int | None, typer.Option(help="Most open streams per session (default 1024).")
    ] = None,
    stats: Annotated[
        str | None,
        typer.Option(
            help="Serve GET /stats (JSON) and /metrics (Prometheus) on this TCP HOST:PORT "
            "(a bare PORT is 127.0.0.1:PORT). Off by default; no authentication."
        ),
    ] = None,
    stream_window: StreamWindowOpt = None,
    session_window: SessionWindowOpt = None,
    fec_target: FecTargetOpt = None,
    idle_timeout: IdleOpt = None,
    initial_rate: InitialRateOpt = None,
    max_datagram: MaxDatagramOpt = None,
    key_file: KeyOpt = None,
    config: ConfigOpt = None,
    log_level: LogOpt = None,
    check: CheckOpt = False,
) -> None:
    """Run the gateway next to the service; it connects only to --allow destinations."""
    cfg = _config(config, GATEWAY_KEYS)
    src = str(config) if config is not None else None
    tuned = _session(
        cfg, config, "gateway", stream_window, session_window, fec_target, idle_timeout,
        initial_rate, max_datagram,
    )  # fmt: skip
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
    path = _key_path(key_file, cfg)
    key = _read_key(path)
    if check:
        _print_check(
            {"listen": addr, "allow": sorted(allowed), "key_file": path,
             "max_sessions": sessions, "max_streams": streams, "stats": stats_addr,
             "log_level": level.lower(),
             "session": _effective("gateway", tuned, max_streams=streams)}
        )  # fmt: skip
        return
    import asyncio

    from tierwise.relay.run import run_gateway

    _setup(level)
    asyncio.run(
        run_gateway(
            key, addr, allowed, max_sessions=sessions, max_streams=streams, session=tuned,
            stats=stats_addr,
        )
    )  # fmt: skip


@relay_app.command()
def client(
    gateway: Annotated[str | None, typer.Option(help="The gateway's HOST:PORT.")] = None,
    socks: Annotated[str | None, typer.Option(help="SOCKS5 listen address.")] = None,
    forward: Annotated[
        list[str] | None,
        typer.Option(
            help="LISTEN=TARGET, both HOST:PORT (repeatable). LISTEN must be a loopback "
            "address unless --public-forward is given."
        ),
    ] = None,
    public_forward: Annotated[
        bool,
        typer.Option(
            "--public-forward",
            help="Let a --forward listen on a non-loopback address: anyone who can reach "
            "it reaches its TARGET, with no authentication (like ssh's GatewayPorts).",
        ),
    ] = False,
    user: Annotated[str | None, typer.Option(help="SOCKS5 user (RFC 1929).")] = None,
    password_file: Annotated[
        Path | None, typer.Option(help="File holding the SOCKS5 password.")
    ] = None,
    connect_timeout: Annotated[
        str | None, typer.Option(help="Give up if the gateway has not answered (default 10 s).")
    ] = None,
    udp_buffer: Annotated[
        int | None,
        typer.Option(
            help="Bytes of UDP ASSOCIATE datagrams queued before dropping (default 1 MiB)."
        ),
    ] = None,
    stream_window: StreamWindowOpt = None,
    session_window: SessionWindowOpt = None,
    fec_target: FecTargetOpt = None,
    idle_timeout: IdleOpt = None,
    initial_rate: InitialRateOpt = None,
    max_datagram: MaxDatagramOpt = None,
    key_file: KeyOpt = None,
    config: ConfigOpt = None,
    log_level: LogOpt = None,
    check: CheckOpt = False,
) -> None:
    """Run the client: a SOCKS5 proxy and forwarded ports over one relay session."""
    cfg = _config(config, CLIENT_KEYS)
    src = str(config) if config is not None else None
    tuned = _session(
        cfg, config, "client", stream_window, session_window, fec_target, idle_timeout,
        initial_rate, max_datagram,
    )  # fmt: skip
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
    path = _key_path(key_file, cfg)
    key = _read_key(path)
    if check:
        _print_check(
            {"gateway": gw_addr, "socks": socks_addr, "forward": forwards,
             "public_forward": public, "key_file": path,
             "user": credentials[0] if credentials else None, "connect_timeout_s": timeout_s,
             "udp_buffer": buffer, "log_level": level.lower(),
             "session": _effective("client", tuned)}
        )  # fmt: skip
        return
    import asyncio

    from tierwise.relay.run import run_client

    _setup(level)
    for listen, target in exposed:
        _warn_public(listen, target)
    asyncio.run(
        run_client(
            key, gw_addr, socks_addr, forwards, credentials,
            connect_timeout_s=timeout_s, udp_buffer_bytes=buffer, session=tuned,
        )
    )  # fmt: skip


def _session(cfg: dict, path: Path | None, side: str, *flags: str | None) -> dict:
    """The ``[session]`` table and the tuning flags, checked (tuning.py)."""
    from tierwise.relay.tuning import FLAGS, session_settings

    source = str(path) if path is not None else "command line"
    return session_settings(cfg.get("session"), source, side, dict(zip(FLAGS, flags, strict=True)))


def _effective(side: str, tuned: dict, **extra: Any) -> dict:
    """Every tunable the session will run with (what ``relay stats --json`` shows)."""
    from tierwise.proto.relay import RelayConfig
    from tierwise.relay.client import DEAD_PEER_S
    from tierwise.relay.gateway import IDLE_TIMEOUT_S
    from tierwise.relay.tuning import effective

    side_defaults = {"dead_peer_s": DEAD_PEER_S} if side == "client" else {
        "idle_timeout_s": IDLE_TIMEOUT_S}  # fmt: skip
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


def _warn_public(listen: tuple[str, int], target: tuple[str, int]) -> None:
    import logging

    logging.getLogger("tierwise.relay").warning(
        "--forward on %s has no authentication: anyone who reaches it reaches %s; firewall it",
        format_address(listen), format_address(target),
    )  # fmt: skip


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


@relay_app.command()
def stats(
    client_addr: Annotated[
        str | None, typer.Option("--client", help="A running client's SOCKS address.")
    ] = None,
    gateway_addr: Annotated[
        str | None, typer.Option("--gateway", help="A running gateway's --stats address.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON (SI units).")] = False,
) -> None:
    """A running relay's measurements: a client's session (RTT, bandwidth, loss, FEC
    overhead, streams) or a gateway's sessions and security counters."""
    import asyncio

    from tierwise.relay.run import fetch_stats

    if (client_addr is None) == (gateway_addr is None):
        raise ScenarioError(
            "give exactly one of --client HOST:PORT (a client's SOCKS address) or "
            "--gateway HOST:PORT (a gateway's --stats address)",
            path="--client/--gateway",
        )
    if client_addr is not None:
        data = asyncio.run(fetch_stats(parse_address(client_addr, "--client")))
    else:
        addr = parse_stats_addr(gateway_addr, "--gateway")  # type: ignore[arg-type]
        data = asyncio.run(fetch_stats(addr, role="gateway"))
    if json_out:
        emit(json.dumps(data, indent=2) + "\n")
        return
    import io

    from rich.console import Console

    try:
        tty = sys.stdout is not None and sys.stdout.isatty()
    except ValueError:  # closed
        tty = False
    # a file or a pipe: the sessions' rows whole, not cut at 80
    width = Console().width if tty else 160
    # drawn whole first, then written at once: a failed write is one line, not half a table
    console = Console(file=io.StringIO(), width=width, force_terminal=tty)
    console.print(_measures_table(data))
    if data.get("role") == "gateway":
        console.print(_sessions_table(data))
    emit(console.file.getvalue())  # type: ignore[attr-defined]


def _cell(value: Any) -> str:
    if value is None:
        return "—"  # not measured yet (null in the JSON)
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _measures_table(data: dict):  # type: ignore[no-untyped-def]
    """Every scalar as a row; a nested table's (``session``, ``totals``) as ``name.key``."""
    from rich.table import Table

    table = Table("measure", "value")
    rows = {k: v for k, v in data.items() if not isinstance(v, dict | list)}
    for name in ("session", "totals"):
        rows.update({f"{name}.{k}": v for k, v in data.get(name, {}).items()})
    for key, value in rows.items():
        table.add_row(key, _cell(value))
    return table


# the sessions table, in the units an operator reads (the JSON stays in SI units)
SESSION_COLUMNS: dict[str, Any] = {
    "session": lambda e: e["id"],
    "client": lambda e: e["peer"],
    "age s": lambda e: f"{e['age_s']:.0f}",
    "srtt ms": lambda e: f"{e['srtt_s'] * 1e3:.1f}",
    "Mbit/s": lambda e: f"{e['bandwidth_bytes_per_s'] * 8e-6:.1f}",
    "loss in/out %": lambda e: f"{e['loss_in'] * 100:.1f}/{e['loss_out'] * 100:.1f}",
    "FEC %": lambda e: f"{e['fec_overhead'] * 100:.1f}",
    "datagram B": lambda e: str(e["datagram_bytes"]),  # this end's, after path MTU discovery
    "streams": lambda e: str(e["streams"]),
    "MB in/out": lambda e: f"{e['bytes_received'] / 1e6:.2f}/{e['bytes_sent'] / 1e6:.2f}",
}


def _sessions_table(data: dict):  # type: ignore[no-untyped-def]
    """The gateway's busiest sessions, one row each."""
    from rich import box
    from rich.table import Column, Table

    listed, total = data.get("sessions_listed", 0), data.get("sessions_open", 0)
    title = f"sessions: the {listed} busiest of {total} (by bytes carried)"
    columns = [Column(name, no_wrap=True) for name in SESSION_COLUMNS]
    table = Table(*columns, title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    for entry in data.get("sessions", []):
        table.add_row(*(_shown(cell, entry) for cell in SESSION_COLUMNS.values()))
    return table


def _shown(cell: Any, entry: dict) -> str:
    """A session's cell; "-" for a figure not measured yet (``null`` in the JSON)."""
    try:
        return cell(entry)
    except (TypeError, KeyError):
        return "-"
