"""``tierwise route``: run the gateway, read its decisions, replay them under other strategies.

Only typer and the standard library are imported here; the gateway (starlette,
uvicorn, httpx, numpy through the planner) loads when a command runs.
"""

from __future__ import annotations

import json
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
) -> None:
    """Run the gateway: tierwise route --config route.toml."""
    if ctx.invoked_subcommand is not None:
        return
    if config is None:
        raise ScenarioError("give --config route.toml (see src/tierwise/examples/route.toml)")
    serve(config, port)


def serve(config: Path, port: int | None = None) -> None:
    """Load ``config``, resolve every site with the planner and serve until interrupted."""
    import uvicorn

    from tierwise.catalog import load_catalog
    from tierwise.route.config import load_route
    from tierwise.route.gateway import Router
    from tierwise.route.predict import site_model

    cfg = load_route(config)
    if port is not None:
        cfg = cfg.model_copy(update={"gateway": cfg.gateway.model_copy(update={"port": port})})
    catalog = load_catalog()
    models = [site_model(s, catalog, str(config)) for s in cfg.site]
    router = Router(cfg, models)
    for s in cfg.site:
        s.api_key()  # an unset key variable is a config error now, not at the first request
    g = cfg.gateway
    from tierwise.listen import listen_socket

    sock = listen_socket(g.host, g.port, source="gateway.port")  # bind errors: one line, exit 2
    sites = ", ".join(f"{m.site.name} ({m.site.tier}, {m.site.url})" for m in models)
    print(f"tierwise route on http://{g.host}:{g.port} → {sites}", file=sys.stderr, flush=True)
    from tierwise.route.coalesce import coalescing_protocol

    config_ = uvicorn.Config(
        router.app, log_level="warning", access_log=False, http=coalescing_protocol()
    )
    uvicorn.Server(config_).run(sockets=[sock])


def _log_path(config: Path | None, log: Path | None) -> Path:
    if log is not None:
        return log
    if config is not None:
        from tierwise.route.config import load_route

        return Path(load_route(config).gateway.decisions_log)
    return Path("route-decisions.jsonl")


@route_app.command()
def decisions(
    since: Annotated[str, typer.Option("--since", help="How far back, e.g. '10 min'.")] = "1 h",
    config: ConfigOpt = None,
    log: Annotated[Path | None, typer.Option("--log", help="The decisions log.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Per request: predicted time per site, the choice, the actual time and its stages."""
    from tierwise.route.replay import read_log
    from tierwise.route.view import render_decisions, since_seconds

    cutoff = time.time() - since_seconds(since)
    records = [r for r in read_log(_log_path(config, log)) if r.get("ts", 0) >= cutoff]
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
