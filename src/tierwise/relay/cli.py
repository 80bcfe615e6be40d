"""``tierwise relay …``: keygen, gateway, client, stats (§12.3.5).

Only typer and the standard library are imported here; the relay itself loads
inside each command, so ``tierwise --help`` stays fast.
"""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path
from typing import Annotated

import typer

from tierwise.errors import ScenarioError

__all__ = ["relay_app"]

relay_app = typer.Typer(
    help="An accelerated, authenticated client–gateway transport (SOCKS5 in, TCP out).",
    no_args_is_help=True,
)

KeyOpt = Annotated[Path | None, typer.Option("--key-file", help="Key from `relay keygen` (0600).")]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="TOML file with the same keys as the flags.")
]
LogOpt = Annotated[str, typer.Option("--log-level", help="debug, info, warning or error.")]


def parse_addr(text: str, flag: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ScenarioError(f"expected HOST:PORT, got {text!r}", source="command line", path=flag)
    return host, int(port)


def _config(path: Path | None) -> dict:
    if path is None:
        return {}
    from tierwise.tomlfile import read_toml

    return read_toml(path)


def _setup(level: str) -> None:
    import logging

    if level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ScenarioError(f"unknown log level {level!r}", path="--log-level")
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


def _key(flag: Path | None, cfg: dict) -> bytes:
    from tierwise.relay.keys import read_key

    path = flag or (Path(cfg["key_file"]) if "key_file" in cfg else None)
    if path is None:
        raise ScenarioError("a key is required", source="command line", path="--key-file")
    return read_key(path)


@relay_app.command()
def keygen(
    out: Annotated[Path | None, typer.Option("--out", help="Write a new 0600 key file.")] = None,
) -> None:
    """Print (or write) a new 256-bit pre-shared key."""
    from tierwise.relay.keys import generate_key, write_key

    key = generate_key()
    if out is None:
        sys.stdout.write(key + "\n")
    else:
        write_key(out, key)


@relay_app.command()
def gateway(
    listen: Annotated[str | None, typer.Option(help="UDP address to listen on.")] = None,
    allow: Annotated[
        list[str] | None, typer.Option(help="Allowed destination HOST:PORT (repeatable).")
    ] = None,
    key_file: KeyOpt = None,
    config: ConfigOpt = None,
    log_level: LogOpt = "info",
) -> None:
    """Run the gateway next to the service; it connects only to --allow destinations."""
    import asyncio

    from tierwise.relay.run import run_gateway

    cfg = _config(config)
    _setup(log_level)
    addr = parse_addr(listen or cfg.get("listen", "0.0.0.0:7443"), "--listen")
    allowed = {parse_addr(a, "--allow") for a in (allow or cfg.get("allow", []))}
    if not allowed:
        raise ScenarioError("at least one --allow HOST:PORT is required", path="--allow")
    asyncio.run(run_gateway(_key(key_file, cfg), addr, allowed))


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
    key_file: KeyOpt = None,
    config: ConfigOpt = None,
    log_level: LogOpt = "info",
) -> None:
    """Run the client: a SOCKS5 proxy and forwarded ports over one relay session."""
    import asyncio

    from tierwise.relay.run import run_client

    cfg = _config(config)
    _setup(log_level)
    gw = gateway or cfg.get("gateway")
    if gw is None:
        raise ScenarioError("the gateway address is required", path="--gateway")
    socks_addr = parse_addr(socks or cfg.get("socks", "127.0.0.1:1080"), "--socks")
    forwards = []
    for item in forward or cfg.get("forward", []):
        listen, sep, target = item.partition("=")
        if not sep:
            raise ScenarioError(f"expected LISTEN=TARGET, got {item!r}", path="--forward")
        forwards.append((parse_addr(listen, "--forward"), parse_addr(target, "--forward")))
    credentials = None
    if user is not None:
        if password_file is None:
            raise ScenarioError("--user needs --password-file", path="--password-file")
        from tierwise.tomlfile import read_text

        credentials = (user, read_text(password_file).strip())
    elif not ipaddress.ip_address(_resolve_literal(socks_addr[0])).is_loopback:
        raise ScenarioError(
            "SOCKS without a password may listen on loopback only; add --user", path="--socks"
        )
    key = _key(key_file, cfg)
    asyncio.run(run_client(key, parse_addr(gw, "--gateway"), socks_addr, forwards, credentials))


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
    client_addr: Annotated[str, typer.Option("--client", help="The client's SOCKS address.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON (SI units).")] = False,
) -> None:
    """RTT, bandwidth, loss, FEC overhead and streams of a running client's session."""
    import asyncio
    import json

    from tierwise.relay.run import fetch_stats

    data = asyncio.run(fetch_stats(parse_addr(client_addr, "--client")))
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("measure", "value")
    for key, value in data.items():
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    Console().print(table)
