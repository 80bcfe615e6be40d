"""``tierwise route``: run the gateway, read its decisions, replay them under other strategies.

Only typer and the standard library are imported here; the gateway (starlette,
uvicorn, httpx, numpy through the planner) loads when a command runs.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from tierwise.errors import ScenarioError

__all__ = ["route_app"]

route_app = typer.Typer(
    help="Route each OpenAI-compatible request to the site with the best predicted time.",
    invoke_without_command=True,
    no_args_is_help=False,
)

ConfigOpt = Annotated[Path | None, typer.Option("--config", help="route.toml.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@route_app.callback()
def route(
    ctx: typer.Context,
    config: ConfigOpt = None,
    port: Annotated[int | None, typer.Option("--port", help="Override gateway.port.")] = None,
    public_without_keys: Annotated[
        bool,
        typer.Option(
            "--public-without-keys",
            help="Serve beyond loopback without client keys (anyone reaching it spends "
            "the sites' API keys).",
        ),
    ] = False,
    state: Annotated[
        str | None,
        typer.Option(
            "--state",
            help="Override gateway.state: redis://HOST:PORT/DB (rediss:// for TLS), the "
            "fleet's shared state.",
        ),
    ] = None,
    replica: Annotated[
        str | None, typer.Option("--replica", help="Override gateway.replica (its fleet name).")
    ] = None,
) -> None:
    """Run the gateway: tierwise route --config route.toml."""
    if ctx.invoked_subcommand is not None:
        return
    if config is None:
        raise ScenarioError("give --config route.toml (see src/tierwise/examples/route.toml)")
    serve(config, port, public_without_keys, state, replica)


def serve(
    config: Path,
    port: int | None = None,
    public_without_keys: bool = False,
    state: str | None = None,
    replica: str | None = None,
) -> None:
    """Load ``config``, resolve every site with the planner and serve until interrupted."""
    import uvicorn

    from tierwise.catalog import load_catalog
    from tierwise.route.config import load_route
    from tierwise.route.edge import check_exposure, guarded_protocol
    from tierwise.route.gateway import Router
    from tierwise.route.predict import site_model

    cfg = load_route(config)
    changes = {"port": port, "state": state, "replica": replica}
    if changes := {k: v for k, v in changes.items() if v is not None}:
        cfg = cfg.model_copy(update={"gateway": _gateway_with(cfg.gateway, changes)})
    try:
        check_exposure(cfg.gateway, public_without_keys)
    except ScenarioError as exc:
        raise ScenarioError(exc.detail, source=str(config), path=exc.path) from None
    catalog = load_catalog()
    models = [site_model(s, catalog, str(config)) for s in cfg.site]
    target = None
    if (g := cfg.gateway).state is not None:  # a bad URL or password file: exit 2 now
        from tierwise.route.fleetconf import state_target

        target = state_target(g.state, g.state_password_file, g.state_ca_file)
    router = Router(cfg, models, state=target)
    for s in cfg.site:
        s.api_key()  # an unset key variable is a config error now, not at the first request
        s.tls()  # so is a CA file that does not load
    g = cfg.gateway
    from tierwise.listen import listen_socket

    sock = listen_socket(g.host, g.port, source="gateway.port")  # bind errors: one line, exit 2
    sites = ", ".join(f"{m.site.name} ({m.site.tier}, {m.site.url})" for m in models)
    print(f"tierwise route on http://{g.host}:{g.port} → {sites}", file=sys.stderr, flush=True)
    limits = (int(g.max_body), int(g.max_header), g.header_timeout)
    # an idle kept-alive connection is closed by the guarded protocol after header_timeout,
    # not by uvicorn's 5 s: clients' pools (httpx, the OpenAI SDK) keep idle connections
    # 5 s too, and a close racing their reuse would fail a request they never saw answered
    config_ = uvicorn.Config(
        router.app,
        log_level="warning",
        access_log=False,
        # nothing reads the client's address, so no X-Forwarded-* is trusted or parsed
        # (uvicorn's default wraps every request in its proxy-headers middleware)
        proxy_headers=False,
        http=guarded_protocol(*limits),
        timeout_keep_alive=math.ceil(g.header_timeout) + 1,
    )
    if g.keys_file is not None:  # SIGHUP: read the keys file again (it is also watched)
        import signal

        signal.signal(signal.SIGHUP, lambda *_: setattr(router.gate, "reload_asked", True))
    uvicorn.Server(config_).run(sockets=[sock])


def _gateway_with(gateway, changes: dict):
    """``gateway`` with command-line overrides, validated as the file's values are."""
    from tierwise.route.config import Gateway
    from tierwise.scenario.schema import ErrorAt

    try:
        Gateway.model_validate(changes)  # each override checked as the file's value is
    except ValueError as exc:
        errors = getattr(exc, "errors", lambda: [])()
        first = errors[0] if errors else {"loc": (), "msg": str(exc)}
        cause = first.get("ctx", {}).get("error")
        msg, key = first["msg"], first["loc"][0] if first["loc"] else next(iter(changes))
        if isinstance(cause, ErrorAt):
            msg, key = str(cause), cause.key[0]
        raise ScenarioError(msg, source=f"--{str(key).replace('_', '-')}") from None
    return gateway.model_copy(update=changes)


def _log_paths(config: Path | None) -> list[Path]:
    """The config's decisions log — every replica's, if its name has ``{replica}``."""
    if config is None:
        return [Path("route-decisions.jsonl")]
    from tierwise.route.config import load_route

    name = load_route(config).gateway.decisions_log
    if "{replica}" not in name:
        return [Path(name)]
    pattern = Path(name.replace("{replica}", "*"))
    found = sorted(pattern.parent.glob(pattern.name))
    if not found:
        raise ScenarioError(f"no decisions logs match {pattern}", source=str(config))
    return found


@route_app.command()
def decisions(
    since: Annotated[str, typer.Option("--since", help="How far back, e.g. '10 min'.")] = "1 h",
    config: ConfigOpt = None,
    log: Annotated[
        list[Path] | None,
        typer.Option(
            "--log", help="A decisions log; repeat it for a fleet's replicas (merged by time)."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Per request: predicted time per site, the choice, the actual time and its stages."""
    from tierwise.route.replay import read_log
    from tierwise.route.view import render_decisions, since_seconds

    cutoff = time.time() - since_seconds(since)
    paths = log or _log_paths(config)
    records = [r for p in paths for r in read_log(p) if r.get("ts", 0) >= cutoff]
    records.sort(key=lambda r: r.get("ts", 0))
    if as_json:
        print(json.dumps(records))
        return
    render_decisions(records)


@route_app.command()
def replay(
    log: Annotated[Path, typer.Argument(help="A decisions log (JSONL).")],
    strategy: Annotated[
        str, typer.Option("--strategy", help="Comma-separated strategies.")
    ] = "predictive,lowest-latency,static",
    as_json: JsonOpt = False,
) -> None:
    """Replay a decisions log under other strategies and compare their total time."""
    from tierwise.route.replay import read_log
    from tierwise.route.replay import replay as run
    from tierwise.route.view import render_replay

    result = run(read_log(log), [s.strip() for s in strategy.split(",") if s.strip()])
    if as_json:
        print(json.dumps(result))
        return
    render_replay(result)


keys_app = typer.Typer(help="Client keys of the gateway (gateway.keys_file).", no_args_is_help=True)
route_app.add_typer(keys_app, name="keys")


@keys_app.command("add")
def keys_add(
    name: Annotated[str, typer.Argument(help="Who holds the key (shown in logs and metrics).")],
    keys_file: Annotated[
        Path, typer.Option("--keys-file", help="The keys file (created 0600 if missing).")
    ],
    rate: Annotated[
        float | None, typer.Option("--rate", help="Requests per second (default: key_rate).")
    ] = None,
    burst: Annotated[
        int | None, typer.Option("--burst", help="Requests at once after a quiet spell.")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", help="Requests in flight at most.")
    ] = None,
) -> None:
    """Add a client: print its new key once (the file keeps only its SHA-256)."""
    from tierwise.route.keys import add_key

    for flag, value in (("--rate", rate), ("--burst", burst), ("--concurrency", concurrency)):
        if value is not None and not value > 0:
            raise ScenarioError(f"must be positive, got {value}", source=flag)
    key = add_key(keys_file, name, rate, burst, concurrency)
    print(key)
    print(f"added client {name!r} to {keys_file}; the key is shown only now", file=sys.stderr)
