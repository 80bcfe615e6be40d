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

import ipaddress
import json
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

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
    "session": (dict, None),
}
CONNECT_TIMEOUT_S = (0.1, 300.0)
_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def parse_addr(text: str, flag: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``; the host an IP literal or a DNS name."""
    host, sep, port = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or len(port) > 5:
        raise ScenarioError(f"expected HOST:PORT, got {shown(text)}", path=flag)
    if not _valid_host(host, bracketed):
        raise ScenarioError(
            f"{shown(host)} is neither an IP address nor a host name "
            "(IPv6 goes in brackets: [::1]:8000)",
            path=flag,
        )
    return host, int(port)


def parse_stats_addr(text: str, flag: str = "--stats") -> tuple[str, int]:
    """``HOST:PORT``, or a bare ``PORT`` on loopback (127.0.0.1), the safe default."""
    if text.isdigit() and len(text) <= 5:
        if not 0 < int(text) < 65536:
            raise ScenarioError(f"expected a port from 1 to 65535, got {shown(text)}", path=flag)
        return "127.0.0.1", int(text)
    return parse_addr(text, flag)


def _valid_host(host: str, bracketed: bool) -> bool:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None:
        return bracketed == (ip.version == 6)
    if bracketed or len(host) > 253 or host.replace(".", "").isdigit():
        return False
    return all(_LABEL.fullmatch(label) for label in host.rstrip(".").split("."))


def _config(path: Path | None, keys: dict[str, tuple[type, tuple[int, int] | None]]) -> dict:
    """The file's settings, checked against ``keys``; relative paths made absolute."""
    if path is None:
        return {}
    from tierwise.tomlfile import read_toml

    cfg = read_toml(path)
    for key, value in cfg.items():
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


def _check_value(value: Any, kind: type, bounds: Any, source: str, key: str) -> None:
    if kind is list:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        what = "a list of strings"
    else:
        ok = isinstance(value, kind) and not isinstance(value, bool)
        what = {str: "a string", int: "an integer"}[kind]
    if not ok:
        raise ScenarioError(f"expected {what}, got {shown(value)}", source=source, path=key)
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise ScenarioError(
            f"must be in [{bounds[0]}, {bounds[1]}], got {shown(value)}", source=source, path=key
        )


def _int(value: int | None, cfg: dict, key: str, default: int, keys: dict) -> int:
    if value is None:
        return cfg.get(key, default)
    _check_value(value, int, keys[key][1], "command line", "--" + key.replace("_", "-"))
    return value


def _level(flag: str | None, cfg: dict) -> str:
    level = (flag or cfg.get("log_level", "info")).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ScenarioError(
            f"unknown log level {shown(level.lower())}; expected debug, info, warning or error",
            path="--log-level",
        )
    return level


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


def _timeout_s(flag: str | None, cfg: dict) -> float:
    from tierwise.errors import UnitError
    from tierwise.units import parse_quantity

    text = flag or cfg.get("connect_timeout", "10 s")
    try:
        seconds = parse_quantity(text, "time")
    except UnitError as exc:
        raise ScenarioError(str(exc), path="--connect-timeout") from None
    low, high = CONNECT_TIMEOUT_S
    if not low <= seconds <= high:
        raise ScenarioError(
            f"must be between {low:g} s and {high:g} s, got {shown(text)}", path="--connect-timeout"
        )
    return seconds


def _print_check(settings: dict) -> None:
    sys.stdout.write(json.dumps(settings, indent=2, default=str) + "\n")


@relay_app.command()
def keygen(
    out: Annotated[Path | None, typer.Option("--out", help="Write a new 0600 key file.")] = None,
) -> None:
    """Print (or write) a new 256-bit pre-shared key."""
    from tierwise.relay.keys import generate_key, write_key

    key = generate_key()
    if out is None:
        _private_stdout()
        sys.stdout.write(key + "\n")
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
    tuned = _session(
        cfg, config, "gateway", stream_window, session_window, fec_target, idle_timeout,
        initial_rate, max_datagram,
    )  # fmt: skip
    level = _level(log_level, cfg)
    addr = parse_addr(listen or cfg.get("listen", "0.0.0.0:7443"), "--listen")
    allowed = {parse_addr(a, "--allow") for a in (allow or cfg.get("allow", []))}
    if not allowed:
        raise ScenarioError("at least one --allow HOST:PORT is required", path="--allow")
    sessions = _int(max_sessions, cfg, "max_sessions", 64, GATEWAY_KEYS)
    streams = _int(max_streams, cfg, "max_streams", 1024, GATEWAY_KEYS)
    stats_text = stats or cfg.get("stats")
    stats_addr = parse_stats_addr(stats_text) if stats_text is not None else None
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
        list[str] | None, typer.Option(help="LISTEN=TARGET, both HOST:PORT (repeatable).")
    ] = None,
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
    tuned = _session(
        cfg, config, "client", stream_window, session_window, fec_target, idle_timeout,
        initial_rate, max_datagram,
    )  # fmt: skip
    level = _level(log_level, cfg)
    gw = gateway or cfg.get("gateway")
    if gw is None:
        raise ScenarioError("the gateway address is required", path="--gateway")
    gw_addr = parse_addr(gw, "--gateway")
    socks_addr = parse_addr(socks or cfg.get("socks", "127.0.0.1:1080"), "--socks")
    forwards = [_forward(item) for item in forward or cfg.get("forward", [])]
    credentials = _credentials(user or cfg.get("user"), password_file, cfg, socks_addr)
    timeout_s = _timeout_s(connect_timeout, cfg)
    buffer = _int(udp_buffer, cfg, "udp_buffer", 1 << 20, CLIENT_KEYS)
    path = _key_path(key_file, cfg)
    key = _read_key(path)
    if check:
        _print_check(
            {"gateway": gw_addr, "socks": socks_addr, "forward": forwards, "key_file": path,
             "user": credentials[0] if credentials else None, "connect_timeout_s": timeout_s,
             "udp_buffer": buffer, "log_level": level.lower(),
             "session": _effective("client", tuned)}
        )  # fmt: skip
        return
    import asyncio

    from tierwise.relay.run import run_client

    _setup(level)
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


def _forward(item: str) -> tuple[tuple[str, int], tuple[str, int]]:
    listen, sep, target = item.partition("=")
    if not sep:
        raise ScenarioError(f"expected LISTEN=TARGET, got {shown(item)}", path="--forward")
    return parse_addr(listen, "--forward"), parse_addr(target, "--forward")


def _credentials(
    user: str | None, flag: Path | None, cfg: dict, socks_addr: tuple[str, int]
) -> tuple[str, str] | None:
    path = flag or (Path(cfg["password_file"]) if "password_file" in cfg else None)
    if user is not None:
        if path is None:
            raise ScenarioError("--user needs --password-file", path="--password-file")
        from tierwise.tomlfile import read_text

        password = read_text(path).strip()
        if not 0 < len(user.encode()) < 256 or not 0 < len(password.encode()) < 256:
            raise ScenarioError("user and password must be 1–255 bytes (RFC 1929)", path="--user")
        return user, password
    if not ipaddress.ip_address(_resolve_literal(socks_addr[0])).is_loopback:
        raise ScenarioError(
            "SOCKS without a password may listen on loopback only; add --user", path="--socks"
        )
    return None


def _resolve_literal(host: str) -> str:
    return "127.0.0.1" if host == "localhost" else host if _is_ip(host) else "0.0.0.0"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


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
        data = asyncio.run(fetch_stats(parse_addr(client_addr, "--client")))
    else:
        addr = parse_stats_addr(gateway_addr, "--gateway")  # type: ignore[arg-type]
        data = asyncio.run(fetch_stats(addr, role="gateway"))
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a file or a pipe: the sessions' rows whole, not cut at 80
        console = Console(width=160)
    console.print(_measures_table(data))
    if data.get("role") == "gateway":
        console.print(_sessions_table(data))


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
