"""``tierwise relay …``: keygen, gateway, client, stats (§12.3.5).

Only typer and the standard library are imported here; the relay itself loads
inside each command, so ``tierwise --help`` stays fast. The commands are thin:
:mod:`.config` merges the TOML file and the flags and checks them (``--config``,
``--check``), :mod:`.view` prints, :mod:`.run` runs.
"""

from __future__ import annotations

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
PathMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--path-memory",
        help="State file of what sessions measured of each path, so a new session starts "
        "at the path's rate (default: the user's state directory); off: none.",
    ),
]
MaxDatagramOpt = Annotated[
    str | None,
    typer.Option(
        "--max-datagram",
        help="Largest datagram in bytes (default 1350); above it the session discovers the "
        "path's MTU, e.g. 8876 for a 9000-byte jumbo path.",
    ),
]


@relay_app.command()
def keygen(
    out: Annotated[Path | None, typer.Option("--out", help="Write a new 0600 key file.")] = None,
) -> None:
    """Print (or write) a new 256-bit pre-shared key."""
    from tierwise.relay.keys import generate_key, write_key
    from tierwise.relay.view import emit

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
    path_memory: PathMemoryOpt = None,
    key_file: KeyOpt = None,
    config: ConfigOpt = None,
    log_level: LogOpt = None,
    check: CheckOpt = False,
) -> None:
    """Run the gateway next to the service; it connects only to --allow destinations."""
    from tierwise.relay.config import gateway_settings
    from tierwise.relay.view import emit

    settings = gateway_settings(
        config, listen=listen, allow=allow, max_sessions=max_sessions, max_streams=max_streams,
        stats=stats, key_file=key_file, log_level=log_level, path_memory=path_memory,
        tuning=(stream_window, session_window, fec_target, idle_timeout, initial_rate,
                max_datagram),
    )  # fmt: skip
    if check:
        emit(settings.check())
        return
    import asyncio

    from tierwise.relay.run import run_gateway

    _setup(settings.log_level)
    asyncio.run(
        run_gateway(
            settings.key, settings.listen, settings.allow, max_sessions=settings.max_sessions,
            max_streams=settings.max_streams, session=settings.session, stats=settings.stats,
            path_memory=settings.path_memory,
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
    path_memory: PathMemoryOpt = None,
    key_file: KeyOpt = None,
    config: ConfigOpt = None,
    log_level: LogOpt = None,
    check: CheckOpt = False,
) -> None:
    """Run the client: a SOCKS5 proxy and forwarded ports over one relay session."""
    from tierwise.relay.config import client_settings
    from tierwise.relay.view import emit

    settings = client_settings(
        config, gateway=gateway, socks=socks, forward=forward, public_forward=public_forward,
        user=user, password_file=password_file, connect_timeout=connect_timeout,
        udp_buffer=udp_buffer, key_file=key_file, log_level=log_level, path_memory=path_memory,
        tuning=(stream_window, session_window, fec_target, idle_timeout, initial_rate,
                max_datagram),
    )  # fmt: skip
    if check:
        emit(settings.check())
        return
    import asyncio

    from tierwise.relay.run import run_client

    _setup(settings.log_level)
    for listen, target in settings.exposed:
        _warn_public(listen, target)
    asyncio.run(
        run_client(
            settings.key, settings.gateway, settings.socks, settings.forwards,
            settings.credentials, connect_timeout_s=settings.connect_timeout_s,
            udp_buffer_bytes=settings.udp_buffer, session=settings.session,
            path_memory=settings.path_memory,
        )
    )  # fmt: skip


def _setup(level: str) -> None:
    import logging

    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )


def _warn_public(listen: tuple[str, int], target: tuple[str, int]) -> None:
    import logging

    from tierwise.addresses import format_address

    logging.getLogger("tierwise.relay").warning(
        "--forward on %s has no authentication: anyone who reaches it reaches %s; firewall it",
        format_address(listen), format_address(target),
    )  # fmt: skip


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

    from tierwise.addresses import parse_address
    from tierwise.relay.config import parse_stats_addr
    from tierwise.relay.run import fetch_stats
    from tierwise.relay.view import print_stats

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
    print_stats(data, as_json=json_out)
